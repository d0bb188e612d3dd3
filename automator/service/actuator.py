"""One reclaim pass: snapshot, usage, plan, then act (enforce) or only report (dry-run).

Orchestration over two ports (automator/ports.py: KubeAdapter, UsageSource), so it runs the same against the
live adapters (kube.py, prom.py), the snapshot file and the test fakes, and imports none of them. The
decisions are the planner's; every message it logs or writes is report.py's. Acting on them is
enforcer.py's (the writes eviction.py's), the memory between passes cooldown.py's, the reclaim
annotations reclaim/annotations.py's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from automator.kueue.model import KueuePlan
from automator.kueue.report import kueue_json
from automator.metrics import AutomatorMetrics, unresolved_by_reason
from automator.objects.cluster import ClusterState
from automator.objects.resources import rfc3339
from automator.ports import (
    EvictionOutcome,
    KubeAdapter,
    KubernetesUnavailable,
    Mode,
    PassOutcome,
    PrometheusUnavailable,
    Usage,
    UsageSource,
)
from automator.reclaim import planner, report
from automator.reclaim.model import Plan, PlannerConfig
from automator.service.cooldown import (
    ActuatorState,
    forget_reclaims,
    gpus_held_by_reclaim,
    with_reclaim_memory,
)
from automator.service.enforcer import Enforcer
from automator.service.eviction import Action, ClusterWriter
from automator.service.fencing import with_replacements
from automator.service.kueue import KueueStep

__all__ = ["Action", "ActuatorState", "PassResult", "run_pass", "skew_verdict"]

log = logging.getLogger(__name__)

# Clock skew between the automator and Prometheus: reported above the first, no eviction above the second.
SKEW_WARN_SECONDS = 30.0
SKEW_MAX_SECONDS = 120.0


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
    kueue: KueuePlan | None = None  # with --kueue boost or deactivate (docs/kueue.md)

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
        if self.kueue is not None:
            body["kueue"] = kueue_json(self.kueue)
        return body


@dataclass(frozen=True)
class _Limits:
    """How far a pass may go: the leadership check before each write, re-plans and the hourly budget."""

    should_continue: Callable[[], bool]
    max_replans: int
    max_evictions_per_hour: int | None
    fence: Callable[[], None] | None = None  # the Lease record, written before each eviction
    kueue: KueueStep | None = None


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
    fence: Callable[[], None] | None = None,
    kueue: KueueStep | None = None,
) -> PassResult:
    """One pass. Never raises; never evicts without usage data, past the clock-skew bound or in dry-run.
    kueue: the Kueue step, after the reclaim's (docs/kueue.md)."""
    state = state if state is not None else ActuatorState()
    started = time.monotonic()
    result = PassResult(mode=mode, at=now, result=PassOutcome.OK)
    limits = _Limits(should_continue, max_replans, max_evictions_per_hour, fence, kueue)
    try:
        _run(kube, prom, config, mode, now, state, metrics, limits, result)
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
    limits: _Limits,
    result: PassResult,
) -> None:
    snapshot = kube.snapshot()
    forget_reclaims(state, snapshot, now, timedelta(seconds=config.cooldown_seconds))
    cluster = with_replacements(with_reclaim_memory(snapshot, state.reclaimed), state)
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
    if limits.max_evictions_per_hour is not None:
        budget = min(budget, max(0, limits.max_evictions_per_hour - state.evictions_last_hour(now)))
    plan = planner.plan(cluster, usage, config, now, budget=budget)
    report.log_plan(log, plan, mode, windows, evicting=mode is not Mode.DRY_RUN)
    result.plan = plan
    if metrics is not None:
        metrics.reclaimed_gpus_held.set(gpus_held_by_reclaim(cluster, config.gpu_resources))
        metrics.candidates.set(plan.candidates)
        metrics.candidates_usage_unknown.set(plan.candidates_usage_unknown)
        metrics.under_notice.set(len(plan.under_notice))
    if not may_evict:
        result.result, result.reason = PassOutcome.CLOCK_SKEW, skew_note
        _kueue(limits, result, cluster, usage, config, mode, now, 0, may_write=False)
        return
    result.reason = skew_note
    left = budget - sum(len(d.victims) for d in plan.decisions)  # dry-run: what the plan would evict
    stopped = False
    if mode is Mode.ENFORCE:
        writer = ClusterWriter(
            kube, {p.key: p for p in cluster.pods}, metrics, limits.should_continue, fence=limits.fence
        )
        enforcer = Enforcer(writer, cluster, usage, windows, config, now, state, limits.max_replans, budget)
        enforcer.warn(plan)
        result.plan = plan = enforcer.run(plan)  # the decisions acted on
        result.actions = writer.actions
        result.replans = enforcer.replans
        left, stopped = enforcer.budget, enforcer.stopped is not None
        if enforcer.stopped:
            result.reason = "; ".join(x for x in (result.reason, enforcer.stopped) if x)
    _kueue(limits, result, cluster, usage, config, mode, now, left, may_write=not stopped)
    if metrics is not None:
        metrics.decisions.labels(mode=str(mode)).inc(len(plan.decisions))
        metrics.set_unresolved(unresolved_by_reason(plan.unresolved))


def _kueue(
    limits: _Limits,
    result: PassResult,
    cluster: ClusterState,
    usage: Usage,
    config: PlannerConfig,
    mode: Mode,
    now: datetime,
    budget: int,
    may_write: bool,
) -> None:
    """The Kueue step with what the pass's budgets left (a write on n pods counts n)."""
    if limits.kueue is None:
        return
    result.kueue, actions = limits.kueue.run(cluster, usage, config, mode, now, max(0, budget), may_write)
    result.actions.extend(actions)
