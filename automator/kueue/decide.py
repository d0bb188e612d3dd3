"""The Kueue decisions (pure): waiting and holding Workloads, idleness, candidates, boost and unboost,
deactivation sets, budgets and cooldown. docs/kueue.md states the rules.

Idleness is the planner's: the holder's bound GPU pods are indexed as any victim (reclaim/cluster_index.py)
and judged together as a victim gang is (reclaim/splits.py first_protected), for a preemptor of the waiting
Workload's priority, leaving out the comparison of the pods' own priority: the Workloads' priorities are
compared instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from automator.kueue.model import (
    Boost,
    Deactivation,
    KueueMode,
    KueuePlan,
    KueueSettings,
    Note,
    Served,
    Target,
    Unboost,
    Waiting,
)
from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.kueue import ClusterQueue, KueueWorkload
from automator.objects.pod import NOT_CREATED, Pod
from automator.objects.priority_class import PriorityClass
from automator.objects.resources import FieldError
from automator.reclaim.cluster_index import Candidate, ClusterIndex, classes_by_name, index_cluster
from automator.reclaim.formats import fmt_measure
from automator.reclaim.model import PlannerConfig, PodUsage
from automator.reclaim.splits import first_protected
from steward_common.conventions import (
    GANG_KUEUE_LABEL,
    KUEUE_BOOST_ANNOTATION,
    KUEUE_BOOST_OWNER,
    KUEUE_BOOST_OWNER_ANNOTATION,
    KUEUE_DEACTIVATED_FOR_ANNOTATION,
    KUEUE_YIELD_TO_EQUAL_ANNOTATION,
    WORD_BUDGET,
    WORD_COOLDOWN,
    WORD_KUEUE_BUSY,
    WORD_KUEUE_FOREIGN_BOOST,
    WORD_KUEUE_MALFORMED,
    WORD_KUEUE_NO_IDLE,
    WORD_KUEUE_NO_PREEMPTION,
    WORD_KUEUE_NO_SET,
    WORD_KUEUE_NOT_ADMITTED,
    WORD_KUEUE_NOTHING_WAITS,
    WORD_KUEUE_QUEUE_UNKNOWN,
    WORD_KUEUE_QUOTA_FREE,
    WORD_KUEUE_RELEASING,
    WORD_KUEUE_SEARCH_CUT_OFF,
)

NEVER_POLICY = "Never"
# The deactivation set search tries at most this many sets for one waiting Workload (then says so).
MAX_SET_STEPS = 200_000
# An unresolved reason names at most this many of the Workloads that are not idle.
MAX_SHOWN = 3


@dataclass(frozen=True)
class Idle:
    """A holder's standing for one waiting priority: idle, or why not."""

    idle: bool
    why: str = ""
    pods: int = 0  # its bound pods (what a write counts against the budgets)
    activity: str = ""  # the measured activity, when idle
    work: float = 0.0  # its GPU pods' run time: what stopping it throws away


@dataclass
class _Holder:
    workload: KueueWorkload
    pods: list[Pod]  # its pods that are bound and not finished
    quota: int  # the GPU quota it holds
    standing: dict[int, Idle] = field(default_factory=dict)  # per waiting priority


def workload_pods(cluster: ClusterState) -> dict[ObjectKey, list[Pod]]:
    """Each Workload's pods: owned by its job (ownerReference or job-uid label), or by a Job that job owns,
    or owned by it as plain pods (the Workload's owners are the pods), or of its pod group."""
    objects = cluster.kueue
    owned_by: dict[str, list[Pod]] = {}
    by_uid: dict[str, Pod] = {}
    groups: dict[tuple[str, str], list[Pod]] = {}
    for pod in cluster.pods:
        for uid in pod.owner_uids:
            owned_by.setdefault(uid, []).append(pod)
        if pod.uid:
            by_uid[pod.uid] = pod
        group = pod.labels.get(GANG_KUEUE_LABEL)
        if isinstance(group, str) and group:
            groups.setdefault((pod.key.namespace, group), []).append(pod)
    jobs_of: dict[str, list[str]] = {}
    for job in objects.jobs:
        for owner in job.owner_uids:
            jobs_of.setdefault(owner, []).append(job.uid)
    found: dict[ObjectKey, list[Pod]] = {}
    for w in objects.workloads:
        pods: dict[ObjectKey, Pod] = {}
        uids = set(w.job_uids)
        uids.update(child for uid in w.job_uids for child in jobs_of.get(uid, ()))
        for uid in uids:
            for pod in owned_by.get(uid, ()):
                pods[pod.key] = pod
            if uid in by_uid:
                pods[by_uid[uid].key] = by_uid[uid]
        for pod in groups.get((w.key.namespace, w.key.name), ()):
            pods[pod.key] = pod
        found[w.key] = [p for p in pods.values() if p.key.namespace == w.key.namespace]
    return found


def _target(w: KueueWorkload) -> Target:
    return Target(w.key, w.uid, w.api_version)


def _order(w: KueueWorkload) -> tuple[int, datetime, ObjectKey]:
    """Waiting Workloads are served by priority, then creation time (unknown last), then name."""
    return (-w.priority, w.created or NOT_CREATED, w.key)


@dataclass
class _Pass:
    cluster: ClusterState
    index: ClusterIndex
    config: PlannerConfig
    settings: KueueSettings
    now: datetime
    budget: int
    served: Mapping[ObjectKey, datetime]
    plan: KueuePlan
    candidates: dict[ObjectKey, Candidate] = field(default_factory=dict)
    holders: dict[ObjectKey, _Holder] = field(default_factory=dict)
    queues: dict[str, ClusterQueue] = field(default_factory=dict)
    local: dict[ObjectKey, str] = field(default_factory=dict)
    pods_of: dict[ObjectKey, list[Pod]] = field(default_factory=dict)
    # waiting Workload (namespace/name) -> a Workload deactivated for it that still has pods
    releasing: dict[str, ObjectKey] = field(default_factory=dict)
    yields: dict[str | None, bool] = field(default_factory=dict)
    classes: dict[str, PriorityClass] = field(default_factory=dict)

    # --- the holders' standing ---

    def standing(self, holder: _Holder, priority: int) -> Idle:
        known = holder.standing.get(priority)
        if known is None:
            known = holder.standing[priority] = self._judge(holder, priority)
        return known

    def _judge(self, holder: _Holder, priority: int) -> Idle:
        """Idle for a waiting Workload of this priority: at least one bound pod, and every bound GPU pod a
        victim by the planner's rules but for its own priority, all or nothing (as a victim gang)."""
        pods, names = holder.pods, self.config.gpu_resources
        if not pods:
            return Idle(False, "no bound pod")
        members: list[Candidate] = []
        for pod in sorted(pods, key=lambda p: p.key):
            if pod.terminating:
                return Idle(False, f"{pod.key} is terminating", len(pods))
            candidate = self.candidates.get(pod.key)
            if candidate is not None:
                members.append(candidate)
                continue
            try:
                gpus = pod.requests(names).gpus
            except FieldError as exc:
                return Idle(False, f"{pod.key} [resources-malformed] {exc}", len(pods))
            if gpus:  # a GPU pod that is no candidate: its node is not listed or cannot be read
                return Idle(False, f"{pod.key} [node-unknown] node {pod.node_name} cannot be read", len(pods))
        if not members:
            return Idle(False, "its bound pods hold no GPU", len(pods))
        found = first_protected(members, priority, own_priority=False)
        if found is not None:
            member, rule, why = found
            return Idle(False, f"{member.key} [{rule}] {why}", len(pods))
        budget_left = self.index.pdbs.remaining
        counted: dict[tuple[str, str], int] = {}
        for member in members:
            for pdb in member.pdbs:
                counted[pdb] = counted.get(pdb, 0) + 1
                if counted[pdb] > budget_left.get(pdb, 0):
                    allowed = budget_left.get(pdb, 0)
                    why = f"PodDisruptionBudget {pdb[0]}/{pdb[1]} allows {allowed} disruptions"
                    return Idle(False, f"{member.key} [0-pdb] {why}", len(pods))
        return Idle(True, "", len(pods), _activity(members), sum(m.age for m in members))

    def yields_to_equal(self, holder: _Holder) -> bool:
        """Every GPU pod's PriorityClass lets the Workload yield to a waiting one of its own priority."""
        classes = self.classes
        members = [self.candidates[p.key] for p in holder.pods if p.key in self.candidates]
        if not members:
            return False
        for member in members:
            name = member.pod.class_name
            if name not in self.yields:
                pc = classes.get(name) if name else None
                self.yields[name] = (
                    pc is not None and pc.annotations.get(KUEUE_YIELD_TO_EQUAL_ANNOTATION) == "true"
                )
            if not self.yields[name]:
                return False
        return True

    def may_yield(self, holder: _Holder, waiting: KueueWorkload) -> bool:
        """The Workloads' priorities: the holder's strictly lower, or equal where its classes say so."""
        mine = holder.workload.priority
        return mine < waiting.priority or (mine == waiting.priority and self.yields_to_equal(holder))

    # --- queues ---

    def queue_of(self, w: KueueWorkload) -> tuple[ClusterQueue | None, str]:
        """A waiting Workload's ClusterQueue (through its LocalQueue), or why it is not known."""
        local = ObjectKey(w.key.namespace, w.queue_name)
        if not w.queue_name:
            return None, f"{WORD_KUEUE_QUEUE_UNKNOWN}: it names no LocalQueue (spec.queueName)"
        name = self.local.get(local)
        if name is None:
            return None, f"{WORD_KUEUE_QUEUE_UNKNOWN}: LocalQueue {local} is not listed"
        queue = self.queues.get(name)
        if queue is None:
            return (
                None,
                f"{WORD_KUEUE_QUEUE_UNKNOWN}: ClusterQueue {name} (of LocalQueue {local}) is not listed",
            )
        if queue.error is not None:
            return None, f"{WORD_KUEUE_MALFORMED}: ClusterQueue {name}: {queue.error}"
        return queue, ""

    def reachable(self, queue: ClusterQueue) -> tuple[list[_Holder], str]:
        """The holders Kueue itself could preempt for a Workload waiting in `queue` (boost: the queue's
        own when withinClusterQueue allows, its cohort's when reclaimWithinCohort allows; deactivate: the
        queue's own), or why none can be."""
        same = self.settings.mode is KueueMode.DEACTIVATE or queue.within_cluster_queue != NEVER_POLICY
        cohort = (
            self.settings.mode is KueueMode.BOOST
            and bool(queue.cohort)
            and queue.reclaim_within_cohort != NEVER_POLICY
        )
        if not same and not cohort:
            why = "it has no cohort" if not queue.cohort else "reclaimWithinCohort is Never"
            return [], (
                f"{WORD_KUEUE_NO_PREEMPTION}: ClusterQueue {queue.name}: withinClusterQueue is Never "
                f"and {why}: Kueue cannot preempt for it"
            )
        found: list[_Holder] = []
        for holder in self.holders.values():
            name = holder.workload.cluster_queue
            if name == queue.name:
                if same:
                    found.append(holder)
            elif cohort:
                other = self.queues.get(name)
                if other is not None and other.cohort == queue.cohort:
                    found.append(holder)
        return sorted(found, key=lambda h: h.workload.key), ""

    def idle_for(self, waiting: KueueWorkload, holders: list[_Holder]) -> tuple[list[_Holder], str]:
        """The idle candidates among holders for a waiting Workload, and a summary of the others."""
        idle: list[_Holder] = []
        protected: list[str] = []
        for holder in holders:
            if not self.may_yield(holder, waiting):
                continue
            standing = self.standing(holder, waiting.priority)
            if standing.idle:
                idle.append(holder)
            else:
                protected.append(f"{holder.workload.key}: {standing.why}")
        shown = "; ".join(protected[:MAX_SHOWN]) + (
            f"; {len(protected) - MAX_SHOWN} more" if len(protected) > MAX_SHOWN else ""
        )
        summary = f"{len(protected)} not idle" + (f": {shown}" if protected else "")
        return idle, summary

    def cooldown(self, waiting: KueueWorkload) -> str | None:
        """Why a waiting Workload is not served again now: its freed quota is still being released (the
        Workloads deactivated for it still have pods), or it was served within --cooldown-seconds."""
        holder_key = self.releasing.get(str(waiting.key))
        if holder_key is not None:
            return f"{WORD_KUEUE_RELEASING}: {holder_key}, deactivated for it, still has pods"
        when = self.served.get(waiting.key)
        if when is not None and self.now - when < timedelta(seconds=self.config.cooldown_seconds):
            ago = (self.now - when).total_seconds()
            return f"{WORD_COOLDOWN}: served {ago:.0f} s ago, within --cooldown-seconds"
        return None


def _activity(members: list[Candidate]) -> str:
    """The highest GPU activity among the pods, as the Event says it."""
    measured = [
        m.usage.gpu_activity for m in members if m.usage is not None and m.usage.gpu_activity is not None
    ]
    if not measured:  # rule 1 (minimum-preemptable-priority) skips the usage check
        return f"no usage check (minimum-preemptable-priority) on its {len(members)} GPU pod(s)"
    return f"GPU activity at most {fmt_measure(max(measured))} on its {len(members)} GPU pod(s)"


def _is_ours(w: KueueWorkload) -> bool:
    return w.annotations.get(KUEUE_BOOST_OWNER_ANNOTATION) == KUEUE_BOOST_OWNER


def plan_kueue(
    cluster: ClusterState,
    usage: Mapping[ObjectKey, PodUsage],
    config: PlannerConfig,
    now: datetime,
    settings: KueueSettings,
    budget: int | None = None,
    served: Mapping[ObjectKey, datetime] | None = None,
    index: ClusterIndex | None = None,
) -> KueuePlan:
    """What the mode writes this pass. budget: the evictions the pass may still make (a write on a
    Workload of n pods counts n); served: when each waiting Workload was last served (the cooldown)."""
    plan = KueuePlan(settings.mode)
    if not settings.on:
        return plan
    state = _prepare(cluster, usage, config, now, settings, budget, served, index, plan)
    waiting = _classify(state)
    if settings.mode is KueueMode.BOOST:
        _boost(state, waiting)
    else:
        _deactivate(state, waiting)
    return plan


def _prepare(
    cluster: ClusterState,
    usage: Mapping[ObjectKey, PodUsage],
    config: PlannerConfig,
    now: datetime,
    settings: KueueSettings,
    budget: int | None,
    served: Mapping[ObjectKey, datetime] | None,
    index: ClusterIndex | None,
    plan: KueuePlan,
) -> _Pass:
    pods_of = workload_pods(cluster)
    if index is None:
        index = index_cluster(_holders_only(cluster, pods_of), usage, config, now)
    state = _Pass(
        cluster,
        index,
        config,
        settings,
        now,
        config.max_evictions_per_pass if budget is None else budget,
        served or {},
        plan,
    )
    state.candidates = {c.key: c for node in index.nodes.values() for c in node.candidates}
    state.classes = classes_by_name(cluster.priority_classes)
    state.queues = {q.name: q for q in cluster.kueue.cluster_queues}
    state.local = {q.key: q.cluster_queue for q in cluster.kueue.local_queues if q.error is None}
    state.pods_of = pods_of
    for w in cluster.kueue.workloads:
        target = w.annotations.get(KUEUE_DEACTIVATED_FOR_ANNOTATION)
        if isinstance(target, str) and any(not p.finished for p in state.pods_of.get(w.key, ())):
            state.releasing.setdefault(target, w.key)
    return state


def _holders_only(cluster: ClusterState, pods_of: Mapping[ObjectKey, list[Pod]]) -> ClusterState:
    """The cluster cut down to what idleness reads: the admitted Workloads' bound pods and their nodes (a
    pod's verdict reads its own class, usage, scope and PDBs, never its neighbours), so the Kueue step
    indexes its holders' pods, not the whole cluster again."""
    pods = {
        p.key: p for w in cluster.kueue.workloads if w.admitted for p in pods_of.get(w.key, ()) if p.node_name
    }
    names = {p.node_name for p in pods.values()}
    return replace(cluster, nodes=[n for n in cluster.nodes if n.name in names], pods=list(pods.values()))


def explain_holder(
    cluster: ClusterState,
    usage: Mapping[ObjectKey, PodUsage],
    config: PlannerConfig,
    now: datetime,
    settings: KueueSettings,
    workload: ObjectKey,
) -> list[str]:
    """An admitted Workload's standing for every waiting Workload that could take its quota: idle, or the
    first pod that protects it and its rule (explain's lines)."""
    state = _prepare(cluster, usage, config, now, settings, None, None, None, KueuePlan(settings.mode))
    waiting = _classify(state)
    holder = state.holders.get(workload)
    if holder is None:
        return [f"Workload {workload}: not admitted (or finished, evicted, deactivated): it holds no quota"]
    lines: list[str] = []
    for w, _, queue in waiting:
        if holder not in state.reachable(queue)[0]:
            continue
        head = f"for waiting Workload {w.key} (priority {w.priority})"
        if not state.may_yield(holder, w):
            lines.append(f"{head}: its priority {holder.workload.priority} does not yield")
            continue
        standing = state.standing(holder, w.priority)
        lines.append(
            f"{head}: " + (f"idle ({standing.activity})" if standing.idle else f"not idle: {standing.why}")
        )
    return lines or [f"Workload {workload}: no waiting Workload could take its quota"]


def _classify(state: _Pass) -> list[tuple[KueueWorkload, int, ClusterQueue]]:
    """The waiting Workloads in the order they are served (with their need and queue), the holders in
    state.holders; a Workload that cannot be read is unresolved."""
    names = state.config.gpu_resources
    waiting: list[tuple[KueueWorkload, int, ClusterQueue]] = []
    for w in sorted(state.cluster.kueue.workloads, key=_order):
        if w.error is not None:
            state.plan.unresolved.append(Note(w.key, f"{WORD_KUEUE_MALFORMED}: Workload {w.key}: {w.error}"))
            continue
        if w.finished:
            continue
        if w.admitted and not w.evicted:
            if not w.active:
                continue  # being stopped (deactivated): its quota is on its way back
            pods = [p for p in state.pods_of.get(w.key, ()) if p.node_name and not p.finished]
            try:
                quota = w.quota_gpus(names)
            except FieldError as exc:
                state.plan.unresolved.append(Note(w.key, f"{WORD_KUEUE_MALFORMED}: Workload {w.key}: {exc}"))
                continue
            state.holders[w.key] = _Holder(w, pods, quota)
            continue
        if not w.active or w.quota_reserved:
            continue
        try:
            need = w.gpus(names)
        except FieldError as exc:
            state.plan.unresolved.append(Note(w.key, f"{WORD_KUEUE_MALFORMED}: Workload {w.key}: {exc}"))
            continue
        if need <= 0:
            continue  # waits for no GPU: not ours to help
        queue, why = state.queue_of(w)
        state.plan.waiting.append(Waiting(w.key, need, queue.name if queue is not None else ""))
        if queue is None:
            state.plan.unresolved.append(Note(w.key, why))
            continue
        waiting.append((w, need, queue))
    return waiting


def _boost(state: _Pass, waiting: list[tuple[KueueWorkload, int, ClusterQueue]]) -> None:
    plan, budget = state.plan, state.budget
    wanted: dict[ObjectKey, KueueWorkload] = {}  # each idle candidate and the first Workload it yields to
    # the holders some waiting Workload could take, and why each is not idle
    considered: dict[ObjectKey, str] = {}
    budget_out = False
    idle_held: set[ObjectKey] = set()
    for w, _, queue in waiting:
        holders, why = state.reachable(queue)
        if why:
            plan.unresolved.append(Note(w.key, why))
            continue
        idle, summary = state.idle_for(w, holders)
        for holder in holders:
            if state.may_yield(holder, w):
                considered.setdefault(holder.workload.key, state.standing(holder, w.priority).why)
        if not idle:
            plan.unresolved.append(
                Note(w.key, f"{WORD_KUEUE_NO_IDLE}: no idle Workload Kueue could preempt for it ({summary})")
            )
            continue
        idle_held.update(h.workload.key for h in idle)
        pause = state.cooldown(w)
        wrote = False
        for holder in idle:
            hw = holder.workload
            if hw.key in wanted:
                continue
            wanted[hw.key] = w
            boost = hw.annotations.get(KUEUE_BOOST_ANNOTATION)
            if boost is not None and not _is_ours(hw):
                why = (
                    f"{WORD_KUEUE_FOREIGN_BOOST}: it carries {KUEUE_BOOST_ANNOTATION}={boost!s} that "
                    "gpu-steward did not write"
                )
                plan.left_alone.append(Note(hw.key, why))
                continue
            if _is_ours(hw) and boost == str(state.settings.boost):
                continue  # boosted already: nothing to write
            if pause is not None or budget_out:
                continue
            n = state.standing(holder, w.priority).pods
            if n > budget:
                why = f"{WORD_BUDGET}: boosting {hw.key} counts {n} pod(s), {budget} left this pass"
                plan.unresolved.append(Note(w.key, why))
                budget_out = True
                continue
            budget -= n
            plan.boost.append(Boost(_target(hw), w.key, state.settings.boost, holder.quota, n))
            wrote = True
        if pause is not None:
            plan.unresolved.append(Note(w.key, pause))
        if wrote:
            plan.served.append(w.key)
    plan.idle_gpus_held = sum(state.holders[k].quota for k in idle_held)
    for hw in sorted(state.cluster.kueue.workloads, key=lambda x: x.key):
        if hw.error is not None or hw.key in wanted or not _is_ours(hw):
            continue  # a Workload that cannot be read is never written
        if KUEUE_BOOST_ANNOTATION not in hw.annotations:
            continue
        if hw.key not in state.holders:
            state_word = "finished" if hw.finished else "evicted" if hw.evicted else "not admitted"
            why = f"{WORD_KUEUE_NOT_ADMITTED}: {state_word}"
        elif hw.key in considered:
            why = f"{WORD_KUEUE_BUSY}: {considered[hw.key]}"
        else:
            why = f"{WORD_KUEUE_NOTHING_WAITS}: no waiting Workload it could yield its quota to"
        plan.unboost.append(Unboost(_target(hw), why))


def _deactivate(state: _Pass, waiting: list[tuple[KueueWorkload, int, ClusterQueue]]) -> None:
    plan, names = state.plan, state.config.gpu_resources
    budget = state.budget
    taken: set[ObjectKey] = set()
    idle_held: set[ObjectKey] = set()
    for w, need, queue in waiting:
        holders, _ = state.reachable(queue)
        idle, summary = state.idle_for(w, holders)
        idle_held.update(h.workload.key for h in idle)
        pause = state.cooldown(w)
        if pause is not None:
            plan.unresolved.append(Note(w.key, pause))
            continue
        nominal = sum(queue.nominal.get(n, 0) for n in names)
        unused = nominal - sum(queue.used.get(n, 0) for n in names)
        if unused >= need:
            why = (
                f"{WORD_KUEUE_QUOTA_FREE}: ClusterQueue {queue.name} has {unused} unused GPUs of its nominal "
                f"quota, enough for its {need}: it waits for something else"
            )
            plan.unresolved.append(Note(w.key, why))
            continue
        shortfall = need - max(unused, 0)
        pool = [h for h in idle if h.workload.key not in taken]
        chosen, cut = _cover(pool, shortfall, w.priority, state)
        if chosen is None:
            held = sum(h.quota for h in pool)
            word = WORD_KUEUE_SEARCH_CUT_OFF if cut else WORD_KUEUE_NO_SET
            why = (
                f"{word}: ClusterQueue {queue.name}: it needs {need} GPUs, {max(unused, 0)} unused; "
                f"{len(pool)} idle Workload(s) hold {held} ({summary})"
            )
            if cut:
                why += f"; more than {MAX_SET_STEPS} sets tried"
            plan.unresolved.append(Note(w.key, why))
            continue
        pods = sum(state.standing(h, w.priority).pods for h in chosen)
        if pods > budget:
            why = f"{WORD_BUDGET}: the set covering it counts {pods} pod(s), {budget} left this pass"
            plan.unresolved.append(Note(w.key, why))
            break  # as the planner: the pass's budget is spent
        budget -= pods
        for h in chosen:
            standing = state.standing(h, w.priority)
            taken.add(h.workload.key)
            plan.deactivate.append(
                Deactivation(
                    _target(h.workload), w.key, h.quota, standing.pods, standing.activity, need, queue.name
                )
            )
        plan.served.append(w.key)
    plan.idle_gpus_held = sum(state.holders[k].quota for k in idle_held)
    # Boosts the automator wrote in boost mode go: deactivate writes none (the mode was switched).
    for hw in sorted(state.cluster.kueue.workloads, key=lambda x: x.key):
        if hw.error is None and _is_ours(hw) and KUEUE_BOOST_ANNOTATION in hw.annotations:
            why = f"{WORD_KUEUE_NOTHING_WAITS}: --kueue deactivate keeps no boost"
            plan.unboost.append(Unboost(_target(hw), why))


def _cover(
    pool: list[_Holder], shortfall: int, priority: int, state: _Pass
) -> tuple[list[_Holder] | None, bool]:
    """The set of holders freeing at least `shortfall` GPUs of quota that is best by the victim order of
    docs/reclaim.md: fewest Workloads, fewest GPUs, lowest highest priority, lowest priority sum, least
    work lost, names. (None, cut off) when none covers it."""
    pool = sorted(pool, key=lambda h: h.workload.key)
    largest = sorted((h.quota for h in pool), reverse=True)
    steps = 0
    for size in range(1, len(pool) + 1):
        if sum(largest[:size]) < shortfall:
            continue
        best: tuple[object, ...] | None = None
        chosen: tuple[_Holder, ...] | None = None
        for combo in itertools.combinations(pool, size):
            steps += 1
            if steps > MAX_SET_STEPS:
                return None, True
            gpus = sum(h.quota for h in combo)
            if gpus < shortfall:
                continue
            priorities = [h.workload.priority for h in combo]
            work = sum(state.standing(h, priority).work for h in combo)
            key = (gpus, max(priorities), sum(priorities), work, tuple(h.workload.key for h in combo))
            if best is None or key < best:
                best, chosen = key, combo
        if chosen is not None:
            return list(chosen), False
    return None, False


__all__ = ["Served", "explain_holder", "plan_kueue", "workload_pods"]
