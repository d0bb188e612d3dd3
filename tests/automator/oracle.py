"""The straightforward reclaim planner, kept as the oracle of the property tests (issues 14 and 15).

No caches, no pruning, no bounds: every node in name order, every subset of its eligible pods, the
contract's order (docs/reclaim.md) as `set_key` states it. Only for small clusters.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.resources import Requests
from automator.reclaim.cluster_index import Candidate, NodeState, index_cluster
from automator.reclaim.eligibility import verdict_rule
from automator.reclaim.fit import static_misfit
from automator.reclaim.model import PlannerConfig, PodUsage
from automator.reclaim.planner import plan
from automator.reclaim.victims import SetKey, set_key


@dataclass(frozen=True)
class Outcome:
    """What a pass decides, in comparable form."""

    evicted: tuple[tuple[str, str, tuple[str, ...]], ...]  # (preemptor, node, victims)
    already_fit: tuple[tuple[str, str], ...]
    unresolved: tuple[str, ...]


def fits(free: tuple[int, int, int], victims: Sequence[Candidate], req: Requests) -> bool:
    return (
        free[0] + sum(v.req.gpus for v in victims) >= req.gpus
        and free[1] + sum(v.req.cpu_m for v in victims) >= req.cpu_m
        and free[2] + sum(v.req.memory for v in victims) >= req.memory
    )


def brute_force(
    eligible: Sequence[Candidate],
    free: tuple[int, int, int],
    req: Requests,
    remaining: Mapping[tuple[str, str], int],
) -> tuple[SetKey, tuple[Candidate, ...]] | None:
    """The best set by the contract's order over all subsets, or None."""
    best: tuple[SetKey, tuple[Candidate, ...]] | None = None
    for size in range(len(eligible) + 1):
        for combo in itertools.combinations(eligible, size):
            counts = Counter(p for v in combo for p in v.pdbs)
            if not fits(free, combo, req) or any(remaining.get(p, 0) < n for p, n in counts.items()):
                continue
            key = set_key(sorted(combo, key=lambda v: (v.priority, v.age, str(v.key))))
            if best is None or key < best[0]:
                best = (key, combo)
    return best


def oracle_plan(
    cluster: ClusterState, usage: Mapping[ObjectKey, PodUsage], config: PlannerConfig, now: datetime
) -> Outcome:
    index = index_cluster(cluster, usage, config, now)
    evicted: list[tuple[str, str, tuple[str, ...]]] = []
    already: list[tuple[str, str]] = []
    unresolved: list[str] = []
    for pre in index.preemptors:
        assert pre.error is None and pre.req is not None, "the oracle takes well-formed preemptors only"
        req = pre.req
        best: tuple[SetKey, NodeState, tuple[Candidate, ...]] | None = None
        for node in index.nodes.values():
            if node.error or static_misfit(pre.pod, node.node) or node.alloc.gpus < req.gpus:
                continue
            eligible = [
                c
                for c in node.candidates
                if c.priority < pre.priority and verdict_rule(c.assessment, pre.priority)[0]
            ]
            found = brute_force(eligible, node.free(), req, index.pdbs.remaining)
            if found is not None and (best is None or found[0][:-1] < best[0][:-1]):
                best = (found[0], node, found[1])
        if best is None:
            unresolved.append(str(pre.key))
            continue
        _, node, victims = best
        if not victims:
            already.append((str(pre.key), node.name))
            continue
        free_before = node.free()[0]
        freed = sum(v.req.gpus for v in victims)
        for v in victims:
            node.candidates.remove(v)
            node.take(v.req, -1)
            for pdb in v.pdbs:
                index.pdbs.remaining[pdb] -= 1
        node.take(req)
        node.used_gpus += max(0, min(freed, free_before + freed - req.gpus))
        evicted.append((str(pre.key), node.name, tuple(sorted(str(v.key) for v in victims))))
    return Outcome(tuple(evicted), tuple(already), tuple(unresolved))


def planner_outcome(
    cluster: ClusterState, usage: Mapping[ObjectKey, PodUsage], config: PlannerConfig, now: datetime
) -> Outcome:
    result = plan(cluster, usage, config, now)
    return Outcome(
        tuple(
            (str(d.preemptor), d.node, tuple(sorted(str(v.pod) for v in d.victims))) for d in result.decisions
        ),
        tuple((str(d.preemptor), d.node) for d in result.already_fit),
        tuple(str(u.preemptor) for u in result.unresolved),
    )
