"""A node's candidate victims split for one preemptor priority: eligible, protected, not of lower
priority (pure). One split per node and priority, kept until a decision changes the node, serves every
search shape of the priority (victims.search_node), the rankings (ranking.py) and the verdicts the plan
records (planner.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

from automator.objects.keys import ObjectKey
from automator.reclaim.cluster_index import Candidate, NodeState, Unit
from automator.reclaim.eligibility import Rule, verdict_reason, verdict_rule

_EXCLUDED = (Rule.EXCLUDED, "excluded: an eviction was refused earlier in this pass")


class Split:
    """A node's candidates for one preemptor priority, at one node version: the eligible ones (in the
    node's order) and their GPUs, how many are not of lower priority, and the protected ones. Read-only once
    made, shared by every search shape of the priority and by the rankings; the protected pods' verdicts are
    written the first time they are read (most splits are never recorded)."""

    __slots__ = (
        "_protected",
        "eligible",
        "exclude",
        "largest",
        "not_lower",
        "pods",
        "priority",
        "reclaimable",
        "unit_members",
        "units",
    )

    def __init__(self, candidates: list[Candidate], priority: int, exclude: frozenset[ObjectKey]) -> None:
        self.priority, self.exclude = priority, exclude
        self._protected: dict[ObjectKey, tuple[Rule, str | Callable[[], str]]] | None = None
        eligible: list[Candidate] = []
        protected: list[Candidate] = []  # excluded or not eligible (verdict_rule), in the node's order
        not_lower = reclaimable = largest = 0
        units: list[Unit] = []  # the victim gangs eligible as a whole, in the node's order
        unit_members: list[Candidate] = []  # their members on this node
        for pod in candidates:
            if pod.priority >= priority:
                not_lower += 1
            elif pod.unit is not None:
                unit = pod.unit
                if unit.floor <= priority and not (exclude and any(m.key in exclude for m in unit.members)):
                    if unit not in units:
                        units.append(unit)
                    unit_members.append(pod)
                    reclaimable += pod.req.gpus
                else:
                    protected.append(pod)
            elif pod.floor <= priority and not (exclude and pod.key in exclude):  # floor: eligible_from
                eligible.append(pod)
                gpus = pod.req.gpus
                reclaimable += gpus
                if gpus > largest:
                    largest = gpus
            else:
                protected.append(pod)
        self.eligible, self.pods = eligible, protected
        self.units, self.unit_members = units, unit_members
        self.not_lower, self.reclaimable = not_lower, reclaimable
        self.largest = largest  # the most GPUs one eligible pod frees

    @property
    def protected(self) -> dict[ObjectKey, tuple[Rule, str | Callable[[], str]]]:
        """The protected pods' rules and reasons (or how to write them)."""
        protected = self._protected
        if protected is None:
            protected = self._protected = {}
            exclude, priority = self.exclude, self.priority
            for pod in self.pods:
                if pod.unit is not None:
                    protected[pod.key] = gang_protection(pod.unit, priority, exclude)
                elif exclude and pod.key in exclude:
                    protected[pod.key] = _EXCLUDED
                else:
                    assessment = pod.assessment
                    rule = verdict_rule(assessment, priority)[1]
                    protected[pod.key] = (rule, partial(verdict_reason, assessment, priority))
        return protected


def gang_protection(unit: Unit, priority: int, exclude: frozenset[ObjectKey]) -> tuple[Rule, str]:
    """(rule, reason) of every member of a victim gang that is not eligible as a whole: the first member
    (in name order) that is protected, and its rule."""
    gang = unit.gang
    if gang.problem is not None:
        return (Rule.GANG_MALFORMED, f"{gang.problem}: protected")
    found = first_protected(unit.members, priority, exclude)
    if found is None:
        return (Rule.GANG_MEMBER_PROTECTED, f"{Rule.GANG_MEMBER_PROTECTED}: gang {gang.name}")
    member, rule, why = found
    return (
        Rule.GANG_MEMBER_PROTECTED,
        f"{Rule.GANG_MEMBER_PROTECTED}: gang {gang.name}: {member.key} [{rule}] {why}",
    )


def first_protected(
    members: Iterable[Candidate],
    priority: int,
    exclude: frozenset[ObjectKey] = frozenset(),
    *,
    own_priority: bool = True,
) -> tuple[Candidate, str, str] | None:
    """The first of a unit's members (in the order given) that is not a victim for a preemptor of this
    priority, with its rule and reason; None when every one is. own_priority False leaves out the
    comparison of the member's own priority (a Kueue Workload's priority is compared instead)."""
    for member in members:
        if own_priority and member.priority >= priority:
            rule, why = "priority", f"priority {member.priority} is not lower than {priority}"
        elif exclude and member.key in exclude:
            rule, why = _EXCLUDED
        elif (member.floor if own_priority else member.assessment.eligible_from) > priority:
            rule = verdict_rule(member.assessment, priority)[1]
            why = verdict_reason(member.assessment, priority)
        else:
            continue
        return member, rule, why
    return None


NO_SPLIT = Split([], 0, frozenset())


class Splits:
    """The splits of one pass, per preemptor priority and node, kept until a decision changes the node."""

    def __init__(self, exclude: frozenset[ObjectKey]) -> None:
        self.exclude = exclude
        self.table: dict[int, dict[str, tuple[int, Split]]] = {}

    def of(self, node: NodeState, priority: int) -> Split:
        table = self.table.get(priority)
        if table is None:
            table = self.table[priority] = {}
        known = table.get(node.name)
        if known is not None and known[0] == node.version:
            return known[1]
        split = Split(node.candidates, priority, self.exclude)
        table[node.name] = (node.version, split)
        return split

    def most_gpus(self, nodes: Iterable[NodeState], priority: int) -> dict[str, tuple[int, NodeState]]:
        """Per readable node (in the order given), its free plus reclaimable GPUs for the priority: from its
        split when it has one, else summed without making one (most nodes then rank for no shape)."""
        table = self.table.setdefault(priority, {})
        exclude = self.exclude
        most: dict[str, tuple[int, NodeState]] = {}
        for node in nodes:
            if node.error is not None:
                continue
            known = table.get(node.name)
            if known is not None and known[0] == node.version:
                reclaimable = known[1].reclaimable
            else:  # Split's eligible pods: floor <= priority (their priority is then lower), not excluded
                reclaimable = sum(
                    [
                        pod.req.gpus
                        for pod in node.candidates
                        if (pod.floor if pod.unit is None else pod.unit.floor) <= priority
                        and not (exclude and pod.key in exclude)
                    ]
                )
            most[node.name] = (node.alloc.gpus - node.used_gpus + reclaimable, node)
        return most
