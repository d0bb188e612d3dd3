"""Notice before eviction, as a plan reads it (pure): the pods under notice and the notices a pass
withdraws.

The annotations on the victims are the notice's only state (reclaim/annotations.py reads them), so a
restart or a new leader withdraws exactly what the last one would have. docs/reclaim.md, "Notice", states
the rules.
"""

from __future__ import annotations

from datetime import datetime

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.resources import rfc3339
from automator.reclaim.cluster_index import Candidate, ClusterIndex
from automator.reclaim.eligibility import Rule, deferral, scope_verdict
from automator.reclaim.gangs import resolve_gangs
from automator.reclaim.model import Plan, PlannerConfig, UnderNotice, Withdrawal
from steward_common.conventions import NoticeWithdrawal, UnresolvedReason

_BUSY = frozenset({Rule.GPU_BUSY, Rule.RECENTLY_BUSY, Rule.CPU_BUSY})
_UNKNOWN = frozenset({Rule.USAGE_UNKNOWN, Rule.COVERAGE_LOW, Rule.RECENT_UNKNOWN, Rule.CPU_UNKNOWN})
# A preemptor left unresolved for these keeps its notices: the plan did not choose against them, it stopped.
_KEPT_WHEN = frozenset(
    {UnresolvedReason.EVICTION_BUDGET, UnresolvedReason.NOTICE_BUDGET, UnresolvedReason.INTERRUPTED}
)


def under_notice(noticed: list[Candidate]) -> list[UnderNotice]:
    """The candidates with a readable notice, by name."""
    found: list[UnderNotice] = []
    for c in noticed:
        deadline, target = c.notice.deadline, c.notice.target
        if isinstance(deadline, datetime) and isinstance(target, str):
            found.append(UnderNotice(c.key, target, deadline))
    return sorted(found, key=lambda u: u.pod)


def withdrawals(
    index: ClusterIndex, plan: Plan, cluster: ClusterState, config: PlannerConfig, now: datetime
) -> list[Withdrawal]:
    """Every notice the plan does not keep, with the first reason that applies (NoticeWithdrawal's order).
    A notice is kept while a decision of the plan still holds its pod for the same preemptor or gang, or
    while that preemptor is held back only by a budget."""
    chosen: dict[ObjectKey, str] = {v.pod: d.target for d in plan.decisions for v in d.victims}
    deciding = {d.target: d for d in plan.decisions}
    fitting = {d.target for d in plan.already_fit}
    held: dict[str, UnresolvedReason] = {}
    for u in plan.unresolved:
        held.setdefault(u.gang if u.gang is not None else str(u.preemptor), u.kind)
    pending = {p.gang.name if p.gang is not None else str(p.key) for p in index.preemptors}
    started = _Started(cluster)
    found: list[Withdrawal] = []
    for c in sorted(index.noticed, key=lambda c: c.key):
        problem = c.notice.problem
        target = c.notice.target if isinstance(c.notice.target, str) else ""
        if problem is not None:
            found.append(Withdrawal(c.key, target, NoticeWithdrawal.MALFORMED, f"{problem}"))
            continue
        if chosen.get(c.key) is not None:
            continue  # chosen again: for the same preemptor it stays, for another it is noticed again
        why = _victim_reason(c, config, now)
        if why is None and target not in pending:
            why = started.reason(target)
        if why is None and target in fitting:
            why = (NoticeWithdrawal.PREEMPTOR_FITS, f"{target} fits without evictions")
        if why is None and target in deciding:
            node = deciding[target].node
            why = (NoticeWithdrawal.OTHER_VICTIMS, f"{target} is planned on {node} with other victims")
        if why is None and held.get(target) in _KEPT_WHEN:
            continue
        if why is None:
            why = (NoticeWithdrawal.NOT_PLANNED, f"the plan no longer picks it for {target}")
        found.append(Withdrawal(c.key, target, why[0], why[1]))
    return found


def _victim_reason(c: Candidate, config: PlannerConfig, now: datetime) -> tuple[NoticeWithdrawal, str] | None:
    """The victim's own reason: opted out, deferred, or it (or a member of its gang) busy or unknown."""
    scope = scope_verdict(c.pod, config)
    if scope is not None and scope[0] is Rule.OPTED_OUT:
        return NoticeWithdrawal.OPTED_OUT, scope[1]
    deferred = deferral(c.pod, now, config)[0]
    if deferred is not None:
        return NoticeWithdrawal.DEFERRED, deferred[1]
    members = c.unit.members if c.unit is not None else [c]
    for rules, reason in ((_BUSY, NoticeWithdrawal.BUSY), (_UNKNOWN, NoticeWithdrawal.USAGE_UNKNOWN)):
        for m in members:
            if m.assessment.rule in rules:
                who = "" if m is c else f"gang member {m.key}: "
                return reason, who + m.assessment.reason
    return None


class _Started:
    """Whether a target that is no longer pending was scheduled or is gone (gangs resolved on first use)."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.pods = {str(p.key): p for p in cluster.pods}
        self.gangs: dict[str, list[str]] | None = None

    def reason(self, target: str) -> tuple[NoticeWithdrawal, str]:
        pod = self.pods.get(target)
        if pod is None:
            if self.gangs is None:
                self.gangs = {}
                for key, gang in resolve_gangs(self.cluster.pods, self.cluster.groups)[0].items():
                    self.gangs.setdefault(gang.name, []).append(str(key))
            members = [self.pods[k] for k in self.gangs.get(target, [])]
            bound = [m for m in members if m.node_name and not m.finished and not m.terminating]
            if bound:
                return NoticeWithdrawal.PREEMPTOR_STARTED, f"gang {target} was scheduled ({len(bound)} bound)"
            return NoticeWithdrawal.PREEMPTOR_GONE, f"{target} is no longer a pending preemptor"
        if pod.node_name and not pod.finished and not pod.terminating:
            return NoticeWithdrawal.PREEMPTOR_STARTED, f"{target} was scheduled to {pod.node_name}"
        return NoticeWithdrawal.PREEMPTOR_GONE, f"{target} is no longer a pending preemptor"


def deadline_text(deadline: datetime, now: datetime) -> str:
    """A deadline as the output shows it: the time, and how far it is."""
    left = (deadline - now).total_seconds()
    return f"{rfc3339(deadline)} ({'passed' if left <= 0 else f'in {left:.0f} s'})"
