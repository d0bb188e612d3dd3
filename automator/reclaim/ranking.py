"""Which nodes a preemptor's search visits, at fleet scale. Pure.

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
import operator
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

from automator.objects.resources import Requests
from automator.reclaim.cluster_index import Candidate, NodeState
from automator.reclaim.splits import Split, Splits

# (victims, GPUs freed, highest priority, sum of priorities, run time lost): victims.SetKey without names
Bound = tuple[int, int, int, int, float]
FITS: Bound = (0, 0, 0, 0, 0.0)
_Entry = tuple[Bound, str, int]  # (bound, node name, node version)


class _Eligible:
    """One node's eligible victims for one preemptor priority, sorted for the bounds (what a bound reads
    first is made here, the rest the first time a bound needs it)."""

    __slots__ = ("low_a", "low_g", "low_p", "pods", "top_c", "top_g", "top_m", "version")

    def __init__(self, version: int, pods: list[Candidate]) -> None:
        self.version = version
        self.pods = pods
        self.top_g = _prefix(sorted([p.req.gpus for p in pods], reverse=True))  # prefix sums, largest first
        self.top_c: list[int] | None = None  # the same for cpu and memory: most shapes need GPUs alone
        self.top_m: list[int] = []
        self.low_g: list[int] | None = None  # prefix sums of the smallest first
        self.low_p: list[int] = []
        self.low_a: list[float] = []

    def tops(self) -> tuple[list[int], list[int]]:
        """top_c and top_m, made the first time."""
        if self.top_c is None:
            self.top_c = _prefix(sorted([p.req.cpu_m for p in self.pods], reverse=True))
            self.top_m = _prefix(sorted([p.req.memory for p in self.pods], reverse=True))
        return self.top_c, self.top_m

    def lows(self) -> list[int]:
        """low_g, low_p and low_a, made the first time; returns low_g."""
        if self.low_g is None:
            pods = self.pods
            self.low_p = _prefix(sorted([p.priority for p in pods]))
            self.low_a = list(itertools.accumulate(sorted([p.age for p in pods]), initial=0.0))
            self.low_g = _prefix(sorted([p.req.gpus for p in pods]))
        return self.low_g


def _single(pods: list[Candidate], need_g: int, need_c: int, need_m: int) -> Bound | None:
    """The key of the best single victim freeing the amounts needed (the least of (GPUs, priority, run time
    rounded, cpu, memory) among those that do), None when none does."""
    best = min(
        [
            (p.req.gpus, p.priority, round(p.age, 3), p.req.cpu_m, p.req.memory)
            for p in pods
            if p.req.gpus >= need_g and p.req.cpu_m >= need_c and p.req.memory >= need_m
        ],
        default=None,
    )
    return None if best is None else (1, best[0], best[1], best[1], best[2])


def _prefix(values: list[int]) -> list[int]:
    return list(itertools.accumulate(values, initial=0))


@dataclass
class Rankings:
    """The node rankings of one pass, per search shape."""

    splits: Splits
    eligible: dict[int, dict[str, _Eligible]] = field(default_factory=dict)  # priority -> node name -> ...
    by_shape: dict[tuple[int, int, int, int], list[tuple[Bound, str, int]]] = field(default_factory=dict)
    # per preemptor priority: (-(free + reclaimable GPUs), tie rank, node name, node version), in order
    # (made from gains, the first time closest needs it)
    reach: dict[int, list[tuple[int, int, str, int]]] = field(default_factory=dict)
    tie_rank: dict[str, int] = field(default_factory=dict)
    last: dict[str, _Eligible] = field(default_factory=dict)  # per node, the entry built last
    # per preemptor priority, per readable node (name order): (free + reclaimable GPUs, node), kept by changed
    gains: dict[int, dict[str, tuple[int, NodeState]]] = field(default_factory=dict)
    partial: set[tuple[int, int, int, int]] = field(default_factory=set)  # shapes ranked up to FITS only
    # the readable nodes with a free GPU when the first shape was ranked: no decision gives a node free GPUs
    # (they stay reserved for its preemptor), so the only ones a shape may fit as they are
    spare: list[NodeState] | None = None

    def _sorted(self, node: NodeState, priority: int) -> _Eligible:
        table = self.eligible.get(priority)
        if table is None:
            table = self.eligible[priority] = {}
        cached = table.get(node.name)
        if cached is not None and cached.version == node.version:
            return cached
        pods = self.splits.of(node, priority).eligible
        # Preemptor priorities mostly see the same victims on a node: the same pods share one entry.
        last = self.last.get(node.name)
        if (
            last is not None
            and last.version == node.version
            and len(last.pods) == len(pods)
            and all(map(operator.is_, last.pods, pods))
        ):
            cached = last
        else:
            cached = self.last[node.name] = _Eligible(node.version, pods)
        table[node.name] = cached
        return cached

    def _most(self, node: NodeState, priority: int) -> int:
        """The node's free plus reclaimable GPUs for this priority (without sorting its victims: most nodes
        then rank for no shape)."""
        return node.alloc.gpus - node.used_gpus + self.splits.of(node, priority).reclaimable

    def bound(self, node: NodeState, priority: int, req: Requests) -> Bound | None:
        """A lower bound of the key of the node's best set for this shape; None when no set can fit."""
        if node.error is not None or node.alloc.gpus < req.gpus:
            return None
        need_g = req.gpus - node.alloc.gpus + node.used_gpus
        fits = need_g <= 0 and node.free()[1] >= req.cpu_m and node.free()[2] >= req.memory
        if not fits:
            unit = _unit_bound(node, self.splits.of, priority, need_g)
            if unit is not None:
                return unit
        return _bound(node, req, self._sorted, priority)

    def ranking(self, nodes: dict[str, NodeState], priority: int, req: Requests) -> Iterator[_Entry]:
        """Entries (bound, node name, node version) in order; entries of an older version are stale.

        The nodes the shape fits as they are come first (bound FITS, in name order), and while one of them
        is left a preemptor stops there: a shape's other nodes are ranked only when a preemptor reads past
        its fitting ones (until then its list holds those alone, `partial`)."""
        shape = (priority, req.gpus, req.cpu_m, req.memory)
        entries = self.by_shape.get(shape)
        if entries is None:
            if self.spare is None:
                self.spare = [n for n in nodes.values() if n.error is None and n.alloc.gpus > n.used_gpus]
            entries = self.by_shape[shape] = _fitting(self.spare, req)
            self.partial.add(shape)
        yield from entries
        if shape in self.partial:
            self.partial.discard(shape)
            entries = self.by_shape[shape] = self._rank_all(nodes, priority, req)
            # the fitting nodes were all read above (nothing changes a node while a preemptor reads)
            yield from itertools.dropwhile(lambda entry: entry[0] == FITS, entries)

    def _rank_all(
        self, nodes: dict[str, NodeState], priority: int, req: Requests
    ) -> list[tuple[Bound, str, int]]:
        """Every node's entry for a new shape: _bound inlined up to the eligible victims (a pass ranks
        every node for every shape), nodes whose free plus reclaimable GPUs fall short skipped first."""
        entries: list[_Entry] = []
        gpus, cpu, mem = req.gpus, req.cpu_m, req.memory
        of = self.splits.of
        for most, node in self._gains(nodes, priority).values():
            alloc = node.alloc
            if most < gpus or alloc.gpus < gpus:
                continue  # no set frees enough GPUs
            name = node.name
            need_g = gpus - alloc.gpus + node.used_gpus
            need_c = cpu - alloc.cpu_m + node.used_cpu
            need_m = mem - alloc.memory + node.used_mem
            if need_g <= 0 and need_c <= 0 and need_m <= 0:
                entries.append((FITS, name, node.version))
                continue
            b = _unit_bound(node, of, priority, need_g)
            # GPUs alone needed: one victim may do (the bound is then exact)
            if b is None and need_c <= 0 and need_m <= 0:
                split = of(node, priority)
                if split.largest >= need_g:
                    b = _single(split.eligible, need_g, need_c, need_m)
            if b is None:
                b = _bound_of(self._sorted(node, priority), need_g, need_c, need_m)
            if b is not None:
                entries.append((b, name, node.version))
        entries.sort()
        return entries

    def _gains(self, nodes: dict[str, NodeState], priority: int) -> dict[str, tuple[int, NodeState]]:
        """gains for this priority, made the first time."""
        gains = self.gains.get(priority)
        if gains is None:
            gains = self.gains[priority] = self.splits.reclaimable(nodes.values(), priority)
        return gains

    def changed(self, node: NodeState) -> None:
        """A decision changed the node: rank it again in every shape (its old entries are now stale)."""
        for priority, gains in self.gains.items():
            most = self._most(node, priority)
            gains[node.name] = (most, node)
            reach = self.reach.get(priority)
            if reach is not None:
                bisect.insort(reach, (-most, self.tie_rank[node.name], node.name, node.version))
        free_g, free_c, free_m = node.free()
        for shape, entries in self.by_shape.items():
            priority, gpus, cpu, mem = shape
            if shape in self.partial:  # ranked up to FITS only: whether the shape fits as the node is
                fits = free_g >= gpus and free_c >= cpu and free_m >= mem
                if fits and node.error is None and node.alloc.gpus >= gpus:
                    bisect.insort(entries, (FITS, node.name, node.version))
                continue
            b = self.bound(node, priority, Requests(gpus, cpu, mem))
            if b is not None:
                bisect.insort(entries, (b, node.name, node.version))

    def closest(
        self, nodes: dict[str, NodeState], priority: int, gpus: int, names: Collection[str]
    ) -> NodeState | None:
        """Of the nodes named with at least `gpus` allocatable GPUs, the one with the most free plus
        reclaimable GPUs for this priority (ties: the largest tie_key): the closest node an unresolved
        preemptor's reason names. None when there is none."""
        entries = self.reach.get(priority)
        if entries is None:
            if not self.tie_rank:
                by_tie = _by_tie_key(list(nodes))
                self.tie_rank = {name: i for i, name in enumerate(by_tie)}
            tie_rank = self.tie_rank
            entries = self.reach[priority] = sorted(
                (-most, tie_rank[name], name, node.version)
                for name, (most, node) in self._gains(nodes, priority).items()
            )
        for _, _, name, version in entries:
            node = nodes[name]
            if version == node.version and name in names and node.alloc.gpus >= gpus:
                return node
        return None


# Below every set's key: where victim gangs are eligible a node is searched before any bound is compared.
_LOWEST_PRIORITY = -(2**62)


def _unit_bound(
    node: NodeState, of: Callable[[NodeState, int], Split], priority: int, need_g: int
) -> Bound | None:
    """A lower bound for a node where victim gangs are eligible for the priority: a gang's key counts
    members on other nodes too, so the bounds made from the node's own pods do not hold; this one (one
    victim freeing what is needed, the lowest priorities, no run time) does. None for other nodes."""
    if not node.has_units or not of(node, priority).units:
        return None
    return (1, max(need_g, 0), _LOWEST_PRIORITY, _LOWEST_PRIORITY, 0.0)


def _fitting(nodes: list[NodeState], req: Requests) -> list[_Entry]:
    """The entries of the readable nodes the shape fits as they are."""
    gpus, cpu, mem = req.gpus, req.cpu_m, req.memory
    entries = [
        (FITS, node.name, node.version)
        for node in nodes
        if node.error is None
        and node.alloc.gpus >= gpus
        and node.alloc.gpus - node.used_gpus >= gpus
        and node.alloc.cpu_m - node.used_cpu >= cpu
        and node.alloc.memory - node.used_mem >= mem
    ]
    entries.sort()
    return entries


def _bound(
    node: NodeState, req: Requests, eligible: Callable[[NodeState, int], _Eligible], priority: int
) -> Bound | None:
    """Rankings.bound for a readable node with enough GPUs in all."""
    need_g = req.gpus - node.alloc.gpus + node.used_gpus
    need_c = req.cpu_m - node.alloc.cpu_m + node.used_cpu
    need_m = req.memory - node.alloc.memory + node.used_mem
    if need_g <= 0 and need_c <= 0 and need_m <= 0:
        return FITS
    return _bound_of(eligible(node, priority), need_g, need_c, need_m)


def _bound_of(e: _Eligible, need_g: int, need_c: int, need_m: int) -> Bound | None:
    """_bound once the amounts still needed are known (some are > 0)."""
    top_g = e.top_g
    if need_g > 0 and top_g[-1] < need_g:
        return None
    k = max(1, bisect.bisect_left(top_g, need_g) if need_g > 0 else 0)  # the fewest victims, largest first
    if need_c > 0 or need_m > 0:
        top_c, top_m = e.tops()
        if (need_c > 0 and top_c[-1] < need_c) or (need_m > 0 and top_m[-1] < need_m):
            return None
        k = max(
            k,
            bisect.bisect_left(top_c, need_c) if need_c > 0 else 0,
            bisect.bisect_left(top_m, need_m) if need_m > 0 else 0,
        )
    if k == 1:
        # One victim may do: the best single victim is exact (but for PDB budgets spent in the pass).
        single = _single(e.pods, need_g, need_c, need_m)
        if single is not None:
            return single
        k = 2
    low_g = e.lows()
    if k >= len(low_g):
        return None
    return (k, max(need_g, low_g[k]), e.low_p[1], e.low_p[k], round(e.low_a[k], 3))


def tie_key(name: str) -> list[int]:
    """Among nodes as close to fitting, an unresolved preemptor's reason names the one with the largest."""
    return [-ord(c) for c in name]


def _by_tie_key(names: list[str]) -> list[str]:
    """The names sorted by tie_key, largest first. Each character c maps to chr(0x10FFFF - ord(c)) (str
    translate, in C): the mapped names compare as their tie_keys do, a longer name after its prefix."""
    table = {o: 0x10FFFF - o for o in set(map(ord, "".join(names)))}
    return sorted(names, key=lambda name: name.translate(table), reverse=True)
