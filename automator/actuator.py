"""One reclaim pass: snapshot, usage, plan, then act (enforce) or only report (dry-run).

Orchestration over two ports (automator/ports.py: KubeAdapter, UsageSource), so it runs the same against the
live adapters (kube.py, prom.py), the snapshot file and the test fakes, and imports none of them. The
decisions are the planner's; every message it logs or writes is report.py's.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from automator import planner, report
from automator.conventions import (
    LAST_RECLAIM_ANNOTATION,
    REASON_EVICTION_FAILED,
    REASON_INVALID_ANNOTATION,
    REASON_PREEMPTOR,
    REASON_VICTIM,
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
from automator.resources import rfc3339

log = logging.getLogger(__name__)

# A malformed annotation on a big class would otherwise write thousands of Events at once.
MAX_WARNING_EVENTS_PER_CLASS = 50


@dataclass
class ActuatorState:
    """What the service remembers between passes (per process; lost on failover, which is harmless)."""

    # Warnings already turned into Events: (class, annotation, value, pod).
    warned: set[tuple[str, str, str, PodKey]] = field(default_factory=set)
    # Preemptors we evicted for, and when: a backstop for the annotation if patching it failed or the
    # next list does not show it yet, so a pass never evicts twice for the same preemptor.
    reclaimed: dict[PodKey, datetime] = field(default_factory=dict)


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


def with_reclaim_memory(cluster: ClusterState, reclaimed: Mapping[PodKey, datetime]) -> ClusterState:
    """The cluster with our remembered reclaim times written into preemptors whose annotation is older."""
    if not reclaimed:
        return cluster
    pods: list[JsonObj] = []
    for pod in cluster.pods:
        when = reclaimed.get(PodKey.of(pod))
        if when is not None:
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            seen = _parse_time(str(annotations.get(LAST_RECLAIM_ANNOTATION, "")))
            if LAST_RECLAIM_ANNOTATION not in annotations or (seen is not None and seen < when):
                pod = copy.deepcopy(pod)
                pod.setdefault("metadata", {}).setdefault("annotations", {})[LAST_RECLAIM_ANNOTATION] = (
                    rfc3339(when)
                )
        pods.append(pod)
    return replace(cluster, pods=pods)


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
    actions: list[Action] = field(default_factory=list)
    replans: int = 0
    # Across re-plans: pods gone, pods never to be chosen again, preemptors placed and their victims.
    gone: set[PodKey] = field(default_factory=set)
    exclude: set[PodKey] = field(default_factory=set)
    placed: dict[PodKey, str] = field(default_factory=dict)
    evicted_for: dict[PodKey, list[Victim]] = field(default_factory=dict)
    last_decision: dict[PodKey, Decision] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.uids = {PodKey.of(p): (p.get("metadata") or {}).get("uid") for p in self.cluster.pods}

    def _event(self, pod: PodKey, type_: str, reason: str, message: str) -> None:
        uid = self.uids.get(pod)
        try:
            self.kube.event(pod, type_, reason, message, uid=str(uid) if uid else None)
            self.actions.append(Action("event", str(pod), "ok", reason))
        except KubernetesUnavailable as e:
            # An Event is a courtesy: losing one must not stop the pass.
            log.error("event %s on %s failed: %s", reason, pod, e)
            self.actions.append(Action("event", str(pod), "error", f"{reason}: {e}"))

    def _evict(self, pod: PodKey) -> EvictionResult:
        try:
            result = self.kube.evict(pod)
            if result.outcome is EvictionOutcome.CONFLICT:
                log.info("eviction of %s: conflict, retrying once", pod)
                self._count(result)
                result = self.kube.evict(pod)
        except KubernetesUnavailable as e:
            result = EvictionResult(EvictionOutcome.ERROR, None, str(e))
        self._count(result)
        return result

    def _count(self, result: EvictionResult) -> None:
        if self.metrics is not None:
            self.metrics.evictions.labels(result=str(result.outcome)).inc()

    def _evict_for(self, d: Decision) -> bool:
        """Evict a decision's victims in order; False when one is refused (the rest wait for a re-plan)."""
        self.last_decision[d.preemptor] = d
        for v in d.victims:
            result = self._evict(v.pod)
            detail = f"for {d.preemptor}"
            if result.outcome is not EvictionOutcome.OK:
                detail += f": {result.status or 'no answer'} {result.message}"
            self.actions.append(Action("evict", str(v.pod), str(result.outcome), detail))
            if result.outcome in (EvictionOutcome.OK, EvictionOutcome.NOT_FOUND):
                log.info("evicted %s for %s (%s)", v.pod, d.preemptor, result.outcome)
                self.gone.add(v.pod)
                self.evicted_for.setdefault(d.preemptor, []).append(v)
                continue
            log.warning("eviction of %s for %s refused: %s", v.pod, d.preemptor, result)
            message = report.eviction_failed_event(d.preemptor, result.outcome, result.message)
            self._event(v.pod, "Warning", REASON_EVICTION_FAILED, message)
            self.exclude.add(v.pod)
            return False
        self.placed[d.preemptor] = d.node
        return True

    def _act(self, plan: Plan) -> tuple[bool, bool]:
        """Act on one plan's decisions: (an eviction was refused, leadership was lost)."""
        # Preemptors that already fit keep their node across re-plans, as in the first plan.
        self.placed.update((d.preemptor, d.node) for d in plan.already_fit)
        for d in plan.decisions:
            if not self.should_continue():
                log.warning("lost leadership: stopping before %s", d.preemptor)
                return False, True
            if not self._evict_for(d):
                return True, False
        return False, False

    def run(self, plan: Plan) -> Plan:
        current = plan
        while True:
            refused, stopped = self._act(current)
            if not refused or stopped:
                break
            if self.replans >= self.max_replans:
                log.warning(
                    "re-plan limit (%d) reached: remaining preemptors wait for the next pass", self.replans
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
            )
        done: list[Decision] = []
        for preemptor, victims in self.evicted_for.items():
            d = replace(
                self.last_decision[preemptor], victims=tuple(victims), gpus_freed=sum(v.gpus for v in victims)
            )
            done.append(d)
            self._finish(d, complete=preemptor in self.placed)
        served = set(self.placed) | set(self.evicted_for)
        unresolved = [u for u in current.unresolved if u.preemptor not in served]
        unresolved += [
            Unresolved(d.preemptor, "eviction refused and re-plans exhausted or leadership lost")
            for d in current.decisions
            if d.preemptor not in served
        ]
        return replace(plan, decisions=done, unresolved=unresolved)

    def _finish(self, d: Decision, complete: bool) -> None:
        """Cooldown annotation and Events once victims were evicted for a preemptor."""
        self.state.reclaimed[d.preemptor] = self.now
        try:
            self.kube.annotate_preemptor(d.preemptor, self.now)
            self.actions.append(Action("annotate", str(d.preemptor), "ok", LAST_RECLAIM_ANNOTATION))
        except KubernetesUnavailable as e:
            log.error("cooldown annotation on %s failed (kept in memory): %s", d.preemptor, e)
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
) -> PassResult:
    """One pass. Never raises; never evicts without usage data or in dry-run."""
    state = state if state is not None else ActuatorState()
    started = time.monotonic()
    result = PassResult(mode=mode, at=now, result=PassOutcome.OK)
    try:
        _run(kube, prom, config, mode, now, state, metrics, should_continue, max_replans, result)
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
        if result.ok:
            metrics.last_success.set(now.timestamp())
    return result


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
    result: PassResult,
) -> None:
    cooldown = timedelta(seconds=config.cooldown_seconds)
    for key in [k for k, t in state.reclaimed.items() if now - t >= cooldown]:
        del state.reclaimed[key]
    cluster = with_reclaim_memory(kube.snapshot(), state.reclaimed)
    windows = planner.usage_windows(cluster, config)
    try:
        usage = prom.usage(windows, at=now)
    finally:
        result.prometheus_queries = prom.queries_last_call
        if metrics is not None:
            metrics.queries_per_pass.set(prom.queries_last_call)
    plan = planner.plan(cluster, usage, config, now)
    report.log_plan(log, plan, mode, windows)
    result.plan = plan
    if mode is Mode.ENFORCE:
        enforcer = _Enforcer(
            kube, cluster, usage, windows, config, now, state, metrics, should_continue, max_replans
        )
        enforcer.warn(plan)
        result.plan = plan = enforcer.run(plan)  # the decisions acted on
        result.actions = enforcer.actions
        result.replans = enforcer.replans
    if metrics is not None:
        metrics.decisions.labels(mode=str(mode)).inc(len(plan.decisions))
        metrics.unresolved.set(len(plan.unresolved))
