"""Which nodes a preemptor's search visits, at fleet scale (issue 14). Pure.

For one search shape (preemptor priority, requests) every node gets a lower bound of the key of its best
victim set (victims.set_key without the names): the fewest victims that could free the GPUs, cpu and
memory still needed, then the fewest GPUs, the lowest priorities and run times those victims could have.
Nodes are kept sorted by that bound, so a preemptor searches nodes in order of promise and stops at the
first node whose bound is worse than the best set found: the result is the one a search of every node
gives (nodes with equal sets still go to the first name). Nodes that cannot fit the shape at all (too few
GPUs, free plus reclaimable below the request) get no entry. Preemptors of the same shape share a ranking;
a node is ranked again when a decision changes it (its version).
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

from automator.cluster_index import NodeState
from automator.model import PodKey
from automator.resources import Requests
from automator.victims import is_eligible

# (victims, GPUs freed, highest priority, sum of priorities, run time lost): victims.SetKey without names
Bound = tuple[int, int, int, int, float]
FITS: Bound = (0, 0, 0, 0, 0.0)


@dataclass
class _Eligible:
    """One node's eligible victims for one preemptor priority, sorted for the bounds."""

    version: int
    top_g: list[int]  # prefix sums of the largest first
    top_c: list[int]
    top_m: list[int]
    low_g: list[int]  # prefix sums of the smallest first
    low_p: list[int]
    low_a: list[float]
    pods: list[tuple[int, int, int, int, float]]  # (GPUs, cpu, memory, priority, run time) of each


def _prefix(values: list[int]) -> list[int]:
    return list(itertools.accumulate(values, initial=0))


def _need(top: list[int], need: int) -> int | None:
    """The fewest values (largest first) summing to `need`, or None."""
    if need <= 0:
        return 0
    if top[-1] < need:
        return None
    return bisect.bisect_left(top, need)


@dataclass
class Rankings:
    """The node rankings of one pass, per search shape."""

    exclude: frozenset[PodKey]
    eligible: dict[tuple[str, int], _Eligible] = field(default_factory=dict)
    by_shape: dict[tuple[int, int, int, int], list[tuple[Bound, str, int]]] = field(default_factory=dict)

    def _sorted(self, node: NodeState, priority: int) -> _Eligible:
        cached = self.eligible.get((node.name, priority))
        if cached is None or cached.version != node.version:
            pods = [pod for pod in node.candidates if is_eligible(pod, priority, self.exclude)]
            cached = _Eligible(
                node.version,
                _prefix(sorted((p.req.gpus for p in pods), reverse=True)),
                _prefix(sorted((p.req.cpu_m for p in pods), reverse=True)),
                _prefix(sorted((p.req.memory for p in pods), reverse=True)),
                _prefix(sorted(p.req.gpus for p in pods)),
                _prefix(sorted(p.priority for p in pods)),
                list(itertools.accumulate(sorted(p.age for p in pods), initial=0.0)),
                [(p.req.gpus, p.req.cpu_m, p.req.memory, p.priority, p.age) for p in pods],
            )
            self.eligible[(node.name, priority)] = cached
        return cached

    def bound(self, node: NodeState, priority: int, req: Requests) -> Bound | None:
        """A lower bound of the key of the node's best set for this shape; None when no set can fit."""
        if node.error is not None or node.alloc.gpus < req.gpus:
            return None
        free_g, free_c, free_m = node.free()
        if free_g >= req.gpus and free_c >= req.cpu_m and free_m >= req.memory:
            return FITS
        e = self._sorted(node, priority)
        counts = (
            _need(e.top_g, req.gpus - free_g),
            _need(e.top_c, req.cpu_m - free_c),
            _need(e.top_m, req.memory - free_m),
        )
        if None in counts:
            return None
        k = max(1, *(c for c in counts if c is not None))
        if k == 1:
            # One victim may do: the best single victim is exact (but for PDB budgets spent in the pass).
            need = (req.gpus - free_g, req.cpu_m - free_c, req.memory - free_m)
            singles = [
                (g, p, p, round(a, 3))
                for g, c, m, p, a in e.pods
                if g >= need[0] and c >= need[1] and m >= need[2]
            ]
            if singles:
                return (1, *min(singles))
            k = 2
            if k >= len(e.low_g):
                return None
        return (
            k,
            max(req.gpus - free_g, e.low_g[k]),
            e.low_p[1],
            e.low_p[k],
            round(e.low_a[k], 3),
        )

    def ranking(
        self, nodes: dict[str, NodeState], priority: int, req: Requests
    ) -> list[tuple[Bound, str, int]]:
        """Entries (bound, node name, node version) in order; entries of an older version are stale."""
        shape = (priority, req.gpus, req.cpu_m, req.memory)
        entries = self.by_shape.get(shape)
        if entries is None:
            entries = []
            for node in nodes.values():
                b = self.bound(node, priority, req)
                if b is not None:
                    entries.append((b, node.name, node.version))
            entries.sort()
            self.by_shape[shape] = entries
        return entries

    def changed(self, node: NodeState) -> None:
        """A decision changed the node: rank it again in every shape (its old entries are now stale)."""
        for (priority, *amounts), entries in self.by_shape.items():
            b = self.bound(node, priority, Requests(*amounts))
            if b is not None:
                bisect.insort(entries, (b, node.name, node.version))
