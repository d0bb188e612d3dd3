"""The reclaim planner: which idle lower-priority pods to evict for which pending GPU pod. Pure: no I/O, no
clock. Stages, one module each: cluster_index.py (what the pass plans over), victims.py (the best victim set
on one node), this module (the plan loop: preemptors in order, nodes compared, decisions committed) and
report.py (a plan as JSON, text, logs, Events and `explain`). Issue 4's rules are in eligibility.py and
fit.py; docs/reclaim.md explains them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from automator.cluster_index import ClusterIndex, NodeState, Preemptor, index_cluster, usage_windows
from automator.conventions import (
    LAST_RECLAIM_ANNOTATION,
    RECLAIM_COUNT_ANNOTATION,
    RECLAIM_NODE_ANNOTATION,
    RECLAIM_VICTIMS_ANNOTATION,
    WORD_BUDGET,
    WORD_COOLDOWN,
    WORD_GAVE_UP,
    WORD_NOMINATED,
)
from automator.eligibility import verdict_for
from automator.fit import scheduling_signature, static_misfit
from automator.gc_pause import gc_paused
from automator.model import (
    ClusterState,
    CutOff,
    Decision,
    Plan,
    PlannerConfig,
    PodKey,
    PodUsage,
    Unresolved,
    Verdict,
    Victim,
)
from automator.ranking import Rankings
from automator.report import explain, plan_to_json
from automator.resources import FieldError, Requests, annotations_of, parse_time
from automator.victims import NodeResult, SetKey, protected_summary, search_node, set_key

# The planner's public functions, wherever they are implemented.
__all__ = ["explain", "plan", "plan_to_json", "usage_windows"]

# (preemptor, victim) verdicts recorded per pass in full; beyond it only the chosen node's candidates and
# the closest node of an unresolved preemptor are recorded, so a large pass stays fast (see docs/reclaim.md).
VERDICT_LIMIT = 20_000


@dataclass
class _Static:
    """Nodes a scheduling signature may use at all, and why the others are ruled out."""

    feasible: list[NodeState]
    ruled_out: Counter[str]
    first_detail: str | None = None  # the first node ruled out and why, quoted in unresolved reasons
    names: set[str] = field(default_factory=set)  # of the feasible nodes


@dataclass
class _Pass:
    index: ClusterIndex
    config: PlannerConfig
    now: datetime
    exclude: frozenset[PodKey]
    budget: int  # evictions still allowed this pass
    plan: Plan = field(default_factory=lambda: Plan([], [], [], {}, []))
    budget_stop: str | None = None  # set once a preemptor's victims would exceed the budget
    pdb_version: int = 0
    static_cache: dict[str, _Static] = field(default_factory=dict)
    # (priority, requests) -> node name -> (node version, PDB version, result): alike preemptors share them
    search_cache: dict[tuple[int, int, int, int], dict[str, tuple[int, tuple[int, ...], NodeResult]]] = field(
        default_factory=dict
    )
    node_pdbs: dict[str, tuple[int, tuple[tuple[str, str], ...]]] = field(default_factory=dict)
    verdict_count: int = 0
    rankings: Rankings = field(init=False)

    def __post_init__(self) -> None:
        self.rankings = Rankings(self.exclude)

    def run(self) -> Plan:
        self.plan.warnings.extend(self.index.warnings)
        self.plan.candidates = self.index.candidates
        self.plan.candidates_usage_unknown = self.index.candidates_usage_unknown
        cooling = {pre.key: self._cooldown(pre) for pre in self.index.preemptors}
        self._reserve(cooling)
        for pre in self.index.preemptors:
            self._place(pre, cooling[pre.key])
        return self.plan

    def _reserve(self, cooling: Mapping[PodKey, str | None]) -> None:
        """Preemptors in cooldown take their requests on their reclaim-node before anyone is served, as a
        preemptor served earlier in the pass does: the GPUs freed for them are offered to no one else."""
        for pre in self.index.preemptors:
            if cooling[pre.key] is None or pre.req is None:
                continue
            node = self.index.nodes.get(str(annotations_of(pre.obj).get(RECLAIM_NODE_ANNOTATION, "")))
            if node is not None:
                node.take(pre.req)
                node.version += 1

    def _cooldown(self, pre: Preemptor) -> str | None:
        """Why the preemptor is in cooldown (reason starting with the word), or None."""
        ann = annotations_of(pre.obj)
        raw = ann.get(LAST_RECLAIM_ANNOTATION)
        if raw is not None:
            try:
                last = parse_time(raw, LAST_RECLAIM_ANNOTATION)
            except FieldError:
                return (
                    f"{WORD_COOLDOWN}: annotation {LAST_RECLAIM_ANNOTATION} {raw!r} is not an RFC 3339 "
                    "time: treated as in cooldown"
                )
            elapsed = (self.now - last).total_seconds()
            if elapsed < self.config.cooldown_seconds:
                remaining = math.ceil(self.config.cooldown_seconds - elapsed)
                return (
                    f"{WORD_COOLDOWN}: victims were evicted for it {elapsed:.0f} s ago ({raw}); "
                    f"{remaining} s of the {self.config.cooldown_seconds} s cooldown remain"
                )
        terminating = [
            key for key in _victim_keys(ann.get(RECLAIM_VICTIMS_ANNOTATION)) if key in self.index.terminating
        ]
        if terminating:
            names = ", ".join(str(k) for k in terminating)
            return (
                f"{WORD_COOLDOWN}: its victims are still terminating ({names}); no second set is evicted "
                "while they are"
            )
        return None

    def _gave_up(self, pre: Preemptor) -> str | None:
        raw = annotations_of(pre.obj).get(RECLAIM_COUNT_ANNOTATION)
        if raw is None:
            return None
        limit = self.config.max_reclaims_per_preemptor
        try:
            count = int(str(raw).strip())
        except ValueError:
            return (
                f"{WORD_GAVE_UP}: annotation {RECLAIM_COUNT_ANNOTATION} {raw!r} is not a count: no more "
                "victims"
            )
        if count >= limit:
            return (
                f"{WORD_GAVE_UP}: victims were evicted for it {count} times (--max-reclaims-per-preemptor "
                f"{limit}) and it is still pending: probably a constraint the planner does not model"
            )
        return None

    def _static(self, pre: Preemptor) -> _Static:
        signature = scheduling_signature(pre.obj)
        cached = self.static_cache.get(signature)
        if cached is None:
            cached = _Static([], Counter())
            for node in self.index.nodes.values():
                misfit = (
                    static_misfit(pre.obj, node.obj) if node.error is None else ("unreadable", node.error)
                )
                if misfit is None:
                    cached.feasible.append(node)
                    cached.names.add(node.name)
                else:
                    cached.ruled_out[misfit[0]] += 1
                    cached.first_detail = cached.first_detail or f"{node.name}: {misfit[1]}"
            self.static_cache[signature] = cached
        return cached

    def _record(self, pre: Preemptor, result: NodeResult, force: bool = False) -> None:
        if not force and self.verdict_count >= VERDICT_LIMIT:
            return
        for pod in result.eligible:
            _, rule, reason = verdict_for(pod.assessment, pre.priority)
            self.plan.verdicts.setdefault(pod.key, []).append(Verdict(pre.key, True, rule, reason))
        for key, (rule, reason) in result.protected.items():
            self.plan.verdicts.setdefault(key, []).append(Verdict(pre.key, False, rule, reason))
        self.verdict_count += len(result.eligible) + len(result.protected)

    def _unresolved(self, pre: Preemptor, reason: str) -> None:
        self.plan.unresolved.append(Unresolved(pre.key, reason))

    def _pdb_state(self, node: NodeState) -> tuple[int, ...]:
        """What is left of the budgets of the PodDisruptionBudgets covering the node's candidates."""
        ids = self.node_pdbs.get(node.name)
        if ids is None or ids[0] != node.version:
            ids = self.node_pdbs[node.name] = (
                node.version,
                tuple(sorted({p for c in node.candidates for p in c.pdbs})),
            )
        return tuple(self.index.pdbs.remaining.get(p, 0) for p in ids[1])

    def _search(self, node: NodeState, req: Requests, priority: int) -> NodeResult:
        """search_node, cached until a decision changes the node or a PodDisruptionBudget covering it."""
        cache = self.search_cache.setdefault((priority, req.gpus, req.cpu_m, req.memory), {})
        entry = cache.get(node.name)
        pdb_state = self._pdb_state(node)
        if entry is None or entry[0] != node.version or entry[1] != pdb_state:
            result = search_node(node, req, priority, self.index.pdbs, self.exclude)
            entry = cache[node.name] = (node.version, pdb_state, result)
        return entry[2]

    def _place(self, pre: Preemptor, cooldown: str | None) -> None:
        nominated = (pre.obj.get("status") or {}).get("nominatedNodeName")
        if nominated:
            self._unresolved(
                pre,
                f"{WORD_NOMINATED}: the scheduler nominated node {nominated} (its own preemption is under "
                "way): left to the scheduler",
            )
            return
        if cooldown is not None:
            self.plan.skipped_cooldown.append(pre.key)
            self._unresolved(pre, cooldown)
            return
        gave_up = self._gave_up(pre)
        if gave_up is not None:
            self.plan.gave_up.append(pre.key)
            self._unresolved(pre, gave_up)
            return
        if pre.error is not None or pre.req is None:
            self._unresolved(pre, pre.error or "malformed pod")
            return
        req = pre.req
        static = self._static(pre)
        if self.budget_stop is not None:
            self._fit_or_budget(pre, req, static)
            return
        if self.verdict_count >= VERDICT_LIMIT and self._place_ranked(pre, req, static):
            return
        too_small: list[NodeState] = []
        results: list[tuple[NodeState, NodeResult]] = []
        best: tuple[SetKey, NodeState, NodeResult] | None = None
        for node in static.feasible:  # in name order: the first of equal sets wins
            if node.alloc.gpus < req.gpus:
                too_small.append(node)
                continue
            result = self._search(node, req, pre.priority)
            results.append((node, result))
            if result.cut_off:
                self.plan.search_cut_off.append(CutOff(pre.key, node.name, result.misfit or ""))
            # Across nodes the set order alone decides (not the victims' names): equal sets go to the
            # node whose name sorts first, which is the first one met.
            if result.key is not None and (best is None or result.key[:-1] < best[0][:-1]):
                best = (result.key, node, result)
        if best is None:
            self._explain_unresolved(pre, req, results, static, too_small)
            return
        best_key, best_node, best_result = best
        if best_key[0] > self.budget:
            self.budget_stop = (
                f"{WORD_BUDGET}: {self.config.max_evictions_per_pass} evictions per pass at most "
                f"(--max-evictions-per-pass; the hourly budget may lower it), {self.budget} left"
            )
            self._unresolved(pre, f"{self.budget_stop}; this preemptor needs {best_key[0]}")
            return
        self.budget -= best_key[0]
        # Verdicts where the preemptor already fits say nothing about who is evicted: not recorded.
        if self.verdict_count < VERDICT_LIMIT:
            for _, result in results:
                if result.key is None or result.key[0] > 0:
                    self._record(pre, result)
        elif best_key[0] > 0:
            self._record(pre, best_result, force=True)
        self._commit(pre, req, best_node, best_result)

    def _place_ranked(self, pre: Preemptor, req: Requests, static: _Static) -> bool:
        """Issue 14: the same choice as searching every feasible node, searching nodes in the order of
        their ranking (automator/ranking.py) until no node left can beat the best set found. Used once full
        verdicts are no longer recorded; False (nothing decided) sends the preemptor to the full search,
        which explains why it stays unresolved."""
        best: tuple[SetKey, str, NodeState, NodeResult] | None = None
        cut_off: list[CutOff] = []
        for bound, name, version in self.rankings.ranking(self.index.nodes, pre.priority, req):
            if best is not None and (bound, name) > (best[0][:-1], best[1]):
                break  # no node left can beat the best set found (equal sets go to the first name)
            node = self.index.nodes[name]
            if version != node.version or name not in static.names:
                continue
            result = self._search(node, req, pre.priority)
            if result.cut_off:
                cut_off.append(CutOff(pre.key, name, result.misfit or ""))
            if result.key is not None and (best is None or (result.key[:-1], name) < (best[0][:-1], best[1])):
                best = (result.key, name, node, result)
        if best is None:
            return False
        self.plan.search_cut_off.extend(cut_off)
        if best[0][0] > 0:
            self._record(pre, best[3], force=True)
        self._commit(pre, req, best[2], best[3])
        return True

    def _fit_or_budget(self, pre: Preemptor, req: Requests, static: _Static) -> None:
        """Once the budget stopped the pass: the first node (name order) the preemptor fits as it is, or
        unresolved eviction-budget. The same answer as the full search, without searching victims."""
        for node in static.feasible:
            free_g, free_c, free_m = node.free()
            if free_g >= req.gpus and free_c >= req.cpu_m and free_m >= req.memory:
                self._commit(pre, req, node, NodeResult(set_key(()), (), free_g, 0, [], {}, 0, None))
                return
        assert self.budget_stop is not None
        self._unresolved(pre, self.budget_stop)

    def _commit(self, pre: Preemptor, req: Requests, node: NodeState, result: NodeResult) -> None:
        free_before = node.free()[0]
        victims = result.victims
        freed = sum(v.req.gpus for v in victims)
        for victim in victims:
            node.candidates.remove(victim)
            node.take(victim.req, -1)
            for pdb in victim.pdbs:
                self.index.pdbs.remaining[pdb] = self.index.pdbs.remaining.get(pdb, 0) - 1
                self.pdb_version += 1
        if victims:
            # The preemptor takes its requests; GPUs freed beyond them stay reserved for it this pass
            # (issue 4: freed GPUs are not offered to the next preemptor).
            node.take(req)
            node.used_gpus += max(0, min(freed, free_before + freed - req.gpus))
            node.version += 1
            self.rankings.changed(node)
        # Issue 15, decision 1: a preemptor that already fits reserves nothing; later preemptors may count
        # the same free GPUs (the next pass sees what the scheduler did).
        target = self.plan.decisions if victims else self.plan.already_fit
        target.append(
            Decision(
                preemptor=pre.key,
                preemptor_priority=pre.priority,
                gpus_requested=req.gpus,
                node=node.name,
                victims=tuple(
                    Victim(
                        v.key,
                        v.req.gpus,
                        v.priority,
                        v.usage.gpu_activity if v.usage else None,
                        v.usage.cpu_cores if v.usage else None,
                        v.scheduled,
                    )
                    for v in sorted(victims, key=lambda v: v.key)
                ),
                gpus_freed=freed,
                free_gpus_before=free_before,
            )
        )

    def _explain_unresolved(
        self,
        pre: Preemptor,
        req: Requests,
        results: list[tuple[NodeState, NodeResult]],
        static: _Static,
        too_small: list[NodeState],
    ) -> None:
        excluded = _ruled_out(req, static, too_small)
        if not results:
            if not self.index.nodes:
                self._unresolved(pre, "no nodes in the cluster")
            else:
                self._unresolved(pre, f"no node can run it: {excluded}")
            return
        for _, result in results:
            self._record(pre, result, force=True)
        node, result = max(
            results, key=lambda nr: (nr[1].free_gpus + nr[1].reclaimable, [-ord(c) for c in nr[0].name])
        )
        closest = (
            f"closest: {node.name} needs {req.gpus} GPUs, {max(result.free_gpus, 0)} free + "
            f"{result.reclaimable} reclaimable ({protected_summary(result)})"
        )
        if result.misfit and result.free_gpus + result.reclaimable >= req.gpus:
            closest += f"; enough GPUs but {result.misfit}"
        reason = f"no node fits even after evicting all eligible idle pods; {closest}"
        cut = [node.name for node, result in results if result.cut_off]
        if cut:
            reason += f"; victim search cut off (node skipped): {', '.join(cut)}"
        if excluded:
            reason += f"; {excluded}"
        self._unresolved(pre, reason)


def _ruled_out(req: Requests, static: _Static, too_small: list[NodeState]) -> str:
    """The nodes a preemptor cannot use whatever is evicted, counted by reason (empty when none)."""
    ruled_out = Counter(static.ruled_out)
    first_detail = static.first_detail
    if too_small:
        ruled_out["too few GPUs in total"] += len(too_small)
        small = too_small[0]
        first_detail = first_detail or f"{small.name}: allocatable {small.alloc.gpus} GPUs < {req.gpus}"
    if not ruled_out:
        return ""
    parts = ", ".join(f"{n} {why}" for why, n in sorted(ruled_out.items()))
    first = f" ({first_detail})" if first_detail else ""
    return f"{sum(ruled_out.values())} node(s) ruled out: {parts}{first}"


def _victim_keys(raw: object) -> list[PodKey]:
    """The reclaim-victims annotation: comma-separated namespace/name; unreadable items are skipped."""
    keys: list[PodKey] = []
    for part in str(raw or "").split(","):
        try:
            keys.append(PodKey.parse(part.strip()))
        except ValueError:
            continue
    return keys


def plan(
    cluster: ClusterState,
    usage: Mapping[PodKey, PodUsage],
    config: PlannerConfig,
    now: datetime,
    exclude: frozenset[PodKey] = frozenset(),
    budget: int | None = None,
) -> Plan:
    """Plan one pass. exclude: pods never to be chosen as victims (e.g. their eviction was refused);
    budget: evictions still allowed (default --max-evictions-per-pass; the service passes less when the
    hourly budget or earlier evictions of the pass leave less)."""
    left = config.max_evictions_per_pass if budget is None else min(budget, config.max_evictions_per_pass)
    with gc_paused():
        return _Pass(index_cluster(cluster, usage, config, now), config, now, exclude, max(0, left)).run()
