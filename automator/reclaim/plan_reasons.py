"""Why a preemptor is not searched, or stays unresolved: the reasons a plan states (pure).

The nodes a preemptor can never use (and why), the standing checks made before any search (the
scheduler's own nomination, cooldown, gave-up) and the text of an unresolved preemptor's reason (nodes
ruled out, the closest node). The plan loop that uses them
is planner.py; docs/reclaim.md describes every reason.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.objects.resources import FieldProblem, Requests
from automator.reclaim.annotations import ReclaimMarks
from automator.reclaim.cluster_index import NodeState
from automator.reclaim.eligibility import Rule
from automator.reclaim.fit import static_misfit
from automator.reclaim.model import PlannerConfig
from automator.reclaim.victims import NodeResult
from steward_common.conventions import WORD_COOLDOWN, WORD_GAVE_UP, WORD_NOMINATED

# Short names of protection rules for unresolved reasons (the others are named by their word).
_SHORT: dict[Rule, str] = {
    Rule.PDB: "pdb",
    Rule.ANNOTATION_MALFORMED: "malformed annotation",
    Rule.RESOURCES_MALFORMED: "malformed fields",
    Rule.EXCLUDED: "eviction refused",
    Rule.TOLERATION_NEGATIVE: "never preempted",
    Rule.NOT_SCHEDULED: "not scheduled",
    Rule.TOO_YOUNG: "too young",
    Rule.USAGE_UNKNOWN: "usage unknown",
    Rule.COVERAGE_LOW: "low coverage",
    Rule.GPU_BUSY: "busy",
    Rule.CPU_UNKNOWN: "cpu unknown",
    Rule.CPU_BUSY: "cpu busy",
}


@dataclass
class StaticFit:
    """Nodes a scheduling signature may use at all, and why the others are ruled out."""

    feasible: list[NodeState]
    ruled_out: Counter[str]
    first_detail: str | None = None  # the first node ruled out and why, quoted in unresolved reasons
    names: set[str] = field(default_factory=set)  # of the feasible nodes
    # Once the budget stopped the pass nothing changes a node: the node each request fits as it is
    fits: dict[tuple[int, int, int], NodeState | None] = field(default_factory=dict)
    small: dict[int, list[NodeState]] = field(default_factory=dict)  # too_small, per request

    def too_small(self, gpus: int) -> list[NodeState]:
        """The feasible nodes with fewer allocatable GPUs than the request (in their order)."""
        known = self.small.get(gpus)
        if known is None:
            known = self.small[gpus] = [n for n in self.feasible if n.alloc.gpus < gpus]
        return known


def static_fit(nodes: Iterable[NodeState], pod: Pod) -> StaticFit:
    """The nodes (in the order given) the pod may use whatever is evicted (selectors, taints, readiness),
    and the others counted by reason."""
    fit = StaticFit([], Counter())
    for node in nodes:
        misfit = static_misfit(pod, node.node) if node.error is None else ("unreadable", node.error)
        if misfit is None:
            fit.feasible.append(node)
            fit.names.add(node.name)
        else:
            fit.ruled_out[misfit[0]] += 1
            fit.first_detail = fit.first_detail or f"{node.name}: {misfit[1]}"
    return fit


def nominated(pod: Pod) -> str | None:
    """The scheduler's own preemption is under way for the pod (status.nominatedNodeName): its reason."""
    node = pod.nominated_node
    if not node:
        return None
    return (
        f"{WORD_NOMINATED}: the scheduler nominated node {node} (its own preemption is under way): left to "
        "the scheduler"
    )


def cooldown(
    marks: ReclaimMarks, now: datetime, config: PlannerConfig, terminating: Collection[ObjectKey]
) -> str | None:
    """Why the preemptor is in cooldown (reason starting with the word), or None."""
    last = marks.last
    if isinstance(last, FieldProblem):
        return f"{WORD_COOLDOWN}: annotation {last.path} {last.problem}: treated as in cooldown"
    if last is not None:
        elapsed = (now - last).total_seconds()
        if elapsed < config.cooldown_seconds:
            remaining = math.ceil(config.cooldown_seconds - elapsed)
            return (
                f"{WORD_COOLDOWN}: victims were evicted for it {elapsed:.0f} s ago ({marks.last_text}); "
                f"{remaining} s of the {config.cooldown_seconds} s cooldown remain"
            )
    still = [key for key in marks.victims if key in terminating]
    if still:
        names = ", ".join(str(k) for k in still)
        return (
            f"{WORD_COOLDOWN}: its victims are still terminating ({names}); no second set is evicted "
            "while they are"
        )
    return None


def gave_up(marks: ReclaimMarks, config: PlannerConfig) -> str | None:
    """Why no more victims are evicted for the preemptor (--max-reclaims-per-preemptor), or None."""
    count, limit = marks.count, config.max_reclaims_per_preemptor
    if isinstance(count, FieldProblem):
        return f"{WORD_GAVE_UP}: annotation {count.path} {count.problem}: no more victims"
    if count is not None and count >= limit:
        return (
            f"{WORD_GAVE_UP}: victims were evicted for it {count} times (--max-reclaims-per-preemptor "
            f"{limit}) and it is still pending: probably a constraint the planner does not model"
        )
    return None


def ruled_out(
    req: Requests, counts: Counter[str], first_detail: str | None, too_small: int, smallest: tuple[str, int]
) -> str:
    """The nodes a preemptor cannot use whatever is evicted, counted by reason (empty when none).
    too_small: how many nodes have fewer GPUs than the request; smallest: the first of them (name order)
    and its allocatable GPUs."""
    counts = Counter(counts)
    if too_small:
        counts["too few GPUs in total"] += too_small
        first_detail = first_detail or f"{smallest[0]}: allocatable {smallest[1]} GPUs < {req.gpus}"
    if not counts:
        return ""
    parts = ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))
    first = f" ({first_detail})" if first_detail else ""
    return f"{sum(counts.values())} node(s) ruled out: {parts}{first}"


def unresolved(req: Requests, closest: str, result: NodeResult, cut: list[str], excluded: str) -> str:
    """An unresolved preemptor's reason: no node fits; the closest one (most free plus reclaimable GPUs),
    nodes whose search was cut off and the nodes ruled out."""
    text = (
        f"closest: {closest} needs {req.gpus} GPUs, {max(result.free_gpus, 0)} free + "
        f"{result.split.reclaimable} reclaimable ({protected_summary(result)})"
    )
    if result.misfit and result.free_gpus + result.split.reclaimable >= req.gpus:
        text += f"; enough GPUs but {result.misfit}"
    reason = f"no node fits even after evicting all eligible idle pods; {text}"
    if cut:
        reason += f"; victim search cut off (node skipped): {', '.join(cut)}"
    if excluded:
        reason += f"; {excluded}"
    return reason


def protected_summary(result: NodeResult) -> str:
    counts = Counter(_SHORT.get(rule, str(rule)) for rule, _ in result.split.protected.values())
    if result.split.not_lower:
        counts["not lower priority"] += result.split.not_lower
    if not counts:
        return "no protected pods"
    total = sum(counts.values())
    parts = ", ".join(f"{n} {name}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{total} pods protected: {parts}"
