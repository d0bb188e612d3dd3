"""Enforce mode: act on a plan's decisions, re-planning when an eviction is refused.

A decision's victims go whole or not at all: its preemptor is read again, every victim is evicted as a
server-side dry run, then for real. A refused victim is never chosen again this pass and the planner runs
again over the cluster as it now is (`simulate`). Served preemptors get the cooldown annotations and Events.
A decision that gives notice (--notice-seconds) annotates its victims and warns them instead; the notices
the plan withdraws lose their annotations. The writes themselves are eviction.py's; the texts report.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import msgspec

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.ports import EvictionOutcome, EvictionResult
from automator.reclaim import planner, report
from automator.reclaim.annotations import WITHDRAWN, notice_annotations, reclaim_annotations
from automator.reclaim.model import (
    NOTICE,
    Decision,
    Plan,
    PlannerConfig,
    PodUsage,
    Unresolved,
    UsageWindow,
    Victim,
)
from automator.service.cooldown import ActuatorState
from automator.service.eviction import ClusterWriter, Stop
from automator.service.fencing import controller
from steward_common.conventions import (
    REASON_EVICTION_FAILED,
    REASON_GAVE_UP,
    REASON_INVALID_ANNOTATION,
    REASON_NOTICE,
    REASON_NOTICE_WITHDRAWN,
    REASON_PREEMPTOR,
    REASON_VICTIM,
    WORD_BUDGET,
    WORD_GAVE_UP,
    UnresolvedReason,
)

log = logging.getLogger(__name__)

# A malformed annotation on a big class would otherwise write thousands of Events at once.
MAX_WARNING_EVENTS_PER_CLASS = 50
# Outcomes after which the victim is gone (NOT_FOUND: it already was).
_GONE = (EvictionOutcome.OK, EvictionOutcome.NOT_FOUND)


def simulate(cluster: ClusterState, gone: set[ObjectKey], placed: Mapping[ObjectKey, str]) -> ClusterState:
    """The cluster as a re-plan should see it: evicted pods gone, served preemptors running where planned.

    A served preemptor is bound without a PodScheduled=True condition, so the planner neither serves it
    again nor offers it as a victim, and its GPUs stay taken on its node.
    """
    pods: list[Pod] = []
    for pod in cluster.pods:
        key = pod.key
        if key in gone:
            continue
        if key in placed:
            pod = msgspec.structs.replace(pod, node_name=placed[key], phase="Running")
        pods.append(pod)
    return replace(cluster, pods=pods)


@dataclass
class Enforcer:
    writer: ClusterWriter
    cluster: ClusterState
    usage: Mapping[ObjectKey, PodUsage]
    windows: Mapping[ObjectKey, UsageWindow]
    config: PlannerConfig
    now: datetime
    state: ActuatorState
    max_replans: int
    budget: int  # evictions this pass may still make (per pass and per hour)
    replans: int = 0
    stopped: str | None = None  # why the pass's actions ended early
    # Across re-plans: pods gone, pods never to be chosen again, preemptors placed and their victims.
    gone: set[ObjectKey] = field(default_factory=set)
    exclude: set[ObjectKey] = field(default_factory=set)
    placed: dict[ObjectKey, str] = field(default_factory=dict)
    evicted_for: dict[ObjectKey, list[Victim]] = field(default_factory=dict)
    last_decision: dict[ObjectKey, Decision] = field(default_factory=dict)
    skipped: dict[ObjectKey, Unresolved] = field(default_factory=dict)  # preemptors not acted on, and why
    # Decisions that gave notice (first one per preemptor), and the pods given notice this pass.
    noticed: dict[ObjectKey, Decision] = field(default_factory=dict)
    noticed_pods: set[ObjectKey] = field(default_factory=set)

    def _refused(self, d: Decision, v: Victim, result: EvictionResult, dry_run: bool) -> None:
        """A victim that cannot be evicted now: never chosen again this pass; the caller re-plans."""
        if result.outcome is EvictionOutcome.THROTTLED:
            wait = f" (Retry-After {result.retry_after:g} s)" if result.retry_after is not None else ""
            raise Stop(f"API throttling (429){wait} on the eviction of {v.pod}: the pass ends here")
        log.warning(
            "eviction%s of %s for %s refused: %s", " dry-run" if dry_run else "", v.pod, d.preemptor, result
        )
        if not dry_run and result.outcome is not EvictionOutcome.CONFLICT:
            message = report.eviction_failed_event(d.preemptor, result.outcome, result.message)
            self.writer.event(v.pod, "Warning", REASON_EVICTION_FAILED, message)
        self.exclude.add(v.pod)

    def _may_act(self, d: Decision) -> bool:
        """Whether d's victims may go: its preemptor unchanged and the budget enough (else skipped)."""
        self.writer.leading(f"the victims of {d.preemptor}")
        changed = self.writer.preemptor_changed(d.preemptor)
        if changed is not None:
            log.info("nothing evicted for %s: %s", d.preemptor, changed.reason)
            self.skipped[d.preemptor] = changed
            return False
        if len(d.victims) > self.budget:
            why = f"{WORD_BUDGET}: {self.budget} evictions left this pass"
            self.skipped[d.preemptor] = Unresolved(d.preemptor, why, UnresolvedReason.EVICTION_BUDGET)
            return False
        if self.config.notice_seconds > 0 and any(
            v.noticed is None or v.noticed > self.now for v in d.victims
        ):
            # The planner never decides this; a victim not noticed long enough is not evicted whatever asks.
            why = "a victim's notice has not passed: nothing evicted"
            self.skipped[d.preemptor] = Unresolved(d.preemptor, why, UnresolvedReason.INTERRUPTED)
            return False
        return True

    def _dry_run(self, d: Decision) -> bool:
        """A server-side dry run of every victim: False (after _refused) when one would be refused."""
        for v in d.victims:
            self.writer.leading(f"the dry-run eviction of {v.pod}")
            result = self.writer.evict(v.pod, dry_run=True)
            self.writer.record("evict-dry-run", v.pod, str(result.outcome), f"for {d.preemptor}")
            if result.outcome not in _GONE:
                self._refused(d, v, result, dry_run=True)
                return False
        return True

    def _remember(self, d: Decision) -> tuple[ObjectKey, tuple[datetime, dict[str, str]] | None]:
        """The eviction counted and its preemptor remembered as served, before the eviction is sent (the
        Lease record is made of this): what to put back should the eviction not happen."""
        pod = self.writer.pods.get(d.preemptor)
        before = self.state.reclaimed.get(d.preemptor)
        self.state.evictions.append(self.now)
        self.state.reclaimed[d.preemptor] = (self.now, reclaim_annotations(pod, d, self.now))
        owner = controller(pod)
        if owner is not None:
            self.state.controllers[d.preemptor] = owner
        return d.preemptor, before

    def _forget(self, remembered: tuple[ObjectKey, tuple[datetime, dict[str, str]] | None]) -> None:
        key, before = remembered
        self.state.evictions.pop()
        if before is None:
            self.state.reclaimed.pop(key, None)
        else:
            self.state.reclaimed[key] = before

    def _evict(self, d: Decision, v: Victim) -> bool:
        """Evict one victim for real, recorded on the Lease first: False (after _refused) when it was not
        evicted."""
        self.writer.leading(f"the eviction of {v.pod}")
        remembered = self._remember(d)
        try:
            self.writer.fenced(v.pod)
        except Stop:
            self._forget(remembered)
            raise
        result = self.writer.evict(v.pod)
        detail = f"for {d.preemptor}"
        if result.outcome is not EvictionOutcome.OK:
            detail += f": {result.status or 'no answer'} {result.message}"
        unknown = result.outcome is EvictionOutcome.UNKNOWN
        self.writer.record("evict", v.pod, str(result.outcome), detail)
        if not unknown and result.outcome not in _GONE:
            self._forget(remembered)  # the Lease keeps it until the next renewal: counted, never less
            self._refused(d, v, result, dry_run=False)
            return False
        log.info("evicted %s for %s (%s)", v.pod, d.preemptor, result.outcome)
        if result.outcome is EvictionOutcome.OK and self.writer.metrics is not None:
            self.writer.metrics.reclaimed_gpus.inc(v.gpus)
            if v.noticed is not None:
                self.writer.metrics.evictions_after_notice.inc()
        self.gone.add(v.pod)
        self.evicted_for.setdefault(d.preemptor, []).append(v)
        self.budget -= 1
        if unknown:
            # The eviction may still land (a server-side timeout outlasts ours): taken as done, so the
            # preemptor enters cooldown and no second victim goes for it; the next pass lists the pod again.
            raise Stop(
                f"eviction of {v.pod} has no known outcome ({result.status or 'no answer'}): taken as "
                "evicted, the pass ends here and the next pass reads the pod again"
            )
        return True

    def _evict_for(self, d: Decision) -> bool:
        """Evict a decision's victims, whole or not at all; False when one is refused (re-plan)."""
        self.last_decision[d.preemptor] = d
        if not self._may_act(d):
            return True
        if not self._dry_run(d) or not all(self._evict(d, v) for v in d.victims):
            return False
        self.placed[d.preemptor] = d.node
        return True

    def _act(self, plan: Plan) -> bool:
        """Act on one plan's decisions: True when an eviction was refused (re-plan)."""
        # Preemptors that already fit keep their node across re-plans, as in the first plan.
        self.placed.update((d.preemptor, d.node) for d in plan.already_fit)
        for d in plan.decisions:
            if d.preemptor in self.skipped or d.preemptor in self.placed or d.preemptor in self.noticed:
                continue
            if d.action == NOTICE:
                self._give_notice(d)
            elif not self._evict_for(d):
                return True
        return False

    def _give_notice(self, d: Decision) -> None:
        """Notice instead of eviction: each victim not yet noticed for d's preemptor (or gang) gets the
        deadline (now + --notice-seconds) and whom it is for, then a Warning Event. The planner keeps its
        GPUs for that preemptor in this pass, and a later pass evicts it only if it still chooses it."""
        self.noticed[d.preemptor] = d
        deadline = self.now + timedelta(seconds=self.config.notice_seconds)
        for v in d.victims:
            if v.noticed is not None or v.pod in self.noticed_pods:
                continue  # already under notice for it (deadline kept), or noticed earlier in the pass
            self.writer.leading(f"the notice on {v.pod}")
            if not self.writer.annotate(v.pod, notice_annotations(deadline, d.target)):
                continue
            self.noticed_pods.add(v.pod)
            if self.writer.metrics is not None:
                self.writer.metrics.notices.inc()
            event = report.notice_event(d, v, self.windows.get(v.pod), self.config.max_defer_seconds)
            self.writer.event(v.pod, "Warning", REASON_NOTICE, event)

    def withdraw(self, plan: Plan) -> None:
        """The notices plan withdraws: annotations removed, a Normal Event with the reason. Idempotent (the
        annotations are the state: a notice already gone is not listed again), and never on a pod given
        notice or evicted in this pass."""
        for w in plan.withdrawals:
            if w.pod in self.noticed_pods or w.pod in self.gone:
                continue
            self.writer.leading(f"the withdrawal of the notice on {w.pod}")
            if not self.writer.annotate(w.pod, WITHDRAWN):
                continue
            if self.writer.metrics is not None:
                self.writer.metrics.notices_withdrawn.labels(reason=str(w.reason)).inc()
            self.writer.event(w.pod, "Normal", REASON_NOTICE_WITHDRAWN, report.withdrawn_event(w))

    def _act_and_replan(self, plan: Plan) -> Plan:
        """Act on plan, re-planning after each refusal up to max_replans: the last plan acted on."""
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
                if self.writer.metrics is not None:
                    self.writer.metrics.replans.inc()
                current = planner.plan(
                    simulate(self.cluster, self.gone, self.placed),
                    self.usage,
                    self.config,
                    self.now,
                    exclude=frozenset(self.exclude),
                    budget=self.budget,
                )
        except Stop as e:
            self.stopped = str(e)
            log.warning("actions stopped: %s", e)
        return current

    def run(self, plan: Plan) -> Plan:
        """The plan as acted on: the decisions with the victims actually evicted, and what stays pending."""
        current = self._act_and_replan(plan)
        try:
            self.withdraw(plan)
        except Stop as e:
            self.stopped = self.stopped or str(e)
            log.warning("actions stopped: %s", e)
        done: list[Decision] = list(self.noticed.values())
        for preemptor, victims in self.evicted_for.items():
            planned = self.last_decision[preemptor]
            d = replace(planned, victims=tuple(victims), gpus_freed=sum(v.gpus for v in victims))
            done.append(d)
            self._finish(
                d, complete=preemptor in self.placed, partial=report.partly_evicted(planned, victims)
            )
        # A preemptor gang's members placed without victims of their own are in cooldown with it.
        reclaiming = {d.gang for d in done if d.gang is not None}
        for d in current.already_fit:
            if d.gang in reclaiming and d.preemptor not in self.evicted_for and d.preemptor in self.placed:
                self._annotate(d)
        served = set(self.placed) | set(self.evicted_for) | set(self.noticed)
        unresolved = [u for u in current.unresolved if u.preemptor not in served]
        unresolved += [u for k, u in self.skipped.items() if k not in served]
        why = self.stopped or "eviction refused and re-plans exhausted"
        for d in current.decisions:
            if d.preemptor not in served and d.preemptor not in self.skipped:
                unresolved.append(Unresolved(d.preemptor, why, UnresolvedReason.INTERRUPTED))
        return replace(plan, decisions=done, unresolved=unresolved)

    def _annotate(self, d: Decision) -> bool:
        """The cooldown annotations on a served preemptor; False when this replica no longer leads."""
        written = reclaim_annotations(self.writer.pods.get(d.preemptor), d, self.now)
        self.state.reclaimed[d.preemptor] = (self.now, written)
        if not self.writer.should_continue():
            self.writer.record("annotate", d.preemptor, "skipped", "not the leader")
            return False
        self.writer.annotate(d.preemptor, written)
        return True

    def _finish(self, d: Decision, complete: bool, partial: str = "") -> None:
        """Cooldown annotations and Events once victims were evicted for a preemptor. partial: the victim
        gangs left partly evicted, as the Events say it."""
        if not self._annotate(d):
            return
        message = report.preemptor_event(d, self.windows, complete, partial)
        self.writer.event(d.preemptor, "Normal", REASON_PREEMPTOR, message)
        for v in d.victims:
            event = report.victim_event(d, v, self.windows.get(v.pod), partial)
            self.writer.event(v.pod, "Normal", REASON_VICTIM, event)

    def warn(self, plan: Plan) -> None:
        """Warning Events: malformed class annotations and owners' annotations ignored (once each), and
        preemptors given up (once each)."""
        for ignored in plan.pod_warnings:
            key = ("", ignored.annotation, ignored.value, ignored.pod)
            if key not in self.state.warned:
                self.state.warned.add(key)
                message = report.ignored_event(ignored)
                self.writer.event(ignored.pod, "Warning", REASON_INVALID_ANNOTATION, message)
        for w in plan.warnings:
            for pod in w.pods[:MAX_WARNING_EVENTS_PER_CLASS]:
                key = (w.priority_class, w.annotation, w.value, pod)
                if key in self.state.warned:
                    continue
                self.state.warned.add(key)
                self.writer.event(
                    pod, "Warning", REASON_INVALID_ANNOTATION, report.invalid_annotation_event(w)
                )
        reasons = {u.preemptor: u.reason for u in plan.unresolved}
        for pre in plan.gave_up:
            marker = (pre, self.writer.uids.get(pre) or "")
            if marker in self.state.gave_up_warned:
                continue
            self.state.gave_up_warned.add(marker)
            self.writer.event(pre, "Warning", REASON_GAVE_UP, reasons.get(pre, WORD_GAVE_UP))
