"""Which nodes a preemptor's search visits, at fleet scale. Pure.

For one search shape (preemptor priority, requests) every node gets a lower bound of the key of its best
victim set (victims.set_key without the names): the fewest victims that could free the GPUs, cpu and
memory still needed, then the fewest GPUs, the lowest priorities and run times those victims could have.
Nodes are kept sorted by that bound, so a preemptor searches nodes in order of promise and stops at the
first node whose bound is worse than the best set found: the result is the one a search of every node
gives (nodes with equal sets still go to the first name). Nodes that cannot fit the shape at all (too few
GPUs, free plus reclaimable below the request) get no entry. Preemptors of the same shape share a ranking;
a node is ranked again when a decision changes it (its version).

Why a bound never drops the best set: every set a node can fit has at least the bound's victims (no fewer
of its pods free what is still needed, largest first), and with that many victims at least the fewest
GPUs, the lowest highest priority, priority sum and run time the node's eligible pods allow; a set with
more victims comes later in the order anyway. So a node whose bound is worse than a set found holds no
better set, and a node without a bound holds none at all.
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
from automator.reclaim.victims import prefix_sums

# (victims, GPUs freed, highest priority, sum of priorities, run time lost): victims.SetKey without names
Bound = tuple[int, int, int, int, float]
FITS: Bound = (0, 0, 0, 0, 0.0)
_Entry = tuple[Bound, str, int]  # (bound, node name, node version)


class _Eligible:
    """One node's eligible victims for one preemptor priority, sorted for the bounds (what a bound reads
    first is made here, the rest the first time a bound needs it): prefix sums of their GPUs, cpu and
    memory largest first (top_*: the most k victims free) and of their GPUs, priorities and run times
    smallest first (low_*: the least k victims take)."""

    __slots__ = ("low_a", "low_g", "low_p", "pods", "top_c", "top_g", "top_m", "version")

    def __init__(self, version: int, pods: list[Candidate]) -> None:
        self.version = version
        self.pods = pods
        self.top_g = prefix_sums(sorted([p.req.gpus for p in pods], reverse=True), 0)
        self.top_c: list[int] | None = None  # the same for cpu and memory: most shapes need GPUs alone
        self.top_m: list[int] = []
        self.low_g: list[int] | None = None  # prefix sums of the smallest first
        self.low_p: list[int] = []
        self.low_a: list[float] = []

    def tops(self) -> tuple[list[int], list[int]]:
        """top_c and top_m, made the first time."""
        if self.top_c is None:
            self.top_c = prefix_sums(sorted([p.req.cpu_m for p in self.pods], reverse=True), 0)
            self.top_m = prefix_sums(sorted([p.req.memory for p in self.pods], reverse=True), 0)
        return self.top_c, self.top_m

    def lows(self) -> list[int]:
        """low_g, low_p and low_a, made the first time; returns low_g."""
        if self.low_g is None:
            pods = self.pods
            self.low_p = prefix_sums(sorted([p.priority for p in pods]), 0)
            self.low_a = prefix_sums(sorted([p.age for p in pods]), 0.0)
            self.low_g = prefix_sums(sorted([p.req.gpus for p in pods]), 0)
        return self.low_g


def _single(pods: list[Candidate], need_g: int, need_c: int, need_m: int) -> Bound | None:
    """The key of the best single victim freeing the amounts needed (the least of (GPUs, priority, run time
    rounded, cpu, memory) among those that do), None when none does. Exact, not a bound: a one-victim set
    is that victim's key (a PodDisruptionBudget spent earlier in the pass may still refuse it, which only
    makes the node's real set come later, never earlier)."""
    best = min(
        [
            (p.req.gpus, p.priority, round(p.age, 3), p.req.cpu_m, p.req.memory)
            for p in pods
            if p.req.gpus >= need_g and p.req.cpu_m >= need_c and p.req.memory >= need_m
        ],
        default=None,
    )
    return None if best is None else (1, best[0], best[1], best[1], best[2])


@dataclass
class Rankings:
    """The node rankings of one pass, per search shape."""

    splits: Splits
    eligible: dict[int, dict[str, _Eligible]] = field(default_factory=dict)  # priority -> node name -> ...
    # (priority, GPUs, cpu, memory) -> the entries of its nodes, in order
    by_shape: dict[tuple[int, int, int, int], list[_Entry]] = field(default_factory=dict)
    # per preemptor priority, per readable node (name order): (free + reclaimable GPUs, node), kept by changed
    most_gpus: dict[int, dict[str, tuple[int, NodeState]]] = field(default_factory=dict)
    # per preemptor priority: (-(free + reclaimable GPUs), tie rank, node name, node version), in order:
    # the nodes as close to fitting as closest reads them (made from most_gpus, the first time it is read)
    by_most_gpus: dict[int, list[tuple[int, int, str, int]]] = field(default_factory=dict)
    tie_rank: dict[str, int] = field(default_factory=dict)
    last_eligible: dict[str, _Eligible] = field(default_factory=dict)  # per node, the entry built last
    fitting_only: set[tuple[int, int, int, int]] = field(default_factory=set)  # shapes ranked up to FITS
    # the readable nodes with a free GPU when the first shape was ranked: no decision gives a node free GPUs
    # (they stay reserved for its preemptor), so the only ones a shape may fit as they are
    with_free_gpus: list[NodeState] | None = None

    def _sorted(self, node: NodeState, priority: int) -> _Eligible:
        table = self.eligible.setdefault(priority, {})
        cached = table.get(node.name)
        if cached is not None and cached.version == node.version:
            return cached
        pods = self.splits.of(node, priority).eligible
        # Preemptor priorities mostly see the same victims on a node: the same pods share one entry.
        last = self.last_eligible.get(node.name)
        if (
            last is not None
            and last.version == node.version
            and len(last.pods) == len(pods)
            and all(map(operator.is_, last.pods, pods))
        ):
            cached = last
        else:
            cached = self.last_eligible[node.name] = _Eligible(node.version, pods)
        table[node.name] = cached
        return cached

    def bound(self, node: NodeState, priority: int, req: Requests) -> Bound | None:
        """A lower bound of the key of the node's best set for this shape; None when no set can fit (an
        unreadable node is planned for no one; fewer GPUs in all than requested fit no set)."""
        if node.error is not None or node.alloc.gpus < req.gpus:
            return None
        need = node.shortfall(req)
        if need is None:
            return FITS
        unit = _unit_bound(node, self.splits.of, priority, need[0])
        if unit is not None:
            return unit
        return _bound_of(self._sorted(node, priority), *need)

    def ranking(self, nodes: dict[str, NodeState], priority: int, req: Requests) -> Iterator[_Entry]:
        """Entries (bound, node name, node version) in order; entries of an older version are stale.

        The nodes the shape fits as they are come first (bound FITS, in name order), and while one of them
        is left a preemptor stops there: a shape's other nodes are ranked only when a preemptor reads past
        its fitting ones (until then its list holds those alone, `fitting_only`). FITS is the least key
        (no victims), so no node ranked later can beat a fitting one."""
        shape = (priority, req.gpus, req.cpu_m, req.memory)
        entries = self.by_shape.get(shape)
        if entries is None:
            if self.with_free_gpus is None:
                self.with_free_gpus = [
                    n for n in nodes.values() if n.error is None and n.alloc.gpus > n.used_gpus
                ]
            entries = self.by_shape[shape] = _fitting(self.with_free_gpus, req)
            self.fitting_only.add(shape)
        yield from entries
        if shape in self.fitting_only:
            self.fitting_only.discard(shape)
            entries = self.by_shape[shape] = self._rank_all(nodes, priority, req)
            # the fitting nodes were all read above (nothing changes a node while a preemptor reads)
            yield from itertools.dropwhile(lambda entry: entry[0] == FITS, entries)

    def _rank_all(self, nodes: dict[str, NodeState], priority: int, req: Requests) -> list[_Entry]:
        """Every node's entry for a new shape (bound, with the nodes whose free plus reclaimable GPUs fall
        short skipped before their victims are sorted: a pass ranks every node for every shape)."""
        entries: list[_Entry] = []
        gpus = req.gpus
        of = self.splits.of
        for most, node in self._most_gpus(nodes, priority).values():
            if most < gpus or node.alloc.gpus < gpus:
                continue  # even every eligible victim frees too few GPUs: no set fits
            need = node.shortfall(req)
            if need is None:
                entries.append((FITS, node.name, node.version))
                continue
            need_g, need_c, need_m = need
            b = _unit_bound(node, of, priority, need_g)
            # GPUs alone needed: one victim may do (the bound is then exact)
            if b is None and need_c <= 0 and need_m <= 0:
                split = of(node, priority)
                if split.largest >= need_g:
                    b = _single(split.eligible, need_g, need_c, need_m)
            if b is None:
                b = _bound_of(self._sorted(node, priority), need_g, need_c, need_m)
            if b is not None:
                entries.append((b, node.name, node.version))
        entries.sort()
        return entries

    def _most_gpus(self, nodes: dict[str, NodeState], priority: int) -> dict[str, tuple[int, NodeState]]:
        """most_gpus for this priority, made the first time."""
        most_gpus = self.most_gpus.get(priority)
        if most_gpus is None:
            most_gpus = self.most_gpus[priority] = self.splits.most_gpus(nodes.values(), priority)
        return most_gpus

    def changed(self, node: NodeState) -> None:
        """A decision changed the node: rank it again in every shape (its old entries are now stale)."""
        for priority, most_gpus in self.most_gpus.items():
            most_gpus.update(self.splits.most_gpus((node,), priority))  # a decided node is readable
            most = most_gpus[node.name][0]
            in_order = self.by_most_gpus.get(priority)
            if in_order is not None:
                bisect.insort(in_order, (-most, self.tie_rank[node.name], node.name, node.version))
        for shape, entries in self.by_shape.items():
            priority, gpus, cpu, mem = shape
            req = Requests(gpus, cpu, mem)
            if shape in self.fitting_only:  # ranked up to FITS only: whether the shape fits as the node is
                if node.error is None and node.alloc.gpus >= gpus and node.shortfall(req) is None:
                    bisect.insort(entries, (FITS, node.name, node.version))
                continue
            b = self.bound(node, priority, req)
            if b is not None:
                bisect.insort(entries, (b, node.name, node.version))

    def closest(
        self, nodes: dict[str, NodeState], priority: int, gpus: int, names: Collection[str]
    ) -> NodeState | None:
        """Of the nodes named with at least `gpus` allocatable GPUs, the one with the most free plus
        reclaimable GPUs for this priority (ties: the largest tie_key): the closest node an unresolved
        preemptor's reason names. None when there is none."""
        entries = self.by_most_gpus.get(priority)
        if entries is None:
            if not self.tie_rank:
                by_tie = _by_tie_key(list(nodes))
                self.tie_rank = {name: i for i, name in enumerate(by_tie)}
            tie_rank = self.tie_rank
            entries = self.by_most_gpus[priority] = sorted(
                (-most, tie_rank[name], name, node.version)
                for name, (most, node) in self._most_gpus(nodes, priority).items()
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
    entries = [
        (FITS, node.name, node.version)
        for node in nodes
        if node.error is None and node.alloc.gpus >= req.gpus and node.shortfall(req) is None
    ]
    entries.sort()
    return entries


def _bound_of(e: _Eligible, need_g: int, need_c: int, need_m: int) -> Bound | None:
    """Rankings.bound once the amounts still needed are known (some are > 0)."""
    top_g = e.top_g
    if need_g > 0 and top_g[-1] < need_g:
        return None  # all its eligible victims free too few GPUs
    # The fewest victims: k pods free at most the k largest amounts, so fewer than the first k whose
    # largest-first sum reaches the need cannot free it.
    k = max(1, bisect.bisect_left(top_g, need_g) if need_g > 0 else 0)
    if need_c > 0 or need_m > 0:
        top_c, top_m = e.tops()
        if (need_c > 0 and top_c[-1] < need_c) or (need_m > 0 and top_m[-1] < need_m):
            return None  # all its eligible victims free too little cpu or memory
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
        k = 2  # no single victim frees it all
    low_g = e.lows()
    if k >= len(low_g):
        return None  # fewer eligible victims than the fewest that could do
    # k victims free at least the need and the k fewest GPUs; their highest priority is at least the
    # lowest one, their priority sum and run time at least the k lowest.
    return (k, max(need_g, low_g[k]), e.low_p[1], e.low_p[k], round(e.low_a[k], 3))


def tie_key(name: str) -> list[int]:
    """Among nodes as close to fitting, an unresolved preemptor's reason names the one with the largest."""
    return [-ord(c) for c in name]


def _by_tie_key(names: list[str]) -> list[str]:
    """The names sorted by tie_key, largest first. Each character c maps to chr(0x10FFFF - ord(c)) (str
    translate, in C): the mapped names compare as their tie_keys do, a longer name after its prefix."""
    table = {o: 0x10FFFF - o for o in set(map(ord, "".join(names)))}
    return sorted(names, key=lambda name: name.translate(table), reverse=True)
