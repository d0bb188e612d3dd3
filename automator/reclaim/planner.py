"""The reclaim planner: which idle lower-priority pods to evict for which pending GPU pod. Pure: no I/O, no
clock. Stages, one module each: cluster_index.py (what the pass plans over), victims.py (the best victim set
on one node), this module (the plan loop: preemptors in order, nodes compared, decisions committed) and
report.py (a plan as JSON, text, logs, Events and `explain`). The eligibility rules are in eligibility.py
and fit.py; docs/reclaim.md explains them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.resources import Requests
from automator.reclaim import notices
from automator.reclaim import plan_reasons as reasons
from automator.reclaim.annotations import ReclaimMarks, read_marks
from automator.reclaim.cluster_index import (
    Candidate,
    ClusterIndex,
    NodeState,
    Preemptor,
    index_cluster,
    usage_windows,
)
from automator.reclaim.eligibility import verdict_reason, verdict_rule
from automator.reclaim.fit import scheduling_signature
from automator.reclaim.gangs import Gang
from automator.reclaim.model import (
    EVICT,
    NOTICE,
    CutOff,
    Decision,
    Plan,
    PlannerConfig,
    PodUsage,
    Unresolved,
    Verdict,
    Victim,
)
from automator.reclaim.plan_reasons import StaticFit, static_fit
from automator.reclaim.ranking import Rankings, tie_key
from automator.reclaim.report import explain, plan_to_json
from automator.reclaim.splits import NO_SPLIT, Split, Splits
from automator.reclaim.victims import NO_VICTIMS, NodeResult, SetKey, search_node
from steward_common.conventions import (
    WORD_BUDGET,
    WORD_GANG_DOES_NOT_FIT,
    WORD_NOTICE_BUDGET,
    UnresolvedReason,
)
from steward_common.gc_pause import gc_paused

# The planner's public functions, wherever they are implemented.
__all__ = ["explain", "plan", "plan_to_json", "usage_windows"]

# (preemptor, victim) verdicts recorded per pass in full; beyond it only the chosen node's candidates and
# the closest node of an unresolved preemptor are recorded, and preemptors search nodes in the order of
# their rankings, so a large pass stays fast (see docs/reclaim.md).
VERDICT_LIMIT = 20_000


@dataclass
class _PendingGang:
    """A preemptor gang's pending members (name order) and the priority it is served at (its lowest)."""

    gang: Gang
    members: list[Preemptor]
    priority: int


@dataclass
class _Trial:
    """A preemptor gang being placed: what its members changed, undone when the gang is not placed."""

    decisions: int  # the plan's lists as long as before the gang
    already_fit: int
    unresolved: int
    budget: int  # evictions allowed before the gang
    nodes: dict[str, tuple[int, int, int, list[Candidate]]] = field(default_factory=dict)  # as before
    pdbs: dict[tuple[str, str], int] = field(default_factory=dict)  # what each budget allowed before
    freed: dict[str, int] = field(default_factory=dict)  # GPUs its victims freed, per node

    def touch(self, node: NodeState) -> None:
        if node.name not in self.nodes:
            self.nodes[node.name] = (node.used_gpus, node.used_cpu, node.used_mem, list(node.candidates))


def _does_not_fit(gang: _PendingGang, running: int, placed: int, failed: list[Unresolved]) -> str:
    needed = gang.gang.needed or 0
    first = f"; {failed[0].preemptor}: {failed[0].reason}" if failed else ""
    return (
        f"{WORD_GANG_DOES_NOT_FIT}: gang {gang.gang.name}: {placed} of {needed - running} pending member(s) "
        f"could be placed ({needed} needed, {running} running){first}"
    )


# node name -> (node version, PodDisruptionBudget changes made before the search, search result)
_Cache = dict[str, tuple[int, int, NodeResult]]


@dataclass
class _Pass:
    index: ClusterIndex
    config: PlannerConfig
    now: datetime
    exclude: frozenset[ObjectKey]
    budget: int  # evictions still allowed this pass
    plan: Plan = field(default_factory=lambda: Plan([], [], [], {}, []))
    budget_stop: str | None = None  # set once a preemptor's victims would exceed the budget
    pdb_version: int = 0  # PodDisruptionBudget changes made in the pass
    # PDB -> pdb_version of its last change
    pdb_changed: dict[tuple[str, str], int] = field(default_factory=dict)
    static_cache: dict[str, StaticFit] = field(default_factory=dict)
    # (priority, requests) -> node name -> (node version, pdb_version, result): alike preemptors share them
    search_cache: dict[tuple[int, int, int, int], _Cache] = field(default_factory=dict)
    node_pdbs: dict[str, tuple[int, set[tuple[str, str]]]] = field(default_factory=dict)
    verdict_count: int = 0
    trial: _Trial | None = None  # set while a preemptor gang is placed
    marks: dict[ObjectKey, ReclaimMarks] = field(default_factory=dict)  # each preemptor's, read once
    notice_left: int = 0  # pods that may still be put under notice this pass (--max-notices)
    splits: Splits = field(init=False)
    rankings: Rankings = field(init=False)

    def __post_init__(self) -> None:
        self.splits = Splits(self.exclude)
        self.rankings = Rankings(self.splits)

    def run(self) -> Plan:
        self.plan.warnings.extend(self.index.warnings)
        self.plan.gang_warnings.extend(self.index.gang_warnings)
        self.plan.candidates = self.index.candidates
        self.plan.candidates_usage_unknown = self.index.candidates_usage_unknown
        self.plan.under_notice = notices.under_notice(self.index.noticed)
        self.plan.notice_shown = self.config.notice_seconds > 0 or bool(self.index.noticed)
        self.plan.pod_warnings.extend(self.index.pod_warnings)
        self.notice_left = self.config.notice_limit - len(self.plan.under_notice)
        self.marks = {pre.key: read_marks(pre.pod.annotations) for pre in self.index.preemptors}
        cooling = {
            key: reasons.cooldown(marks, self.now, self.config, self.index.terminating)
            for key, marks in self.marks.items()
        }
        self._reserve(cooling)
        for item in self._order():
            if isinstance(item, Preemptor):
                self._place(item, cooling[item.key])
            else:
                self._place_gang(item, cooling)
        return self.plan

    def _order(self) -> list[Preemptor | _PendingGang]:
        """The preemptors in the order they are served: a gang's pending members together, at the place its
        lowest priority (then its oldest member) gives it; members of a gang that needs no more members placed
        are single pods."""
        gangs: dict[Gang, list[Preemptor]] = {}
        singles: list[Preemptor] = []
        for pre in self.index.preemptors:
            gang = pre.gang
            running = self.index.gang_running.get(gang, 0) if gang is not None else 0
            if gang is None or (gang.needed is not None and gang.needed <= running):
                singles.append(pre)
            else:
                gangs.setdefault(gang, []).append(pre)
        if not gangs:
            return list(singles)
        items: list[tuple[tuple[int, datetime, ObjectKey], Preemptor | _PendingGang]] = [
            ((-pre.priority, pre.created, pre.key), pre) for pre in singles
        ]
        for gang, members in gangs.items():
            members.sort(key=lambda m: m.key)
            low = min(m.priority for m in members)
            pending = _PendingGang(gang, members, low)
            items.append(((-low, min(m.created for m in members), members[0].key), pending))
        items.sort(key=lambda item: item[0])
        return [item for _, item in items]

    def _reserve(self, cooling: Mapping[ObjectKey, str | None]) -> None:
        """Preemptors in cooldown take their requests on their reclaim-node before anyone is served, as a
        preemptor served earlier in the pass does: the GPUs freed for them are offered to no one else."""
        for pre in self.index.preemptors:
            if cooling[pre.key] is None or pre.req is None:
                continue
            node = self.index.nodes.get(self.marks[pre.key].node)
            if node is not None:
                node.take(pre.req)
                node.version += 1

    def _static(self, pre: Preemptor) -> StaticFit:
        signature = scheduling_signature(pre.pod)
        cached = self.static_cache.get(signature)
        if cached is None:
            cached = self.static_cache[signature] = static_fit(self.index.nodes.values(), pre.pod)
        return cached

    def _record(self, pre: Preemptor, result: NodeResult, force: bool = False) -> None:
        if not force and self.verdict_count >= VERDICT_LIMIT:
            return
        verdicts, preemptor, split = self.plan.verdicts, pre.key, result.split
        priority = split.priority
        for pod in split.eligible:
            assessment = pod.assessment
            rule = verdict_rule(assessment, priority)[1]
            verdict = Verdict(preemptor, True, rule, partial(verdict_reason, assessment, priority))
            verdicts.setdefault(pod.key, []).append(verdict)
        protected = split.protected
        for key, (rule, why) in protected.items():
            verdicts.setdefault(key, []).append(Verdict(preemptor, False, rule, why))
        self.verdict_count += len(split.eligible) + len(protected)

    def _unresolved(self, pre: Preemptor, reason: str, kind: UnresolvedReason) -> None:
        self.plan.unresolved.append(Unresolved(pre.key, reason, kind, pre.gang.name if pre.gang else None))

    def _pdbs_changed(self, node: NodeState, since: int) -> bool:
        """Whether a PodDisruptionBudget covering the node's candidates changed after change `since` (what
        is left of a budget only goes down in a pass: changed is different)."""
        ids = self.node_pdbs.get(node.name)
        if ids is None or ids[0] != node.version:
            ids = self.node_pdbs[node.name] = (node.version, {p for c in node.candidates for p in c.pdbs})
        changed = self.pdb_changed
        return any(changed.get(p, 0) > since for p in ids[1])

    def _shape_cache(self, priority: int, req: Requests) -> _Cache:
        return self.search_cache.setdefault((priority, req.gpus, req.cpu_m, req.memory), {})

    def _search(self, cache: _Cache, node: NodeState, req: Requests, priority: int) -> NodeResult:
        """search_node, cached (per shape: _shape_cache) until a decision changes the node or a
        PodDisruptionBudget covering it."""
        entry = cache.get(node.name)
        if (
            entry is None
            or entry[0] != node.version
            or (entry[1] != self.pdb_version and self._pdbs_changed(node, entry[1]))
        ):
            result = search_node(node, req, self.splits.of(node, priority), self.index.pdbs)
            entry = cache[node.name] = (node.version, self.pdb_version, result)
        return entry[2]

    def _place(self, pre: Preemptor, cooldown: str | None) -> None:
        if self._standing(pre, cooldown):
            self._search_for(pre)

    def _search_for(self, pre: Preemptor) -> None:
        """The node and victims of a preemptor that stands (decided, already fitting or unresolved)."""
        req = pre.req
        assert req is not None
        static = self._static(pre)
        if self.budget_stop is not None:
            self._fit_or_budget(pre, req, static)
        elif self.index.noticed_nodes and self._noticed_first(pre, req, static):
            return
        elif self.verdict_count >= VERDICT_LIMIT:
            self._place_ranked(pre, req, static)
        else:
            self._place_full(pre, req, static)

    def _noticed_first(self, pre: Preemptor, req: Requests, static: StaticFit) -> bool:
        """The stable choice: a set made only of pods under notice for this preemptor (or its gang) comes
        before every other set, when one still fits (then decided here: True). A preemptor that fits
        somewhere as the node is, or whose noticed pods no longer make a set, has today's order."""
        target = _target(pre)
        names = self.index.noticed_nodes.get(target)
        if not names or any(node.shortfall(req) is None for node in static.feasible):
            return False
        best: tuple[SetKey, NodeState, NodeResult] | None = None
        for node in static.feasible:  # in name order: the first of equal sets wins, as in _place_full
            if node.name not in names or node.alloc.gpus < req.gpus:
                continue
            noticed = [c for c in node.candidates if _noticed_for(c, target)]
            result = search_node(node, req, Split(noticed, pre.priority, self.exclude), self.index.pdbs)
            if (
                result.key is not None
                and result.key[0] > 0
                and (best is None or result.key[:-1] < best[0][:-1])
            ):
                best = (result.key, node, result)
        if best is None:
            return False
        self._decide(pre, req, best[1], best[2], None)
        return True

    def _notice_of(self, noticed: Sequence[datetime | None]) -> tuple[str, datetime | None, int]:
        """(action, deadline, pods newly put under notice) of victims with these notices for the
        preemptor: evicted once every one was noticed and its deadline passed (or without notice at all:
        --notice-seconds 0); else noticed, until the last deadline (now + notice for a pod noticed now)."""
        seen = [n for n in noticed if n is not None]
        if len(seen) == len(noticed) and all(n <= self.now for n in seen):
            return EVICT, max(seen, default=None), 0
        if self.config.notice_seconds == 0:
            return EVICT, None, 0
        new = self.now + timedelta(seconds=self.config.notice_seconds)
        return NOTICE, max(n or new for n in noticed), len(noticed) - len(seen)

    def _notice_budget_text(self, new: int) -> str:
        return (
            f"{WORD_NOTICE_BUDGET}: {self.config.notice_limit} pods under notice at most (--max-notices), "
            f"{max(self.notice_left, 0)} left; this preemptor needs {new} more"
        )

    def _held(self, pre: Preemptor, cooldown: str | None) -> tuple[str, UnresolvedReason] | None:
        """Why the preemptor is not searched for even though it could be read: nominated, in cooldown or
        given up (None when it is searched for)."""
        reason = reasons.nominated(pre.pod)
        if reason is not None:
            return reason, UnresolvedReason.NOMINATED
        if cooldown is not None:
            return cooldown, UnresolvedReason.COOLDOWN
        reason = reasons.gave_up(self.marks[pre.key], self.config)
        return None if reason is None else (reason, UnresolvedReason.GAVE_UP)

    def _standing(self, pre: Preemptor, cooldown: str | None) -> bool:
        """Whether the preemptor is searched for at all; if not, it is unresolved with the reason."""
        held = self._held(pre, cooldown)
        if held is not None:
            self._hold(pre, *held)
        elif pre.error is not None or pre.req is None:
            self._unresolved(pre, pre.error or "malformed pod", UnresolvedReason.MALFORMED_POD)
        return held is None and pre.error is None and pre.req is not None

    def _hold(self, pre: Preemptor, reason: str, kind: UnresolvedReason) -> None:
        if kind is UnresolvedReason.COOLDOWN:
            self.plan.skipped_cooldown.append(pre.key)
        elif kind is UnresolvedReason.GAVE_UP:
            self.plan.gave_up.append(pre.key)
        self._unresolved(pre, reason, kind)

    def _place_full(self, pre: Preemptor, req: Requests, static: StaticFit) -> None:
        """Search every feasible node (recording every verdict while under VERDICT_LIMIT)."""
        too_small: list[NodeState] = []
        results: list[tuple[NodeState, NodeResult]] = []
        best: tuple[SetKey, NodeState, NodeResult] | None = None
        cache = self._shape_cache(pre.priority, req)
        for node in static.feasible:  # in name order: the first of equal sets wins
            if node.alloc.gpus < req.gpus:  # fewer GPUs in all than requested: no set ever fits
                too_small.append(node)
                continue
            result = self._search(cache, node, req, pre.priority)
            results.append((node, result))
            if result.cut_off:
                self.plan.search_cut_off.append(CutOff(pre.key, node.name, result.misfit or ""))
            # Across nodes the set order alone decides (not the victims' names): equal sets go to the
            # node whose name sorts first, which is the first one met.
            if result.key is not None and (best is None or result.key[:-1] < best[0][:-1]):
                best = (result.key, node, result)
        if best is None:
            self._explain_full(pre, req, results, static, too_small)
        else:
            self._decide(pre, req, best[1], best[2], results)

    def _place_ranked(self, pre: Preemptor, req: Requests, static: StaticFit) -> None:
        """Issue 14: the same choice as searching every feasible node, searching nodes in the order of
        their ranking (reclaim/ranking.py) until no node left can beat the best set found. Used once full
        verdicts are no longer recorded."""
        best: tuple[SetKey, str, NodeState, NodeResult] | None = None
        cut_off: list[CutOff] = []
        cache = self._shape_cache(pre.priority, req)
        nodes, names = self.index.nodes, static.names
        for bound, name, version in self.rankings.ranking(nodes, pre.priority, req):
            # Entries come in bound order and a node's sets are never before its bound: once a bound is
            # past the best set found, no node left can beat it (equal sets go to the first name).
            if best is not None and (bound, name) > (best[0][:-1], best[1]):
                break
            node = nodes[name]
            # a stale entry (the node's current one is in the list too: Rankings.changed), or a node the
            # preemptor can never use
            if version != node.version or name not in names:
                continue
            result = self._search(cache, node, req, pre.priority)
            if result.cut_off:
                cut_off.append(CutOff(pre.key, name, result.misfit or ""))
            if result.key is not None and (best is None or (result.key[:-1], name) < (best[0][:-1], best[1])):
                best = (result.key, name, node, result)
        if best is None:
            # Every node that could fit was searched: the cut-off ones, in name order as the full search
            # reports them.
            cut_off.sort(key=lambda c: c.node)
            self.plan.search_cut_off.extend(cut_off)
            self._explain_ranked(pre, req, static, [c.node for c in cut_off])
            return
        self.plan.search_cut_off.extend(cut_off)
        self._decide(pre, req, best[2], best[3], None)

    def _decide(
        self,
        pre: Preemptor,
        req: Requests,
        node: NodeState,
        result: NodeResult,
        results: list[tuple[NodeState, NodeResult]] | None,
    ) -> None:
        """The best set found: within the pass's eviction budget it is committed, else the budget stops the
        pass. results: every node searched, whose verdicts are recorded (None: only the chosen node's)."""
        assert result.key is not None
        count = result.key[0]
        action: tuple[str, datetime | None, int] = (EVICT, None, 0)
        if self.trial is None and count > 0:  # a gang's members are given notice together (_place_gang)
            target = _target(pre)
            action = self._notice_of([v.notice.deadline_for(target) for v in result.victims])
        if action[0] == NOTICE:
            if action[2] > self.notice_left:
                self._unresolved(pre, self._notice_budget_text(action[2]), UnresolvedReason.NOTICE_BUDGET)
                return
            self.notice_left -= action[2]
        elif count > self.budget:
            self.budget_stop = self._budget_text()
            self._unresolved(
                pre, f"{self.budget_stop}; this preemptor needs {count}", UnresolvedReason.EVICTION_BUDGET
            )
            return
        else:
            self.budget -= count
        # Verdicts where the preemptor already fits say nothing about who is evicted: not recorded.
        if results is not None and self.verdict_count < VERDICT_LIMIT:
            for _, searched in results:
                if searched.key is None or searched.key[0] > 0:
                    self._record(pre, searched)
        elif count > 0:
            self._record(pre, result, force=True)
        self._commit(pre, req, node, result, action[:2])

    def _fit_or_budget(self, pre: Preemptor, req: Requests, static: StaticFit) -> None:
        """Once the budget stopped the pass: the first node (name order) the preemptor fits as it is, or
        unresolved eviction-budget. The same answer as the full search, without searching victims. Nodes
        no longer change (nothing more is evicted), so the answer is kept per request."""
        amounts = (req.gpus, req.cpu_m, req.memory)
        if self.trial is not None:  # a gang's members take their requests: nodes change after all
            static.fits.pop(amounts, None)
        if amounts not in static.fits:
            static.fits[amounts] = next((n for n in static.feasible if n.shortfall(req) is None), None)
        node = static.fits[amounts]
        if node is None:
            assert self.budget_stop is not None
            self._unresolved(pre, self.budget_stop, UnresolvedReason.EVICTION_BUDGET)
        else:
            result = NodeResult(NO_VICTIMS, (), node.free()[0], NO_SPLIT, None)
            self._commit(pre, req, node, result)

    def _commit(
        self,
        pre: Preemptor,
        req: Requests,
        node: NodeState,
        result: NodeResult,
        action: tuple[str, datetime | None] = (EVICT, None),
    ) -> None:
        free_before = node.free()[0]
        target = _target(pre)
        victims = result.victims
        trial = self.trial
        freed = 0
        elsewhere: dict[str, int] = {}  # GPUs a victim gang frees on other nodes than the one searched
        remaining = self.index.pdbs.remaining
        for victim in victims:
            home = node if victim.node == node.name else self.index.nodes[victim.node]
            if trial is not None:
                trial.touch(home)
            home.candidates.remove(victim)
            home.take(victim.req, -1)
            if home is node:
                freed += victim.req.gpus
            else:
                elsewhere[home.name] = elsewhere.get(home.name, 0) + victim.req.gpus
            for pdb in victim.pdbs:
                if trial is not None:
                    trial.pdbs.setdefault(pdb, remaining.get(pdb, 0))
                remaining[pdb] = remaining.get(pdb, 0) - 1
                self.pdb_version += 1
                self.pdb_changed[pdb] = self.pdb_version
        for name, gpus in elsewhere.items():
            self._freed_elsewhere(self.index.nodes[name], gpus)
        if trial is not None:
            # A gang member takes its requests even where it fits as the node is (the next member must not
            # count the same GPUs); what its victims free stays the gang's until the gang is decided.
            trial.touch(node)
            node.take(req)
            trial.freed[node.name] = trial.freed.get(node.name, 0) + freed
            node.version += 1
            self.rankings.changed(node)
        elif victims:
            # The preemptor takes its requests; GPUs freed beyond them stay reserved for it this pass
            # (freed GPUs are not offered to the next preemptor).
            node.take(req)
            node.used_gpus += max(0, min(freed, free_before + freed - req.gpus))
            node.version += 1
            self.rankings.changed(node)
        # A preemptor that already fits reserves nothing; later preemptors may count
        # the same free GPUs (the next pass sees what the scheduler did).
        listed = self.plan.decisions if victims else self.plan.already_fit
        listed.append(
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
                        v.node,
                        v.unit.gang.name if v.unit is not None else None,
                        v.notice.deadline_for(target),
                    )
                    for v in sorted(victims, key=lambda v: v.key)
                ),
                gpus_freed=freed + sum(elsewhere.values()),
                free_gpus_before=free_before,
                gang=pre.gang.name if pre.gang is not None else None,
                action=action[0],
                notice_deadline=action[1],
            )
        )

    def _freed_elsewhere(self, node: NodeState, gpus: int) -> None:
        """GPUs a victim gang freed on a node other than the one searched: reserved for the preemptor for the
        rest of the pass, or, while a preemptor gang is placed, free for its next members."""
        if self.trial is None:
            node.used_gpus += gpus
        else:
            self.trial.freed[node.name] = self.trial.freed.get(node.name, 0) + gpus
            spare = self.rankings.with_free_gpus
            if spare is not None and node not in spare:
                spare.append(node)  # it may now fit a member as it is
        node.version += 1
        self.rankings.changed(node)

    def _place_gang(self, gang: _PendingGang, cooling: Mapping[ObjectKey, str | None]) -> None:
        """A preemptor gang, placed whole or not at all (docs/reclaim.md, "Gangs")."""
        members = gang.members
        self.plan.gang_needs[gang.gang.name] = (gang.gang.needed, self.index.gang_running.get(gang.gang, 0))
        if gang.gang.needed is None:
            for member in members:
                self._unresolved(member, str(gang.gang.problem), UnresolvedReason.GANG_MALFORMED)
            return
        held = next(((m, h) for m in members if (h := self._held(m, cooling[m.key])) is not None), None)
        if held is not None:
            first, (reason, kind) = held
            for member in members:
                if kind is not UnresolvedReason.GAVE_UP or member is first:
                    self._hold(member, reason, kind)
                else:
                    self._unresolved(member, reason, kind)
            return
        running = self.index.gang_running.get(gang.gang, 0)
        trial = self.trial = _Trial(
            len(self.plan.decisions), len(self.plan.already_fit), len(self.plan.unresolved), self.budget
        )
        if self.budget_stop is None:
            self.budget = 2**62  # the gang's victims are counted together when it is decided
        placed, failed = self._try_members(gang, gang.gang.needed - running)
        self.trial = None
        decided = self.plan.decisions[trial.decisions :]
        evicting = sum(len(d.victims) for d in decided)
        enough = len(placed) >= gang.gang.needed - running
        action, deadline, new = self._notice_of([v.noticed for d in decided for v in d.victims])
        noticed = action == NOTICE and new <= self.notice_left
        if enough and (noticed or (action == EVICT and evicting <= trial.budget)):
            # The gang's victims are noticed or evicted together, all members' at the same time.
            self.plan.decisions[trial.decisions :] = [
                replace(d, action=action, notice_deadline=deadline) for d in decided
            ]
            if noticed:
                self.notice_left -= new
                self.budget = trial.budget
            else:
                self.budget = trial.budget - evicting
            self._keep(trial)
            del self.plan.unresolved[trial.unresolved :]
            for member in members:  # the members the gang did not need, as single pods
                if member not in placed:
                    self._place(member, cooling[member.key])
            return
        self._undo(trial)
        self.budget = trial.budget
        if enough and action == NOTICE:
            why, kind = self._notice_budget_text(new), UnresolvedReason.NOTICE_BUDGET
        elif self.budget_stop is None and enough:
            self.budget_stop = self._budget_text()
            why, kind = f"{self.budget_stop}; this gang needs {evicting}", UnresolvedReason.EVICTION_BUDGET
        elif self.budget_stop is not None:
            why, kind = self.budget_stop, UnresolvedReason.EVICTION_BUDGET
        else:
            why, kind = _does_not_fit(gang, running, len(placed), failed), UnresolvedReason.GANG_DOES_NOT_FIT
        for member in members:
            self._unresolved(member, why, kind)

    def _try_members(self, gang: _PendingGang, needed: int) -> tuple[list[Preemptor], list[Unresolved]]:
        """Members in name order, each placed as a single preemptor of the gang's priority would be, on the
        state the members before it left, until `needed` are placed or too few are left to place them."""
        placed: list[Preemptor] = []
        failed: list[Unresolved] = []
        for i, member in enumerate(gang.members):
            if len(placed) >= needed or len(placed) + len(gang.members) - i < needed:
                break
            before = len(self.plan.unresolved)
            if member.error is not None or member.req is None:
                self._unresolved(member, member.error or "malformed pod", UnresolvedReason.MALFORMED_POD)
            else:
                self._search_for(replace(member, priority=gang.priority))
            if len(self.plan.unresolved) > before:
                failed.append(self.plan.unresolved[-1])
            else:
                placed.append(member)
        return placed, failed

    def _keep(self, trial: _Trial) -> None:
        """A gang placed: the GPUs its victims freed and its members did not take stay reserved for it."""
        for name, gpus in trial.freed.items():
            node = self.index.nodes[name]
            keep = min(gpus, node.free()[0])
            if keep > 0:
                node.used_gpus += keep
                node.version += 1
                self.rankings.changed(node)

    def _undo(self, trial: _Trial) -> None:
        """A gang not placed: every node, budget and list as before it was tried."""
        for name, (gpus, cpu, mem, candidates) in trial.nodes.items():
            node = self.index.nodes[name]
            node.used_gpus, node.used_cpu, node.used_mem = gpus, cpu, mem
            node.candidates[:] = candidates
            node.version += 1
            self.rankings.changed(node)
        remaining = self.index.pdbs.remaining
        for pdb, left in trial.pdbs.items():
            remaining[pdb] = left
            self.pdb_version += 1
            self.pdb_changed[pdb] = self.pdb_version
        del self.plan.decisions[trial.decisions :]
        del self.plan.already_fit[trial.already_fit :]
        del self.plan.unresolved[trial.unresolved :]

    def _budget_text(self) -> str:
        return (
            f"{WORD_BUDGET}: {self.config.max_evictions_per_pass} evictions per pass at most "
            f"(--max-evictions-per-pass; the hourly budget may lower it), {self.budget} left"
        )

    def _explain_full(
        self,
        pre: Preemptor,
        req: Requests,
        results: list[tuple[NodeState, NodeResult]],
        static: StaticFit,
        too_small: list[NodeState],
    ) -> None:
        if not results:
            self._no_node(pre, req, static, too_small)
            return
        for _, result in results:
            self._record(pre, result, force=True)
        most = max(r.free_gpus + r.split.reclaimable for _, r in results)
        node, result = max(
            ((n, r) for n, r in results if r.free_gpus + r.split.reclaimable == most),
            key=lambda nr: tie_key(nr[0].name),
        )
        cut = [node.name for node, result in results if result.cut_off]
        why = reasons.unresolved(req, node.name, result, cut, self._ruled_out(req, static, too_small))
        self._unresolved(pre, why, UnresolvedReason.NO_FIT)

    def _explain_ranked(self, pre: Preemptor, req: Requests, static: StaticFit, cut: list[str]) -> None:
        """The reason _explain_full gives, without searching every node again: the closest node comes from
        the rankings, only its verdicts are recorded (docs/reclaim.md)."""
        too_small = static.too_small(req.gpus)
        node = self.rankings.closest(self.index.nodes, pre.priority, req.gpus, static.names)
        if node is None:
            self._no_node(pre, req, static, too_small)
            return
        result = self._search(self._shape_cache(pre.priority, req), node, req, pre.priority)
        self._record(pre, result, force=True)
        why = reasons.unresolved(req, node.name, result, cut, self._ruled_out(req, static, too_small))
        self._unresolved(pre, why, UnresolvedReason.NO_FIT)

    def _no_node(self, pre: Preemptor, req: Requests, static: StaticFit, too_small: list[NodeState]) -> None:
        if not self.index.nodes:
            self._unresolved(pre, "no nodes in the cluster", UnresolvedReason.NO_NODE)
        else:
            why = f"no node can run it: {self._ruled_out(req, static, too_small)}"
            self._unresolved(pre, why, UnresolvedReason.NO_NODE)

    @staticmethod
    def _ruled_out(req: Requests, static: StaticFit, too_small: list[NodeState]) -> str:
        first = (too_small[0].name, too_small[0].alloc.gpus) if too_small else ("", 0)
        return reasons.ruled_out(req, static.ruled_out, static.first_detail, len(too_small), first)


def _target(pre: Preemptor) -> str:
    """Who a preemptor's victims are noticed for (reclaim-notice-for): its gang, else itself."""
    return pre.gang.name if pre.gang is not None else str(pre.key)


def _noticed_for(candidate: Candidate, target: str) -> bool:
    """Under notice for target, and so is every member of its victim gang."""
    unit = candidate.unit
    members = unit.members if unit is not None else (candidate,)
    return all(m.notice.deadline_for(target) is not None for m in members)


def plan(
    cluster: ClusterState,
    usage: Mapping[ObjectKey, PodUsage],
    config: PlannerConfig,
    now: datetime,
    exclude: frozenset[ObjectKey] = frozenset(),
    budget: int | None = None,
) -> Plan:
    """Plan one pass. exclude: pods never to be chosen as victims (e.g. their eviction was refused);
    budget: evictions still allowed (default --max-evictions-per-pass; the service passes less when the
    hourly budget or earlier evictions of the pass leave less)."""
    left = config.max_evictions_per_pass if budget is None else min(budget, config.max_evictions_per_pass)
    with gc_paused():
        index = index_cluster(cluster, usage, config, now)
        result = _Pass(index, config, now, exclude, max(0, left)).run()
        if index.noticed:
            result.withdrawals = notices.withdrawals(index, result, cluster, config, now)
        return result
