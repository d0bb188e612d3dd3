"""The service's Kueue step (docs/kueue.md): after the reclaim plan, what --kueue boost or deactivate would
write (dry-run: logged and shown, nothing written) or writes (enforce: the annotations, or spec.active:
false and an Event), within what the pass's eviction budgets left. The decisions are automator/kueue/'s,
the texts automator/kueue/report.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from automator.kueue import report
from automator.kueue.decide import plan_kueue
from automator.kueue.model import KueuePlan, KueueSettings, Target
from automator.metrics import AutomatorMetrics
from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.ports import KubernetesUnavailable, KueueAction, KueueWriter, Mode
from automator.reclaim.model import PlannerConfig, PodUsage
from automator.service.cooldown import ActuatorState
from automator.service.eviction import Action
from steward_common.conventions import (
    KUEUE_BOOST_ANNOTATION,
    KUEUE_BOOST_OWNER,
    KUEUE_BOOST_OWNER_ANNOTATION,
    KUEUE_DEACTIVATED_FOR_ANNOTATION,
    KUEUE_REASON_DEACTIVATED,
)

log = logging.getLogger(__name__)


def boost_patch(value: int) -> dict[str, object]:
    return {
        "metadata": {
            "annotations": {
                KUEUE_BOOST_ANNOTATION: str(value),
                KUEUE_BOOST_OWNER_ANNOTATION: KUEUE_BOOST_OWNER,
            }
        }
    }


UNBOOST_PATCH: dict[str, object] = {
    "metadata": {"annotations": {KUEUE_BOOST_ANNOTATION: None, KUEUE_BOOST_OWNER_ANNOTATION: None}}
}


def deactivate_patch(waiting: ObjectKey) -> dict[str, object]:
    return {
        "metadata": {"annotations": {KUEUE_DEACTIVATED_FOR_ANNOTATION: str(waiting)}},
        "spec": {"active": False},
    }


@dataclass
class KueueStep:
    writer: KueueWriter | None  # None: the cluster comes from a file (dry-run only)
    settings: KueueSettings
    state: ActuatorState
    metrics: AutomatorMetrics | None
    should_continue: Callable[[], bool]

    def run(
        self,
        cluster: ClusterState,
        usage: Mapping[ObjectKey, PodUsage],
        config: PlannerConfig,
        mode: Mode,
        now: datetime,
        budget: int,
        may_write: bool,
    ) -> tuple[KueuePlan, list[Action]]:
        """Plan, log, and (enforce, may_write) write; the plan and the writes' actions."""
        plan = plan_kueue(cluster, usage, config, now, self.settings, budget, self.state.kueue_served)
        acting = mode is Mode.ENFORCE and may_write and self.writer is not None
        report.log_kueue(log, plan, acting)
        if self.metrics is not None:
            self.metrics.kueue_waiting.set(len(plan.waiting))
            self.metrics.kueue_waiting_gpus.set(sum(w.gpus for w in plan.waiting))
            self.metrics.kueue_idle_quota.set(plan.idle_gpus_held)
        if not acting:
            for action, count in (
                (KueueAction.BOOST, len(plan.boost)),
                (KueueAction.UNBOOST, len(plan.unboost)),
                (KueueAction.DEACTIVATE, len(plan.deactivate)),
            ):
                self._count(action, mode, count)
            return plan, []
        return plan, self._write(plan, mode, now)

    def _count(self, action: KueueAction, mode: Mode, n: int = 1) -> None:
        if self.metrics is not None and n:
            self.metrics.kueue_actions.labels(action=str(action), mode=str(mode)).inc(n)

    def _write(self, plan: KueuePlan, mode: Mode, now: datetime) -> list[Action]:
        """The writes in order (unboosts, boosts, deactivations); the first that fails or finds this replica
        no longer leading ends them (the next pass plans again from what the cluster then shows)."""
        assert self.writer is not None
        actions: list[Action] = []
        served: set[ObjectKey] = set()
        writes: list[tuple[KueueAction, Target, dict[str, object], int, ObjectKey | None, str]] = [
            (KueueAction.UNBOOST, u.target, UNBOOST_PATCH, 0, None, u.reason) for u in plan.unboost
        ]
        writes += [
            (KueueAction.BOOST, b.target, boost_patch(b.value), b.pods, b.waiting, f"for {b.waiting}")
            for b in plan.boost
        ]
        events = {d.target.key: report.deactivated_event(d) for d in plan.deactivate}
        writes += [
            (
                KueueAction.DEACTIVATE,
                d.target,
                deactivate_patch(d.waiting),
                d.pods,
                d.waiting,
                f"for {d.waiting}",
            )
            for d in plan.deactivate
        ]
        for action, target, patch, pods, waiting, detail in writes:
            kind = f"kueue-{action}"
            if not self.should_continue():
                actions.append(Action(kind, str(target.key), "skipped", "not the leader"))
                break
            try:
                self.writer.patch_workload(target.key, target.api_version, patch, uid=target.uid or None)
            except KubernetesUnavailable as e:
                log.error("kueue %s of %s failed: %s", action, target.key, e)
                actions.append(Action(kind, str(target.key), "error", str(e)))
                break
            actions.append(Action(kind, str(target.key), "ok", detail))
            self._count(action, mode)
            self.state.evictions.extend([now] * pods)  # a write on n pods counts n against the hour
            if waiting is not None:
                served.add(waiting)
            if action is KueueAction.DEACTIVATE:
                self._event(target, events[target.key], actions)
        for waiting in served:
            self.state.kueue_served[waiting] = now
        return actions

    def _event(self, target: Target, message: str, actions: list[Action]) -> None:
        assert self.writer is not None
        try:
            self.writer.workload_event(
                target.key,
                target.api_version,
                target.uid or None,
                "Normal",
                KUEUE_REASON_DEACTIVATED,
                message,
            )
            actions.append(Action("event", str(target.key), "ok", KUEUE_REASON_DEACTIVATED))
        except KubernetesUnavailable as e:  # an Event is a courtesy: losing one stops nothing
            log.error("event %s on %s failed: %s", KUEUE_REASON_DEACTIVATED, target.key, e)
            actions.append(Action("event", str(target.key), "error", str(e)))
