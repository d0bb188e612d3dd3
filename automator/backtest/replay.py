"""One policy replayed over history, step by step, as the service would have run it. Pure: the usage and the
look-ahead samples come through two functions (the Prometheus adapter's, or a test's).

At each step: the cluster history shows (automator/backtest/cluster.py) with what the simulated service
changed (victims gone from then on, preemptors bound on the node freed for them with its reclaim
annotations, so the planner's own cooldown and reclaim-count rules apply), the live adapter's usage at that
time, the per-pass and hourly eviction budgets, then the planner itself. A step without data is counted and
plans nothing (missing data never reads as idle): kube-state-metrics shows no pod or no node then, the usage
queries fail, or none of the GPU pods history shows running has a fresh recorded sample (the exporter's
data are missing; a pod whose own samples are missing or stale is protected as live, whatever the step).

Outcomes of every eviction, read forward in history:
- regret: a sample of the victim's recorded activity above its class's threshold within the look-ahead after
  the eviction (read past the window's end where Prometheus has it); busy_again_after is the time to the
  first one. Samples that cannot be read: regret (the eviction cannot be shown harmless), with a warning;
- GPU-hours reclaimed: the victim's GPUs times the time until history shows it ended (the step after the last
  step it was seen running; the window's end if it never ended);
- wait saved: from the eviction until history shows the preemptor started (kube_pod_start_time, else the
  step it was seen bound), or vanished, or the window ended; counted once per preemptor served.
A preemptor that already fits is left to the scheduler: the backtest does not bind it (history does).

With --notice-seconds the notices are replayed as the service gives them: a decision that gives notice
writes the notice annotations on its victims (in the overlay) and evicts nothing; a later step evicts them
only if the planner, on that step's data, still chooses them after the deadline; a notice the planner
withdraws (the victim busy again within the notice, ...) is counted by reason, never as an eviction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import takewhile
from typing import Any

from automator.backtest.cluster import Evidence, Frame, IndexedFrame, Overlay, cluster_at, has_data, indexed
from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.objects.priority_class import PriorityClass
from automator.objects.resources import FieldError
from automator.ports import PrometheusUnavailable
from automator.reclaim import planner
from automator.reclaim.annotations import notice_annotations, reclaim_annotations
from automator.reclaim.class_settings import class_settings
from automator.reclaim.cluster_index import SettingsCache, classes_by_name
from automator.reclaim.model import NOTICE, Plan, PlannerConfig, PodUsage, UsageWindow

# (windows, evaluation time, recent window seconds) -> usage, as PrometheusAdapter.usage answers
UsageFn = Callable[[Mapping[ObjectKey, UsageWindow], int, int], Mapping[ObjectKey, PodUsage]]
# (pods, eviction time, look-ahead seconds) -> each pod's (time, activity) samples after it
LookaheadFn = Callable[[Iterable[ObjectKey], float, int], Mapping[ObjectKey, Sequence[tuple[float, float]]]]


@dataclass(frozen=True)
class Policy:
    name: str
    config: PlannerConfig
    settings: Mapping[str, Any]  # flag name -> value, as the report shows them
    max_evictions_per_hour: int | None = None


@dataclass
class Eviction:
    at: float
    victim: ObjectKey
    uid: str
    gpus: int
    node: str
    preemptor: ObjectKey
    threshold: float
    regret: bool = False
    busy_again_after: float | None = None
    last_running: float = 0.0
    ended: float | None = None  # when history shows the victim ended (None: still open)
    gang: str | None = None  # the victim's gang: its members are one eviction, regret if any is busy again


@dataclass
class Wait:
    at: float
    preemptor: ObjectKey
    uid: str
    last_seen: float = 0.0
    saved: float | None = None  # None: still waiting in history


def busy_again_after(
    samples: Iterable[tuple[float, float]], at: float, threshold: float, lookahead: float
) -> float | None:
    """Seconds from `at` to the first sample above the threshold within the look-ahead, or None."""
    for stamp, value in sorted(samples):
        if at < stamp <= at + lookahead and value > threshold:
            return stamp - at
    return None


def gpu_hours(gpus: int, at: float, ended: float) -> float:
    return gpus * max(0.0, ended - at) / 3600.0


def idle_gpus(cluster: ClusterState, usage: Mapping[ObjectKey, PodUsage], config: PlannerConfig) -> int:
    """GPUs of bound pods whose known activity is at or below their class's threshold (unknown: not idle)."""
    settings = SettingsCache(classes_by_name(cluster.priority_classes), config)
    total = 0
    for pod in cluster.pods:
        known = usage.get(pod.key)
        if known is None or known.gpu_activity is None:
            continue
        if known.gpu_activity <= settings.named(pod.class_name)[1].gpu_threshold:
            try:
                total += pod.requests(config.gpu_resources).gpus
            except FieldError:
                continue
    return total


@dataclass
class Replay:
    policy: Policy
    priority_classes: Sequence[PriorityClass]
    evidence: Evidence
    step_seconds: int
    lookahead_seconds: int
    gone: set[str] = field(default_factory=set)
    placed: dict[str, tuple[str, float]] = field(default_factory=dict)
    annotations: dict[ObjectKey, dict[str, str]] = field(default_factory=dict)
    evictions: list[Eviction] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    steps: int = 0
    steps_without_data: int = 0
    timeline: list[tuple[float, int, int, int]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # The notices the simulated service gave (annotations on victims), how many, those withdrawn by reason.
    notices: dict[ObjectKey, dict[str, str]] = field(default_factory=dict)
    notices_given: int = 0
    notices_withdrawn: dict[str, int] = field(default_factory=dict)

    def step(self, t: int, samples: Frame | IndexedFrame, usage: UsageFn, lookahead: LookaheadFn) -> None:
        self.steps += 1
        frame = indexed(samples)
        if not has_data(frame):
            self._no_data(t)
            return
        self._settle(t, frame)
        config = self.policy.config
        cluster = cluster_at(
            frame, self.priority_classes, config.gpu_resources, self._overlay(), self.evidence
        )
        windows = planner.usage_windows(cluster, config)
        # History's GPU pods (evicted ones too) are asked with a window already asked: no extra query.
        running = frame.running_gpu_pods(config.gpu_resources)
        window = next(iter(windows.values()), UsageWindow(config.default_gpu_idle_seconds, 0))
        asked = {**dict.fromkeys(running, window), **windows}
        try:
            known = usage(asked, t, config.recent_window_seconds)
        except PrometheusUnavailable as e:
            self.warnings.append(f"{_stamp(t)}: no usage ({e.reason}): step counted without data")
            self._no_data(t)
            return
        if running and not any(known[k].gpu_recent_max is not None for k in running if k in known):
            self._no_data(t)  # none of history's GPU pods has a fresh sample: the exporter's data are missing
            return
        now = datetime.fromtimestamp(t, tz=UTC)
        budget = config.max_evictions_per_pass
        if self.policy.max_evictions_per_hour is not None:  # a sliding hour, as the service keeps it
            last_hour = sum(1 for _ in takewhile(lambda e: t - e.at < 3600, reversed(self.evictions)))
            budget = min(budget, max(0, self.policy.max_evictions_per_hour - last_hour))
        plan = planner.plan(cluster, known, config, now, budget=budget)
        self._notice(now, cluster, plan)
        new = self._commit(t, now, cluster, [d for d in plan.decisions if d.action != NOTICE])
        self._regret(t, new, lookahead)
        regret = sum(1 for e in new if e.regret)
        self.timeline.append((float(t), idle_gpus(cluster, known, config), len(new), regret))

    def _no_data(self, t: int) -> None:
        self.steps_without_data += 1
        self.timeline.append((float(t), 0, 0, 0))

    def _notice(self, now: datetime, cluster: ClusterState, plan: Plan) -> None:
        """What the service does with the plan's notices: withdrawn ones removed (counted by reason), new
        ones written on the victims not yet noticed for their preemptor; notices of pods history no longer
        shows are forgotten (a pod recreated under the name starts without one)."""
        for w in plan.withdrawals:
            self.notices.pop(w.pod, None)
            self.notices_withdrawn[str(w.reason)] = self.notices_withdrawn.get(str(w.reason), 0) + 1
        listed = {p.key for p in cluster.pods}
        for k in [k for k in self.notices if k not in listed]:
            del self.notices[k]
        deadline = now + timedelta(seconds=self.policy.config.notice_seconds)
        for d in plan.decisions:
            if d.action != NOTICE:
                continue
            for v in d.victims:
                if v.noticed is None:
                    written = notice_annotations(deadline, d.target)
                    self.notices[v.pod] = {k: x for k, x in written.items() if x is not None}
                    self.notices_given += 1

    def _overlay(self) -> Overlay:
        consumed: dict[str, int] = {}
        for e in self.evictions:
            if e.ended is None:
                consumed[e.victim.namespace] = consumed.get(e.victim.namespace, 0) + 1
        annotations = {**self.notices, **self.annotations}
        return Overlay(frozenset(self.gone), self.placed, annotations, consumed)

    def _settle(self, t: int, frame: IndexedFrame) -> None:
        """Outcomes history now shows: victims that ended, preemptors that started or vanished."""
        history = frame.history()
        for e in self.evictions:
            if e.ended is not None:
                continue
            pod = history.get(e.uid)
            if pod is not None and pod.running:
                e.last_running = t
            else:
                e.ended = min(float(t), e.last_running + self.step_seconds)
        for w in self.waits:
            if w.saved is not None:
                continue
            pod = history.get(w.uid)
            if pod is None:
                w.saved = min(float(t), w.last_seen + self.step_seconds) - w.at
            elif pod.start_time is not None or pod.node:
                started = pod.start_time if pod.start_time is not None else float(t)
                w.saved = max(0.0, started - w.at)
            else:
                w.last_seen = t

    def _commit(
        self, t: int, now: datetime, cluster: ClusterState, decisions: Sequence[Any]
    ) -> list[Eviction]:
        pods = {p.key: p for p in cluster.pods}
        classes = classes_by_name(list(self.priority_classes))
        new: list[Eviction] = []
        for d in decisions:
            for v in d.victims:
                self.notices.pop(v.pod, None)
            preemptor = pods[d.preemptor]
            self.annotations[d.preemptor] = reclaim_annotations(preemptor, d, now)
            uid = _uid_of(preemptor)
            self.placed[uid] = (d.node, float(t))
            self.waits.append(Wait(float(t), d.preemptor, uid, float(t)))
            for v in d.victims:
                victim = pods[v.pod]
                pc = classes.get(str(victim.class_name))
                threshold = class_settings(pc, self.policy.config).gpu_threshold
                e = Eviction(
                    float(t),
                    v.pod,
                    _uid_of(victim),
                    v.gpus,
                    v.node or d.node,
                    d.preemptor,
                    threshold,
                    last_running=t,
                    gang=v.gang,
                )
                self.gone.add(e.uid)
                new.append(e)
        self.evictions.extend(new)
        return new

    def _regret(self, t: int, new: list[Eviction], lookahead: LookaheadFn) -> None:
        if not new:
            return
        try:
            samples = lookahead([e.victim for e in new], float(t), self.lookahead_seconds)
        except PrometheusUnavailable as e:
            self.warnings.append(
                f"{_stamp(t)}: look-ahead unknown ({e.reason}): its evictions count as regret"
            )
            for ev in new:
                ev.regret = True
            return
        for ev in new:
            ev.busy_again_after = busy_again_after(
                samples.get(ev.victim, ()), ev.at, ev.threshold, self.lookahead_seconds
            )
            ev.regret = ev.busy_again_after is not None
        # A victim gang was evicted whole: it is regret when any member is busy again.
        regret_gangs = {ev.gang for ev in new if ev.gang is not None and ev.regret}
        for ev in new:
            if ev.gang in regret_gangs:
                ev.regret = True

    def finish(self, end: int) -> None:
        """The window ended: what is still open ends there."""
        for e in self.evictions:
            if e.ended is None:
                e.ended = float(end)
        for w in self.waits:
            if w.saved is None:
                w.saved = max(0.0, end - w.at)


def _uid_of(pod: Pod) -> str:
    return pod.uid or str(pod.key)


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
