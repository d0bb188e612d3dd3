"""Stage 2 of a plan: the victim-set search on one node for one preemptor (pure).

Fewest victims first, then fewest GPUs freed, lowest highest priority, lowest priority sum, least run time
lost, names; a set must free enough GPUs, CPU and memory and keep every PodDisruptionBudget's
disruptionsAllowed. docs/reclaim.md states the order.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from automator.cluster_index import Candidate, NodeState
from automator.eligibility import PdbIndex, verdict_for
from automator.model import PodKey
from automator.resources import Requests

# Victim sets tried per node and size before the search narrows to the best-ranked victims. A node of
# 8 GPUs has at most 8 GPU pods (C(8,4) = 70); only nodes with many fractional/MIG pods reach this.
COMBINATION_BUDGET = 5000

# Short names of protection rules for unresolved reasons.
_SHORT = {
    "0-pdb": "pdb",
    "annotation-malformed": "malformed annotation",
    "resources-malformed": "malformed fields",
    "excluded": "eviction refused",
    "2-toleration-negative": "never preempted",
    "3-not-scheduled": "not scheduled",
    "4-too-young": "too young",
    "5-usage-unknown": "usage unknown",
    "5-coverage-low": "low coverage",
    "6-gpu-busy": "busy",
    "7-cpu-unknown": "cpu unknown",
    "7-cpu-busy": "cpu busy",
}

# (count, gpus freed, highest priority, sum of priorities, seconds of run time lost, victim names)
SetKey = tuple[int, int, int, int, float, tuple[str, ...]]


@dataclass
class NodeResult:
    key: SetKey | None  # None: no set fits on this node
    victims: tuple[Candidate, ...]
    free_gpus: int
    reclaimable: int
    eligible: list[Candidate]
    protected: dict[PodKey, tuple[str, str]]
    not_lower: int
    misfit: str | None


def set_key(victims: Sequence[Candidate]) -> SetKey:
    return (
        len(victims),
        sum(v.req.gpus for v in victims),
        max((v.priority for v in victims), default=0),
        sum(v.priority for v in victims),
        round(sum(v.age for v in victims), 3),
        tuple(sorted(str(v.key) for v in victims)),
    )


def _pdbs_allow(victims: Sequence[Candidate], pdbs: PdbIndex) -> bool:
    counts = Counter(pdb for v in victims for pdb in v.pdbs)
    return all(pdbs.remaining.get(pdb, 0) >= n for pdb, n in counts.items())


def _sort_candidates(node: NodeState, priority: int, exclude: frozenset[PodKey]) -> NodeResult:
    """Split the node's candidates into eligible and protected for this preemptor priority."""
    result = NodeResult(None, (), node.free()[0], 0, [], {}, 0, None)
    for pod in node.candidates:
        if pod.priority >= priority:
            result.not_lower += 1
            continue
        if exclude and pod.key in exclude:
            result.protected[pod.key] = ("excluded", "excluded: an eviction was refused earlier in this pass")
            continue
        ok, rule, reason = verdict_for(pod.assessment, priority)
        if ok:
            result.eligible.append(pod)
        else:
            result.protected[pod.key] = (rule, reason)
    result.reclaimable = sum(p.req.gpus for p in result.eligible)
    return result


def search_node(
    node: NodeState, req: Requests, priority: int, pdbs: PdbIndex, exclude: frozenset[PodKey]
) -> NodeResult:
    """Best victim set on one node for a preemptor with these requests and priority."""
    free_g, free_c, free_m = node.free()
    result = _sort_candidates(node, priority, exclude)
    if free_g >= req.gpus and free_c >= req.cpu_m and free_m >= req.memory:
        result.key = set_key(())
        return result
    need = req.gpus - free_g
    if need > result.reclaimable:
        return result
    eligible = result.eligible
    by_size = sorted((p.req.gpus for p in eligible), reverse=True)
    # Fewest victims first: no set smaller than the k largest reaching `need` can free enough GPUs.
    lower = next(k for k in range(len(by_size) + 1) if sum(by_size[:k]) >= need)
    ranked = sorted(eligible, key=lambda p: (p.priority, p.age, str(p.key)))
    for size in range(max(lower, 1), len(eligible) + 1):
        pool = ranked
        while len(pool) > size and math.comb(len(pool), size) > COMBINATION_BUDGET:
            pool = pool[:-1]  # drop the least attractive victim: the search stays bounded, not exhaustive
        options = [c for c in itertools.combinations(pool, size) if sum(p.req.gpus for p in c) >= need]
        for key, combo in sorted((set_key(c), c) for c in options):
            cpu = free_c + sum(p.req.cpu_m for p in combo)
            mem = free_m + sum(p.req.memory for p in combo)
            if cpu >= req.cpu_m and mem >= req.memory and _pdbs_allow(combo, pdbs):
                result.key, result.victims = key, combo
                return result
            result.misfit = _misfit(req, size, (free_c, cpu), (free_m, mem))
    return result


def _misfit(req: Requests, size: int, cpu: tuple[int, int], mem: tuple[int, int]) -> str:
    """Why a victim set with enough GPUs still does not fit: (free, free + freed) CPU and memory."""
    if cpu[1] < req.cpu_m:
        return f"cpu: needs {req.cpu_m}m, {cpu[0]}m free + {cpu[1] - cpu[0]}m from {size} victim(s)"
    if mem[1] < req.memory:
        return f"memory: needs {req.memory} B, {mem[0]} B free + {mem[1] - mem[0]} B from victims"
    return "PodDisruptionBudget disruptionsAllowed would be exceeded by the victim set"


def protected_summary(result: NodeResult) -> str:
    counts = Counter(_SHORT.get(rule, rule) for rule, _ in result.protected.values())
    if result.not_lower:
        counts["not lower priority"] += result.not_lower
    if not counts:
        return "no protected pods"
    total = sum(counts.values())
    parts = ", ".join(f"{n} {name}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{total} pods protected: {parts}"
