"""Stage 2 of a plan: the victim-set search on one node for one preemptor (pure).

Fewest victims first, then fewest GPUs freed, lowest highest priority, lowest priority sum, least run time
lost, names; a set must free enough GPUs, CPU and memory and keep every PodDisruptionBudget's
disruptionsAllowed. docs/reclaim.md states the order.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from automator.objects.resources import Requests
from automator.reclaim.cluster_index import Candidate, NodeState
from automator.reclaim.eligibility import PdbIndex
from automator.reclaim.splits import Split

# (count, gpus freed, highest priority, sum of priorities, seconds of run time lost, victim names)
SetKey = tuple[int, int, int, int, float, tuple[str, ...]]


@dataclass(slots=True)
class NodeResult:
    key: SetKey | None  # None: no set fits on this node
    victims: tuple[Candidate, ...]
    free_gpus: int
    split: Split
    misfit: str | None
    cut_off: bool = False  # the search ran out of budget: the node is skipped for this preemptor


def set_key(victims: Sequence[Candidate]) -> SetKey:
    return (
        len(victims),
        sum(v.req.gpus for v in victims),
        max((v.priority for v in victims), default=0),
        sum(v.priority for v in victims),
        round(sum(v.age for v in victims), 3),
        tuple(sorted(str(v.key) for v in victims)),
    )


# set_key(()): the preemptor fits as the node is
NO_VICTIMS: SetKey = (0, 0, 0, 0, 0.0, ())


def search_node(node: NodeState, req: Requests, split: Split, pdbs: PdbIndex) -> NodeResult:
    """Best victim set on one node for a preemptor with these requests (split: the node's candidates for
    the preemptor's priority)."""
    result = NodeResult(None, (), node.alloc.gpus - node.used_gpus, split, None)
    need = node.shortfall(req)
    if need is None:
        result.key = NO_VICTIMS
        return result
    if split.units:
        free = (req.cpu_m - need[1], req.memory - need[2])
        return _with_units(result, node.name, need, split, pdbs, free, req)
    if need[0] > split.reclaimable or not split.eligible:
        return result  # even every eligible victim frees too few GPUs: no set fits
    found = best_set(split.eligible, need, pdbs)
    if found is CUT_OFF:
        result.cut_off = True
        result.misfit = (
            f"search cut off after {SEARCH_BUDGET:,} steps among {len(split.eligible)} eligible pods: "
            "node skipped for this preemptor"
        )
    elif found:
        result.key, result.victims = set_key(found), tuple(found)
    else:
        eligible = split.eligible
        free_c, free_m = req.cpu_m - need[1], req.memory - need[2]
        cpu = free_c + sum(p.req.cpu_m for p in eligible)
        mem = free_m + sum(p.req.memory for p in eligible)
        result.misfit = _misfit(req, len(eligible), (free_c, cpu), (free_m, mem))
    return result


# Up to this many victim gangs on one node every combination of them is tried (2**8 = 256 sets of gangs,
# each completed by the single pods' own search); a node with more is cut off for the preemptor.
MAX_UNITS = 8


def _with_units(
    result: NodeResult,
    node: str,
    need: tuple[int, int, int],
    split: Split,
    pdbs: PdbIndex,
    free: tuple[int, int],
    req: Requests,
) -> NodeResult:
    """search_node on a node where victim gangs are eligible: every combination of the gangs, completed by
    the best set of single pods for what is still needed, compared by the whole set's key (a gang counts
    all its members, on every node). Within one combination the single pods are the best set by their own
    order: the whole set's key can differ from it only where the gangs already hold the highest priority
    and two completions tie on count and GPUs (docs/reclaim.md, "Gangs")."""
    units = split.units
    if len(units) > MAX_UNITS:
        result.cut_off = True
        result.misfit = f"{len(units)} victim gangs, more than {MAX_UNITS}: node skipped for this preemptor"
        return result
    remaining = pdbs.remaining
    singles_reclaimable = sum(p.req.gpus for p in split.eligible)
    best: tuple[SetKey, list[Candidate]] | None = None
    cut = False
    for size in range(len(units) + 1):
        for combo in itertools.combinations(units, size):
            members = [m for unit in combo for m in unit.members]
            taken = Counter(b for m in members for b in m.pdbs)
            if any(remaining.get(b, 0) < n for b, n in taken.items()):
                continue
            local = [m for m in members if m.node == node]
            still = (
                need[0] - sum(m.req.gpus for m in local),
                need[1] - sum(m.req.cpu_m for m in local),
                need[2] - sum(m.req.memory for m in local),
            )
            singles: list[Candidate] = []
            if still[0] > 0 or still[1] > 0 or still[2] > 0:
                if still[0] > singles_reclaimable or not split.eligible:
                    continue
                # what the gangs' members leave of the budgets (a copy only when they take from one)
                spent = {b: remaining[b] - n for b, n in taken.items()}
                left = PdbIndex(remaining={**remaining, **spent}) if spent else pdbs
                singles = best_set(split.eligible, still, left)
                if singles is CUT_OFF:
                    cut = True
                    continue
                if not singles:
                    continue
            chosen = sorted(members + singles, key=_rank)
            key = set_key(chosen)
            if best is None or key < best[0]:
                best = (key, chosen)
    if best is not None:
        result.key, result.victims = best[0], tuple(best[1])
    elif cut:
        result.cut_off = True
        result.misfit = f"search cut off after {SEARCH_BUDGET:,} steps: node skipped for this preemptor"
    else:
        pods = split.eligible + split.unit_members
        cpu = free[0] + sum(p.req.cpu_m for p in pods)
        mem = free[1] + sum(p.req.memory for p in pods)
        result.misfit = _misfit(req, len(pods), (free[0], cpu), (free[1], mem))
    return result


def _rank(pod: Candidate) -> tuple[int, float, str]:
    return (pod.priority, pod.age, str(pod.key))


@dataclass
class _Class:
    """Eligible pods alike in everything the order compares except run time and name: for a given count
    taken from the class, its first pods (least run time, then name) are always the best choice."""

    gpus: int
    cpu: int
    mem: int
    priority: int
    pdbs: tuple[tuple[str, str], ...]
    pods: list[Candidate]


def _classes(eligible: Sequence[Candidate]) -> list[_Class]:
    groups: dict[tuple[int, int, int, int, tuple[tuple[str, str], ...]], list[Candidate]] = {}
    for pod in sorted(eligible, key=lambda p: (p.age, str(p.key))):
        shape = (pod.req.gpus, pod.req.cpu_m, pod.req.memory, pod.priority, tuple(pod.pdbs))
        groups.setdefault(shape, []).append(pod)
    classes: list[_Class] = []
    for (gpus, cpu, mem, prio, pdb_ids), pods in groups.items():
        ages = [p.age for p in pods]
        # Run times are compared rounded to the millisecond: pods whose run times differ by less than that
        # (but are not equal) could swap places on their names, so they are not grouped.
        close = any(0 < b - a < 0.002 for a, b in itertools.pairwise(ages))
        for part in [[p] for p in pods] if close else [pods]:
            classes.append(_Class(gpus, cpu, mem, prio, pdb_ids, part))
    # Cheapest first (lowest priority, fewest GPUs): good sets are found early and bound the rest.
    classes.sort(key=lambda c: (c.priority, c.gpus, -c.cpu, -c.mem, c.pods[0].age, str(c.pods[0].key)))
    return classes


class _CutOff(list[Candidate]):
    """Marker: the search ran out of budget."""


CUT_OFF = _CutOff()


def best_set(eligible: Sequence[Candidate], need: tuple[int, int, int], pdbs: PdbIndex) -> list[Candidate]:
    """The first set in the contract's order that frees `need` (GPUs, cpu, memory still missing; <= 0 when
    none) within the PDB budgets: an exact branch and bound, by set size. [] when no set fits, CUT_OFF when
    the search exceeded SEARCH_BUDGET steps."""
    if len(eligible) <= _FEW and 1 << len(eligible) <= SEARCH_BUDGET:
        return _few_best(eligible, need, pdbs.remaining)
    classes = _classes(eligible)
    pods = [p for c in classes for p in c.pods]
    n = len(pods)
    # Per suffix of the class list: the pods' values sorted, to bound what the remaining slots can add.
    starts = list(itertools.accumulate([len(c.pods) for c in classes], initial=0))
    suffix: list[tuple[list[int], list[int], list[int], list[int], list[int], list[float]]] = []
    for j in range(len(classes) + 1):
        rest = pods[starts[j] :]
        suffix.append(
            (
                prefix_sums(sorted((p.req.gpus for p in rest), reverse=True), 0),
                prefix_sums(sorted((p.req.cpu_m for p in rest), reverse=True), 0),
                prefix_sums(sorted((p.req.memory for p in rest), reverse=True), 0),
                prefix_sums(sorted(p.req.gpus for p in rest), 0),
                prefix_sums(sorted(p.priority for p in rest), 0),
                prefix_sums(sorted(p.age for p in rest), 0.0),
            )
        )
    min_prio = [min((c.priority for c in classes[j:]), default=0) for j in range(len(classes) + 1)]
    top_g = suffix[0][0]
    # Fewer pods than the `lower` largest free too few GPUs; sizes go up, and the count comes first in the
    # order, so the first size with a fitting set holds the best set.
    lower = next((k for k in range(n + 1) if top_g[k] >= need[0]), n + 1)
    search = _Search(classes, suffix, min_prio, need, pdbs)
    for size in range(max(lower, 1), n + 1):
        search.run(size)
        if search.steps > SEARCH_BUDGET:
            return CUT_OFF
        if search.best is not None:
            return sorted(search.best[1], key=_rank)
    return []


# Up to this many eligible pods every subset is tried (at most 16): the same set as the branch and bound
# (the first in the contract's order), without its set-up, for the nodes of a few large pods.
_FEW = 4


def _few_best(
    eligible: Sequence[Candidate], need: tuple[int, int, int], remaining: dict[tuple[str, str], int]
) -> list[Candidate]:
    """best_set by trying every subset, smallest first (a few eligible pods)."""
    ranked = sorted(eligible, key=_rank)  # combinations keep this order: each set comes sorted by _rank
    need_g, need_c, need_m = need
    for size in range(1, len(ranked) + 1):
        best: tuple[SetKey, tuple[Candidate, ...]] | None = None
        for combo in itertools.combinations(ranked, size):
            if (
                sum([p.req.gpus for p in combo]) < need_g
                or sum([p.req.cpu_m for p in combo]) < need_c
                or sum([p.req.memory for p in combo]) < need_m
            ):
                continue
            taken = Counter(b for p in combo for b in p.pdbs)
            if any(remaining.get(b, 0) < n for b, n in taken.items()):
                continue
            key = set_key(combo)
            if best is None or key < best[0]:
                best = (key, combo)
        if best is not None:
            return list(best[1])
    return []


_N = TypeVar("_N", int, float)


def prefix_sums(values: Iterable[_N], zero: _N) -> list[_N]:
    """[zero, v0, v0 + v1, ...]: entry k is the sum of the first k values (the bounds read sorted values)."""
    return list(itertools.accumulate(values, initial=zero))


# Steps (branches tried) one node's search may take for one preemptor before the node is skipped.
SEARCH_BUDGET = 200_000


class _Chosen(NamedTuple):
    """What the pods chosen so far in a branch add up to, in the terms of the order."""

    gpus: int
    cpu: int
    memory: int
    max_priority: int
    priority_sum: int
    age: float  # run time lost

    def plus(self, cls: _Class, take: int, picked: list[Candidate]) -> _Chosen:
        """With `take` more pods of the class (`picked`, its first ones)."""
        return _Chosen(
            self.gpus + take * cls.gpus,
            self.cpu + take * cls.cpu,
            self.memory + take * cls.mem,
            max(self.max_priority, cls.priority),
            self.priority_sum + take * cls.priority,
            self.age + sum(p.age for p in picked),
        )


NOTHING_CHOSEN = _Chosen(0, 0, 0, 0, 0, 0.0)


class _Search:
    def __init__(
        self,
        classes: list[_Class],
        suffix: list[tuple[list[int], list[int], list[int], list[int], list[int], list[float]]],
        min_prio: list[int],
        need: tuple[int, int, int],
        pdbs: PdbIndex,
    ) -> None:
        self.classes = classes
        self.suffix = suffix
        self.min_prio = min_prio
        self.need = need
        self.remaining = pdbs.remaining
        self.steps = 0
        self.best: tuple[SetKey, list[Candidate]] | None = None
        self.counts: Counter[tuple[str, str]] = Counter()
        # Dominance between single pods (the best set is closed under it, see _dominates): skipping a pod
        # forbids the later pods it dominates, taking one forces the later pods that dominate it.
        self.forbids: list[list[int]] = [[] for _ in classes]
        self.forces: list[list[int]] = [[] for _ in classes]
        single = [i for i, c in enumerate(classes) if len(c.pods) == 1]
        for x, y in itertools.combinations(single, 2):
            if _dominates(classes[x], classes[y]):
                self.forbids[x].append(y)
            elif _dominates(classes[y], classes[x]):
                self.forces[x].append(y)
        self.forbidden = [0] * len(classes)
        self.forced = [0] * len(classes)

    def run(self, size: int) -> None:
        self.best = None
        self.taken: list[Candidate] = []
        self._branch(0, size, NOTHING_CHOSEN)

    def _branch(self, j: int, left: int, chosen: _Chosen) -> None:
        """Every way to fill `left` more slots from classes j.. onto the pods chosen so far."""
        self.steps += 1
        if self.steps > SEARCH_BUDGET:
            return
        need_g, need_c, need_m = self.need
        if left == 0:
            if chosen.gpus >= need_g and chosen.cpu >= need_c and chosen.memory >= need_m:
                key = set_key(sorted(self.taken, key=_rank))
                if self.best is None or key < self.best[0]:
                    self.best = (key, list(self.taken))
            return
        top_g, top_c, top_m, low_g, low_p, low_a = self.suffix[j]
        if left >= len(top_g):  # fewer pods left than slots: no set of this size down this branch
            return
        # Even the `left` largest of the rest cannot free what is still needed: nothing down here fits.
        if chosen.gpus + top_g[left] < need_g or chosen.cpu + top_c[left] < need_c:
            return
        if chosen.memory + top_m[left] < need_m:
            return
        if self.best is not None:
            # Every set down this branch has the size of the best one, and at least these GPUs (the `left`
            # fewest of the rest, and what is needed), highest priority (the lowest of the rest) and priority
            # sum (the `left` lowest): when that is already worse, no set here comes first. Run times tie
            # within a rounding step (0.002), so only a clearly larger run time lost prunes.
            bound = (
                max(chosen.gpus + low_g[left], need_g),
                max(chosen.max_priority, self.min_prio[j]),
                chosen.priority_sum + low_p[left],
            )
            best = self.best[0]
            if bound > best[1:4] or (bound == best[1:4] and chosen.age + low_a[left] > best[4] + 0.002):
                return
        cls = self.classes[j]
        most = min(left, len(cls.pods))
        for pdb in cls.pdbs:  # more would take a PodDisruptionBudget below zero: no such set is allowed
            most = min(most, self.remaining.get(pdb, 0) - self.counts[pdb])
        least = 0
        if self.forbidden[j]:  # a pod dominating it was left out: the best set never holds it (_dominates)
            most = min(most, 0)
        if self.forced[j]:  # it dominates a pod taken: the best set holds it too
            least = 1
        for take in range(max(most, 0), least - 1, -1):
            if take and self.forces[j]:
                for y in self.forces[j]:
                    self.forced[y] += 1
                self._take(j, cls, take, left, chosen)
                for y in self.forces[j]:
                    self.forced[y] -= 1
            elif not take and self.forbids[j]:
                for y in self.forbids[j]:
                    self.forbidden[y] += 1
                self._branch(j + 1, left, chosen)
                for y in self.forbids[j]:
                    self.forbidden[y] -= 1
            elif take:
                self._take(j, cls, take, left, chosen)
            else:
                self._branch(j + 1, left, chosen)

    def _take(self, j: int, cls: _Class, take: int, left: int, chosen: _Chosen) -> None:
        picked = cls.pods[:take]  # a class's first pods are always the best `take` of it (_Class)
        self.taken.extend(picked)
        for pdb in cls.pdbs:
            self.counts[pdb] += take
        self._branch(j + 1, left - take, chosen.plus(cls, take, picked))
        del self.taken[-take:]
        for pdb in cls.pdbs:
            self.counts[pdb] -= take


def _dominates(a: _Class, b: _Class) -> bool:
    """Single pod a is at least as good a victim as single pod b in every set: the same GPUs, priority and
    budgets, at least b's cpu and memory, and less run time (by a millisecond at least, so the rounded sum
    cannot tie) or the same run time and a first name. Swapping b for a in a set keeps it fitting and makes
    it come strictly earlier in the order, so the best set never holds b without a."""
    pa, pb = a.pods[0], b.pods[0]
    if (a.gpus, a.priority, a.pdbs) != (b.gpus, b.priority, b.pdbs) or a.cpu < b.cpu or a.mem < b.mem:
        return False
    return pa.age <= pb.age - 0.002 or (pa.age == pb.age and str(pa.key) < str(pb.key))


def _misfit(req: Requests, size: int, cpu: tuple[int, int], mem: tuple[int, int]) -> str:
    """Why a victim set with enough GPUs still does not fit: (free, free + freed) CPU and memory."""
    if cpu[1] < req.cpu_m:
        return f"cpu: needs {req.cpu_m}m, {cpu[0]}m free + {cpu[1] - cpu[0]}m from {size} victim(s)"
    if mem[1] < req.memory:
        return f"memory: needs {req.memory} B, {mem[0]} B free + {mem[1] - mem[0]} B from victims"
    return "PodDisruptionBudget disruptionsAllowed would be exceeded by the victim set"
