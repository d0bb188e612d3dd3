"""One reclaim pass: snapshot, usage, plan, then act (enforce) or only report (dry-run).

Orchestration over two ports (automator/ports.py: KubeAdapter, UsageSource), so it runs the same against the
live adapters (kube.py, prom.py), the snapshot file and the test fakes, and imports none of them. The
decisions are the planner's; every message it logs or writes is report.py's.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from automator import planner, report
from automator.conventions import (
    LAST_RECLAIM_ANNOTATION,
    REASON_EVICTION_FAILED,
    REASON_GAVE_UP,
    REASON_INVALID_ANNOTATION,
    REASON_PREEMPTOR,
    REASON_VICTIM,
    RECLAIM_COUNT_ANNOTATION,
    RECLAIM_NODE_ANNOTATION,
    RECLAIM_VICTIMS_ANNOTATION,
    WRITTEN_ANNOTATIONS,
)
from automator.metrics import AutomatorMetrics
from automator.model import (
    ClusterState,
    Decision,
    JsonObj,
    Mode,
    PassOutcome,
    Plan,
    PlannerConfig,
    PodKey,
    PodUsage,
    Unresolved,
    UsageWindow,
    Victim,
)
from automator.ports import (
    EvictionOutcome,
    EvictionResult,
    KubeAdapter,
    KubernetesUnavailable,
    PrometheusUnavailable,
    UsageSource,
)
from automator.resources import annotations_of, is_terminating, rfc3339

log = logging.getLogger(__name__)

# A malformed annotation on a big class would otherwise write thousands of Events at once.
MAX_WARNING_EVENTS_PER_CLASS = 50
HOUR = timedelta(hours=1)
# Clock skew between the automator and Prometheus: reported above the first, no eviction above the second.
SKEW_WARN_SECONDS = 30.0
SKEW_MAX_SECONDS = 120.0


@dataclass
class ActuatorState:
    """What the service remembers between passes (per process; lost on failover, which is harmless)."""

    # Warnings already turned into Events: (class, annotation, value, pod).
    warned: set[tuple[str, str, str, PodKey]] = field(default_factory=set)
    # Preemptors we evicted for, when, and the annotations written (or meant to be): a backstop for the
    # annotations if patching failed or the next list does not show them yet, so a pass never evicts twice
    # for the same preemptor.
    reclaimed: dict[PodKey, tuple[datetime, dict[str, str]]] = field(default_factory=dict)
    # Times of accepted evictions in the last hour (--max-evictions-per-hour, a sliding window).
    evictions: deque[datetime] = field(default_factory=deque)
    # Preemptors already given a gave-up warning Event: (key, uid).
    gave_up_warned: set[tuple[PodKey, str]] = field(default_factory=set)

    def evictions_last_hour(self, now: datetime) -> int:
        while self.evictions and now - self.evictions[0] >= HOUR:
            self.evictions.popleft()
        return len(self.evictions)


@dataclass(frozen=True)
class Action:
    kind: str  # evict, annotate, event
    pod: str
    result: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "pod": self.pod, "result": self.result, "detail": self.detail}


@dataclass
class PassResult:
    mode: Mode
    at: datetime
    result: str  # a PassOutcome
    reason: str = ""
    plan: Plan | None = None  # enforce: the decisions acted on; dry-run: the plan as computed
    actions: list[Action] = field(default_factory=list)
    prometheus_queries: int = 0
    replans: int = 0
    duration_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.result == PassOutcome.OK

    @property
    def acted(self) -> bool:
        done = (EvictionOutcome.OK, EvictionOutcome.NOT_FOUND)
        return any(a.kind == "evict" and a.result in done for a in self.actions)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = (
            report.plan_to_json(self.plan)
            if self.plan is not None
            else {
                "decisions": [],
                "unresolved": [],
            }
        )
        body.update(
            mode=str(self.mode),
            timestamp=rfc3339(self.at),
            result=self.result,
            reason=self.reason,
            acted=self.acted,
            actions=[a.to_json() for a in self.actions],
            prometheus_queries=self.prometheus_queries,
            replans=self.replans,
            duration_seconds=round(self.duration_seconds, 6),
        )
        return body


def _parse_time(text: str) -> datetime | None:
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def with_reclaim_memory(
    cluster: ClusterState, reclaimed: Mapping[PodKey, tuple[datetime, Mapping[str, str]]]
) -> ClusterState:
    """The cluster with our remembered reclaim annotations written into preemptors that show older ones."""
    if not reclaimed:
        return cluster
    pods: list[JsonObj] = []
    for pod in cluster.pods:
        memory = reclaimed.get(PodKey.of(pod))
        if memory is not None:
            when, written = memory
            annotations = annotations_of(pod)
            seen = _parse_time(str(annotations.get(LAST_RECLAIM_ANNOTATION, "")))
            if LAST_RECLAIM_ANNOTATION not in annotations or (seen is not None and seen < when):
                pod = copy.deepcopy(pod)
                pod.setdefault("metadata", {}).setdefault("annotations", {}).update(written)
        pods.append(pod)
    return replace(cluster, pods=pods)


def reclaim_annotations(preemptor: JsonObj | None, d: Decision, now: datetime) -> dict[str, str]:
    """The four annotations written on a preemptor once victims were evicted for it."""
    try:
        previous = int(str(annotations_of(preemptor or {}).get(RECLAIM_COUNT_ANNOTATION, "0")).strip())
    except ValueError:
        previous = 0
    return {
        LAST_RECLAIM_ANNOTATION: rfc3339(now),
        RECLAIM_NODE_ANNOTATION: d.node,
        RECLAIM_VICTIMS_ANNOTATION: ",".join(str(v.pod) for v in d.victims),
        RECLAIM_COUNT_ANNOTATION: str(max(0, previous) + 1),
    }


def simulate(cluster: ClusterState, gone: set[PodKey], placed: Mapping[PodKey, str]) -> ClusterState:
    """The cluster as a re-plan should see it: evicted pods gone, served preemptors running where planned.

    A served preemptor is bound without a PodScheduled=True condition, so the planner neither serves it
    again nor offers it as a victim, and its GPUs stay taken on its node.
    """
    pods: list[JsonObj] = []
    for pod in cluster.pods:
        key = PodKey.of(pod)
        if key in gone:
            continue
        if key in placed:
            pod = copy.deepcopy(pod)
            pod.setdefault("spec", {})["nodeName"] = placed[key]
            pod.setdefault("status", {})["phase"] = "Running"
        pods.append(pod)
    return replace(cluster, pods=pods)


class _Stop(Exception):
    """End the pass's actions now (leadership lost, API throttling, an outcome that cannot be known)."""


@dataclass
class _Enforcer:
    kube: KubeAdapter
    cluster: ClusterState
    usage: Mapping[PodKey, PodUsage]
    windows: Mapping[PodKey, UsageWindow]
    config: PlannerConfig
    now: datetime
    state: ActuatorState
    metrics: AutomatorMetrics | None
    should_continue: Callable[[], bool]
    max_replans: int
    budget: int  # evictions this pass may still make (per pass and per hour)
    actions: list[Action] = field(default_factory=list)
    replans: int = 0
    stopped: str | None = None  # why the pass's actions ended early
    # Across re-plans: pods gone, pods never to be chosen again, preemptors placed and their victims.
    gone: set[PodKey] = field(default_factory=set)
    exclude: set[PodKey] = field(default_factory=set)
    placed: dict[PodKey, str] = field(default_factory=dict)
    evicted_for: dict[PodKey, list[Victim]] = field(default_factory=dict)
    last_decision: dict[PodKey, Decision] = field(default_factory=dict)
    skipped: dict[PodKey, str] = field(default_factory=dict)  # preemptors not acted on, and why

    def __post_init__(self) -> None:
        self.pods = {PodKey.of(p): p for p in self.cluster.pods}
        self.uids = {k: str((p.get("metadata") or {}).get("uid") or "") or None for k, p in self.pods.items()}

    def _leading(self, before: str) -> None:
        """No write once leadership is lost: checked before every eviction, patch and Event."""
        if not self.should_continue():
            raise _Stop(f"lost leadership before {before}")

    def _event(self, pod: PodKey, type_: str, reason: str, message: str) -> None:
        if not self.should_continue():
            self.actions.append(Action("event", str(pod), "skipped", f"{reason}: not the leader"))
            return
        uid = self.uids.get(pod)
        try:
            self.kube.event(pod, type_, reason, message, uid=uid)
            self.actions.append(Action("event", str(pod), "ok", reason))
        except KubernetesUnavailable as e:
            # An Event is a courtesy: losing one must not stop the pass.
            log.error("event %s on %s failed: %s", reason, pod, e)
            self.actions.append(Action("event", str(pod), "error", f"{reason}: {e}"))

    def _evict(self, pod: PodKey, dry_run: bool = False) -> EvictionResult:
        try:
            result = self.kube.evict(pod, uid=self.uids.get(pod), dry_run=dry_run)
        except KubernetesUnavailable as e:
            result = EvictionResult(EvictionOutcome.UNKNOWN, None, str(e))
        if not dry_run and self.metrics is not None:
            self.metrics.evictions.labels(result=str(result.outcome)).inc()
        return result

    def _resolve_unknown(self, pod: PodKey) -> tuple[bool, str | None]:
        """An eviction without an answer: read the pod before anything else is evicted.

        (evicted, why the pass must stop). A pod that cannot be read is taken as evicted (its preemptor
        enters cooldown, so no second victim goes for it) and the pass stops.
        """
        try:
            now = self.kube.get_pod(pod)
        except KubernetesUnavailable as e:
            return True, f"eviction of {pod} has no known outcome and the pod cannot be read: {e}"
        uid = self.uids.get(pod)
        if now is None or is_terminating(now):
            return True, None
        return bool(uid) and (now.get("metadata") or {}).get("uid") != uid, None

    def _preemptor_changed(self, key: PodKey) -> str | None:
        """Read the preemptor again just before its victims go: gone, scheduled, nominated or replaced."""
        try:
            now = self.kube.get_pod(key)
        except KubernetesUnavailable as e:
            raise _Stop(f"preemptor {key} cannot be read again: {e}") from e
        if now is None:
            return "preemptor-changed: the preemptor is gone"
        if (now.get("metadata") or {}).get("uid") != (self.pods.get(key, {}).get("metadata") or {}).get(
            "uid"
        ):
            return "preemptor-changed: the preemptor was replaced (new uid)"
        if (now.get("spec") or {}).get("nodeName"):
            return f"preemptor-changed: the preemptor was scheduled to {now['spec']['nodeName']}"
        nominated = (now.get("status") or {}).get("nominatedNodeName")
        if nominated:
            return f"scheduler-nominated: the scheduler nominated node {nominated}"
        return None

    def _refused(self, d: Decision, v: Victim, result: EvictionResult, dry_run: bool) -> None:
        """A victim that cannot be evicted now: never chosen again this pass; the caller re-plans."""
        if result.outcome is EvictionOutcome.THROTTLED:
            wait = f" (Retry-After {result.retry_after:g} s)" if result.retry_after is not None else ""
            raise _Stop(f"API throttling (429){wait} on the eviction of {v.pod}: the pass ends here")
        log.warning(
            "eviction%s of %s for %s refused: %s", " dry-run" if dry_run else "", v.pod, d.preemptor, result
        )
        if not dry_run and result.outcome is not EvictionOutcome.CONFLICT:
            message = report.eviction_failed_event(d.preemptor, result.outcome, result.message)
            self._event(v.pod, "Warning", REASON_EVICTION_FAILED, message)
        self.exclude.add(v.pod)

    def _evict_for(self, d: Decision) -> bool:
        """Evict a decision's victims, whole or not at all; False when one is refused (re-plan)."""
        self.last_decision[d.preemptor] = d
        self._leading(f"the victims of {d.preemptor}")
        changed = self._preemptor_changed(d.preemptor)
        if changed is not None:
            log.info("nothing evicted for %s: %s", d.preemptor, changed)
            self.skipped[d.preemptor] = changed
            return True
        if len(d.victims) > self.budget:
            self.skipped[d.preemptor] = f"eviction-budget: {self.budget} evictions left this pass"
            return True
        # A server-side dry run of every victim first: a decision is evicted whole or not at all.
        for v in d.victims:
            self._leading(f"the dry-run eviction of {v.pod}")
            result = self._evict(v.pod, dry_run=True)
            self.actions.append(
                Action("evict-dry-run", str(v.pod), str(result.outcome), f"for {d.preemptor}")
            )
            if result.outcome not in (EvictionOutcome.OK, EvictionOutcome.NOT_FOUND):
                self._refused(d, v, result, dry_run=True)
                return False
        for v in d.victims:
            self._leading(f"the eviction of {v.pod}")
            result = self._evict(v.pod)
            detail = f"for {d.preemptor}"
            if result.outcome is not EvictionOutcome.OK:
                detail += f": {result.status or 'no answer'} {result.message}"
            evicted = result.outcome in (EvictionOutcome.OK, EvictionOutcome.NOT_FOUND)
            stop: str | None = None
            if result.outcome is EvictionOutcome.UNKNOWN:
                evicted, stop = self._resolve_unknown(v.pod)
                detail += f"; pod read again: {'unreadable' if stop else 'evicted' if evicted else 'running'}"
            self.actions.append(Action("evict", str(v.pod), str(result.outcome), detail))
            if evicted:
                log.info("evicted %s for %s (%s)", v.pod, d.preemptor, result.outcome)
                self.gone.add(v.pod)
                self.evicted_for.setdefault(d.preemptor, []).append(v)
                self.budget -= 1
                self.state.evictions.append(self.now)
                if stop is not None:
                    raise _Stop(stop)
                continue
            self._refused(d, v, result, dry_run=False)
            return False
        self.placed[d.preemptor] = d.node
        return True

    def _act(self, plan: Plan) -> bool:
        """Act on one plan's decisions: True when an eviction was refused (re-plan)."""
        # Preemptors that already fit keep their node across re-plans, as in the first plan.
        self.placed.update((d.preemptor, d.node) for d in plan.already_fit)
        for d in plan.decisions:
            if d.preemptor in self.skipped or d.preemptor in self.placed:
                continue
            if not self._evict_for(d):
                return True
        return False

    def run(self, plan: Plan) -> Plan:
        current = plan
        try:
            while self._act(current):
                if self.replans >= self.max_replans:
                    log.warning(
                        "re-plan limit (%d) reached: remaining preemptors wait for the next pass",
                        self.replans,
                    )
                    break
                self.replans += 1
                if self.metrics is not None:
                    self.metrics.replans.inc()
                current = planner.plan(
                    simulate(self.cluster, self.gone, self.placed),
                    self.usage,
                    self.config,
                    self.now,
                    exclude=frozenset(self.exclude),
                    budget=self.budget,
                )
        except _Stop as e:
            self.stopped = str(e)
            log.warning("actions stopped: %s", e)
        done: list[Decision] = []
        for preemptor, victims in self.evicted_for.items():
            d = replace(
                self.last_decision[preemptor], victims=tuple(victims), gpus_freed=sum(v.gpus for v in victims)
            )
            done.append(d)
            self._finish(d, complete=preemptor in self.placed)
        served = set(self.placed) | set(self.evicted_for)
        unresolved = [u for u in current.unresolved if u.preemptor not in served]
        unresolved += [Unresolved(k, why) for k, why in self.skipped.items() if k not in served]
        why = self.stopped or "eviction refused and re-plans exhausted"
        unresolved += [
            Unresolved(d.preemptor, why)
            for d in current.decisions
            if d.preemptor not in served and d.preemptor not in self.skipped
        ]
        return replace(plan, decisions=done, unresolved=unresolved)

    def _finish(self, d: Decision, complete: bool) -> None:
        """Cooldown annotations and Events once victims were evicted for a preemptor."""
        written = reclaim_annotations(self.pods.get(d.preemptor), d, self.now)
        self.state.reclaimed[d.preemptor] = (self.now, written)
        if not self.should_continue():
            self.actions.append(Action("annotate", str(d.preemptor), "skipped", "not the leader"))
            return
        try:
            self.kube.annotate_preemptor(d.preemptor, written, uid=self.uids.get(d.preemptor))
            self.actions.append(Action("annotate", str(d.preemptor), "ok", ",".join(WRITTEN_ANNOTATIONS)))
        except KubernetesUnavailable as e:
            log.error("cooldown annotations on %s failed (kept in memory): %s", d.preemptor, e)
            self.actions.append(Action("annotate", str(d.preemptor), "error", str(e)))
        message = report.preemptor_event(d, self.windows, complete)
        self._event(d.preemptor, "Normal", REASON_PREEMPTOR, message)
        for v in d.victims:
            self._event(v.pod, "Normal", REASON_VICTIM, report.victim_event(d, v, self.windows.get(v.pod)))

    def warn(self, plan: Plan) -> None:
        for w in plan.warnings:
            for pod in w.pods[:MAX_WARNING_EVENTS_PER_CLASS]:
                key = (w.priority_class, w.annotation, w.value, pod)
                if key in self.state.warned:
                    continue
                self.state.warned.add(key)
                self._event(pod, "Warning", REASON_INVALID_ANNOTATION, report.invalid_annotation_event(w))
        reasons = {u.preemptor: u.reason for u in plan.unresolved}
        for pre in plan.gave_up:
            marker = (pre, self.uids.get(pre) or "")
            if marker in self.state.gave_up_warned:
                continue
            self.state.gave_up_warned.add(marker)
            self._event(pre, "Warning", REASON_GAVE_UP, reasons.get(pre, "gave-up"))


def run_pass(
    kube: KubeAdapter,
    prom: UsageSource,
    config: PlannerConfig,
    mode: Mode,
    now: datetime,
    state: ActuatorState | None = None,
    metrics: AutomatorMetrics | None = None,
    should_continue: Callable[[], bool] = lambda: True,
    max_replans: int = 5,
    max_evictions_per_hour: int | None = None,
) -> PassResult:
    """One pass. Never raises; never evicts without usage data, past the clock-skew bound or in dry-run."""
    state = state if state is not None else ActuatorState()
    started = time.monotonic()
    result = PassResult(mode=mode, at=now, result=PassOutcome.OK)
    try:
        _run(
            kube,
            prom,
            config,
            mode,
            now,
            state,
            metrics,
            should_continue,
            max_replans,
            max_evictions_per_hour,
            result,
        )
    except KubernetesUnavailable as e:
        result.result, result.reason = PassOutcome.KUBERNETES_ERROR, f"Kubernetes API: {e}"
        log.error("pass failed: %s", result.reason)
    except PrometheusUnavailable as e:
        result.result = PassOutcome.PROMETHEUS_UNAVAILABLE
        result.reason = f"Prometheus unavailable, no eviction this pass: {e.reason}"
        log.warning("%s", result.reason)
    except Exception as e:  # a bug must not kill the scheduler thread; the pass counts as failed
        log.exception("pass failed")
        result.result, result.reason = PassOutcome.ERROR, f"{type(e).__name__}: {e}"
    result.duration_seconds = time.monotonic() - started
    if metrics is not None:
        metrics.passes.labels(result=result.result).inc()
        metrics.pass_duration.observe(result.duration_seconds)
        metrics.evictions_last_hour.set(state.evictions_last_hour(now))
        if result.ok:
            metrics.last_success.set(now.timestamp())
    return result


def _forget_reclaims(state: ActuatorState, cluster: ClusterState, now: datetime, cooldown: timedelta) -> None:
    """Drop remembered reclaims once their cooldown passed and none of their victims still terminates."""
    if not state.reclaimed:
        return
    terminating = {PodKey.of(p) for p in cluster.pods if is_terminating(p)}
    for key, (when, written) in list(state.reclaimed.items()):
        victims = {v.strip() for v in written.get(RECLAIM_VICTIMS_ANNOTATION, "").split(",")}
        if now - when >= cooldown and not any(str(t) in victims for t in terminating):
            del state.reclaimed[key]


def skew_verdict(skew: float | None) -> tuple[bool, str]:
    """(may evict, what to report) for Prometheus' clock minus ours."""
    if skew is None or abs(skew) <= SKEW_WARN_SECONDS:
        return True, ""
    text = f"clock skew: Prometheus' clock is {skew:+.0f} s from the automator's"
    if abs(skew) > SKEW_MAX_SECONDS:
        return False, f"{text} (above {SKEW_MAX_SECONDS:g} s): no eviction this pass"
    return True, f"{text} (above {SKEW_WARN_SECONDS:g} s); windows end at Prometheus' time"


def _run(
    kube: KubeAdapter,
    prom: UsageSource,
    config: PlannerConfig,
    mode: Mode,
    now: datetime,
    state: ActuatorState,
    metrics: AutomatorMetrics | None,
    should_continue: Callable[[], bool],
    max_replans: int,
    max_evictions_per_hour: int | None,
    result: PassResult,
) -> None:
    snapshot = kube.snapshot()
    _forget_reclaims(state, snapshot, now, timedelta(seconds=config.cooldown_seconds))
    cluster = with_reclaim_memory(snapshot, state.reclaimed)
    windows = planner.usage_windows(cluster, config)
    try:
        usage = prom.usage(windows, recent_seconds=config.recent_window_seconds, now=now)
    finally:
        result.prometheus_queries = prom.queries_last_call
        if metrics is not None:
            metrics.queries_per_pass.set(prom.queries_last_call)
    skew = prom.clock_skew_seconds
    may_evict, skew_note = skew_verdict(skew)
    if metrics is not None:
        metrics.nonfinite.inc(prom.nonfinite_last_call)
        if skew is not None:
            metrics.clock_skew.set(skew)
    if skew_note:
        log.warning("%s", skew_note)
    budget = config.max_evictions_per_pass
    if max_evictions_per_hour is not None:
        budget = min(budget, max(0, max_evictions_per_hour - state.evictions_last_hour(now)))
    plan = planner.plan(cluster, usage, config, now, budget=budget)
    report.log_plan(log, plan, mode, windows)
    result.plan = plan
    if metrics is not None:
        metrics.candidates.set(plan.candidates)
        metrics.candidates_usage_unknown.set(plan.candidates_usage_unknown)
    if not may_evict:
        result.result, result.reason = PassOutcome.CLOCK_SKEW, skew_note
        return
    result.reason = skew_note
    if mode is Mode.ENFORCE:
        enforcer = _Enforcer(
            kube, cluster, usage, windows, config, now, state, metrics, should_continue, max_replans, budget
        )
        enforcer.warn(plan)
        result.plan = plan = enforcer.run(plan)  # the decisions acted on
        result.actions = enforcer.actions
        result.replans = enforcer.replans
        if enforcer.stopped:
            result.reason = "; ".join(x for x in (result.reason, enforcer.stopped) if x)
    if metrics is not None:
        metrics.decisions.labels(mode=str(mode)).inc(len(plan.decisions))
        metrics.unresolved.set(len(plan.unresolved))
