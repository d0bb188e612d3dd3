"""The reclaim planner: which idle lower-priority pods to evict for which pending GPU pod. Pure: no I/O, no
clock. Issue 4's rules are implemented here and in eligibility.py / fit.py; docs/reclaim.md explains them."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from automator.eligibility import (
    Assessment,
    ClassSettings,
    PdbIndex,
    assess,
    class_settings,
    fmt_measure,
    verdict_for,
)
from automator.fit import scheduling_signature, static_misfit
from automator.model import (
    LAST_RECLAIM_ANNOTATION,
    RECLAIM_ANNOTATION,
    AnnotationWarning,
    ClusterState,
    Decision,
    JsonObj,
    Plan,
    PlannerConfig,
    PodKey,
    PodUsage,
    Unresolved,
    UsageWindow,
    Verdict,
    Victim,
)
from automator.resources import (
    FieldError,
    Requests,
    annotations_of,
    created_at,
    find_global_default,
    is_finished,
    is_terminating,
    is_unschedulable,
    node_allocatable,
    node_name,
    parse_time,
    pod_priority,
    pod_requests,
    scheduled_at,
)

# Victim sets tried per node and size before the search narrows to the best-ranked victims. A node of
# 8 GPUs has at most 8 GPU pods (C(8,4) = 70); only nodes with many fractional/MIG pods reach this.
COMBINATION_BUDGET = 5000
# (preemptor, victim) verdicts recorded per pass in full; beyond it only the chosen node's candidates and
# the closest node of an unresolved preemptor are recorded, so a large pass stays fast (see docs/reclaim.md).
VERDICT_LIMIT = 20_000

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
class _Pod:
    key: PodKey
    obj: JsonObj
    node: str
    req: Requests
    priority: int
    scheduled: datetime | None
    age: float  # seconds since scheduled (0 when unknown): run time an eviction throws away
    assessment: Assessment
    pdbs: list[tuple[str, str]]
    usage: PodUsage | None


@dataclass
class _Node:
    name: str
    obj: JsonObj
    alloc: Requests
    error: str | None = None
    used_gpus: int = 0
    used_cpu: int = 0
    used_mem: int = 0
    candidates: list[_Pod] = field(default_factory=list)  # bound, running, not terminating, holding GPUs
    version: int = 0


@dataclass
class _NodeResult:
    key: SetKey | None
    victims: tuple[_Pod, ...]
    free_gpus: int
    reclaimable: int
    eligible: list[_Pod]
    protected: dict[PodKey, tuple[str, str]]
    not_lower: int
    misfit: str | None


@dataclass
class _Static:
    """Nodes a scheduling signature may use at all, and why the others are ruled out."""

    feasible: list[_Node]
    ruled_out: Counter[str]
    first_detail: str | None = None  # the first node ruled out and why, quoted in unresolved reasons


@dataclass
class _Preemptor:
    key: PodKey
    obj: JsonObj
    priority: int
    created: datetime
    req: Requests | None
    error: str | None


def _classes_by_name(priority_classes: list[JsonObj]) -> dict[str, JsonObj]:
    return {str((pc.get("metadata") or {}).get("name")): pc for pc in priority_classes}


def _class_of(pod: JsonObj, classes: Mapping[str, JsonObj]) -> JsonObj | None:
    name = (pod.get("spec") or {}).get("priorityClassName")
    return classes.get(name) if name else None


def _is_reclaim_class(pc: JsonObj | None) -> bool:
    return pc is not None and str(annotations_of(pc).get(RECLAIM_ANNOTATION, "")).strip().lower() == "true"


class _Settings:
    """ClassSettings per PriorityClass name, parsed once."""

    def __init__(self, classes: Mapping[str, JsonObj], config: PlannerConfig) -> None:
        self.classes = classes
        self.config = config
        self.cache: dict[str | None, ClassSettings] = {}

    def of(self, pod: JsonObj) -> tuple[str | None, ClassSettings]:
        raw = (pod.get("spec") or {}).get("priorityClassName")
        name = str(raw) if raw in self.classes else None  # no (known) class: the defaults
        if name not in self.cache:
            self.cache[name] = class_settings(self.classes[name] if name else None, self.config)
        return name, self.cache[name]


def _is_victim_candidate(pod: JsonObj) -> bool:
    return bool(node_name(pod)) and not is_finished(pod) and not is_terminating(pod)


def usage_windows(cluster: ClusterState, config: PlannerConfig) -> dict[PodKey, UsageWindow]:
    """The usage window every GPU-holding bound pod (potential victim) needs, from its PriorityClass's
    annotations."""
    settings = _Settings(_classes_by_name(cluster.priority_classes), config)
    windows: dict[PodKey, UsageWindow] = {}
    for pod in cluster.pods:
        if not _is_victim_candidate(pod):
            continue
        try:
            gpus = pod_requests(pod, config.gpu_resources).gpus
        except FieldError:
            continue  # protected anyway; no query needed
        if gpus > 0:
            windows[PodKey.of(pod)] = settings.of(pod)[1].window
    return windows


def _free(node: _Node) -> tuple[int, int, int]:
    return (
        node.alloc.gpus - node.used_gpus,
        node.alloc.cpu_m - node.used_cpu,
        node.alloc.memory - node.used_mem,
    )


def _set_key(victims: Sequence[_Pod]) -> SetKey:
    return (
        len(victims),
        sum(v.req.gpus for v in victims),
        max((v.priority for v in victims), default=0),
        sum(v.priority for v in victims),
        round(sum(v.age for v in victims), 3),
        tuple(sorted(str(v.key) for v in victims)),
    )


def _pdbs_allow(victims: Sequence[_Pod], pdbs: PdbIndex) -> bool:
    counts = Counter(pdb for v in victims for pdb in v.pdbs)
    return all(pdbs.remaining.get(pdb, 0) >= n for pdb, n in counts.items())


def _search_node(
    node: _Node, req: Requests, priority: int, pdbs: PdbIndex, exclude: frozenset[PodKey]
) -> _NodeResult:
    """Best victim set on one node for a preemptor with these requests and priority."""
    free_g, free_c, free_m = _free(node)
    eligible: list[_Pod] = []
    protected: dict[PodKey, tuple[str, str]] = {}
    not_lower = 0
    for pod in node.candidates:
        if pod.priority >= priority:
            not_lower += 1
            continue
        if exclude and pod.key in exclude:
            protected[pod.key] = ("excluded", "excluded: an eviction was refused earlier in this pass")
            continue
        ok, rule, reason = verdict_for(pod.assessment, priority)
        if ok:
            eligible.append(pod)
        else:
            protected[pod.key] = (rule, reason)
    reclaimable = sum(p.req.gpus for p in eligible)
    result = _NodeResult(None, (), free_g, reclaimable, eligible, protected, not_lower, None)
    if free_g >= req.gpus and free_c >= req.cpu_m and free_m >= req.memory:
        result.key = _set_key(())
        return result
    need = req.gpus - free_g
    if need > reclaimable:
        return result
    by_size = sorted((p.req.gpus for p in eligible), reverse=True)
    # Fewest victims first: no set smaller than the k largest reaching `need` can free enough GPUs.
    lower = next(k for k in range(len(by_size) + 1) if sum(by_size[:k]) >= need)
    ranked = sorted(eligible, key=lambda p: (p.priority, p.age, str(p.key)))
    for size in range(max(lower, 1), len(eligible) + 1):
        pool = ranked
        while len(pool) > size and math.comb(len(pool), size) > COMBINATION_BUDGET:
            pool = pool[:-1]  # drop the least attractive victim: the search stays bounded, not exhaustive
        options = [c for c in itertools.combinations(pool, size) if sum(p.req.gpus for p in c) >= need]
        for key, combo in sorted((_set_key(c), c) for c in options):
            cpu = free_c + sum(p.req.cpu_m for p in combo)
            mem = free_m + sum(p.req.memory for p in combo)
            if cpu >= req.cpu_m and mem >= req.memory and _pdbs_allow(combo, pdbs):
                result.key, result.victims = key, combo
                return result
            if cpu < req.cpu_m:
                result.misfit = (
                    f"cpu: needs {req.cpu_m}m, {free_c}m free + {cpu - free_c}m from {size} victim(s)"
                )
            elif mem < req.memory:
                result.misfit = (
                    f"memory: needs {req.memory} B, {free_m} B free + {mem - free_m} B from victims"
                )
            else:
                result.misfit = "PodDisruptionBudget disruptionsAllowed would be exceeded by the victim set"
    return result


def _protected_summary(result: _NodeResult) -> str:
    counts = Counter(_SHORT.get(rule, rule) for rule, _ in result.protected.values())
    if result.not_lower:
        counts["not lower priority"] += result.not_lower
    if not counts:
        return "no protected pods"
    total = sum(counts.values())
    parts = ", ".join(f"{n} {name}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{total} pods protected: {parts}"


@dataclass
class _Pass:
    cluster: ClusterState
    usage: Mapping[PodKey, PodUsage]
    config: PlannerConfig
    now: datetime
    exclude: frozenset[PodKey]
    plan: Plan = field(default_factory=lambda: Plan([], [], [], {}, []))
    nodes: dict[str, _Node] = field(default_factory=dict)
    preemptors: list[_Preemptor] = field(default_factory=list)
    classes: dict[str, JsonObj] = field(default_factory=dict)  # PriorityClasses by name
    global_default: JsonObj | None = None
    pdbs: PdbIndex = field(default_factory=PdbIndex)
    pdb_version: int = 0
    static_cache: dict[str, _Static] = field(default_factory=dict)
    # (priority, requests) -> node name -> (node version, PDB version, result): alike preemptors share them
    search_cache: dict[tuple[int, Requests], dict[str, tuple[int, int, _NodeResult]]] = field(
        default_factory=dict
    )
    verdict_count: int = 0

    def build(self) -> None:
        config = self.config
        self.classes = _classes_by_name(self.cluster.priority_classes)
        self.global_default = find_global_default(self.cluster.priority_classes)
        settings = _Settings(self.classes, config)
        self.pdbs = PdbIndex.build(self.cluster.pdbs)
        for obj in sorted(self.cluster.nodes, key=lambda n: str((n.get("metadata") or {}).get("name"))):
            name = str((obj.get("metadata") or {}).get("name"))
            try:
                alloc = node_allocatable(obj, config.gpu_resources)
                self.nodes[name] = _Node(name, obj, alloc)
            except FieldError as exc:
                self.nodes[name] = _Node(name, obj, Requests(0, 0, 0), error=f"Node {name}: {exc}")
        class_pods: dict[str, list[PodKey]] = {}
        for obj in self.cluster.pods:
            key = PodKey.of(obj)
            if is_finished(obj):
                continue
            bound = node_name(obj)
            if not bound:
                if is_unschedulable(obj) and _is_reclaim_class(_class_of(obj, self.classes)):
                    self._add_preemptor(key, obj)
                continue
            node = self.nodes.get(bound)
            if node is None:
                continue  # bound to a node we do not know: nothing to plan there
            try:
                req = pod_requests(obj, config.gpu_resources)
            except FieldError as exc:
                # Unknown usage of the node: fail safe, plan nothing there.
                node.error = f"Pod {key}: {exc}"
                continue
            node.used_gpus += req.gpus
            node.used_cpu += req.cpu_m
            node.used_mem += req.memory
            if req.gpus == 0 or is_terminating(obj):
                continue
            class_name, pod_settings = settings.of(obj)
            if class_name is not None:
                class_pods.setdefault(class_name, []).append(key)
            node.candidates.append(self._candidate(key, obj, bound, req, pod_settings))
        for class_name, pod_settings in sorted(settings.cache.items(), key=lambda kv: str(kv[0])):
            for bad in pod_settings.malformed:
                pods = tuple(sorted(class_pods.get(class_name or "", [])))
                self.plan.warnings.append(
                    AnnotationWarning(
                        str(class_name),
                        bad.annotation,
                        bad.value,
                        bad.message + "; its pods are protected",
                        pods,
                    )
                )
        self.preemptors.sort(key=lambda p: (-p.priority, p.created, p.key))

    def _candidate(
        self, key: PodKey, obj: JsonObj, bound: str, req: Requests, pod_settings: ClassSettings
    ) -> _Pod:
        usage = self.usage.get(key)
        pdb_ids, pdb_reason = self.pdbs.covering(obj)
        try:
            priority = pod_priority(obj, self.classes, self.global_default)
            scheduled = scheduled_at(obj)
        except FieldError as exc:
            # A victim we cannot read is protected; priority 0 keeps it out of nothing but harms no one.
            blocked = Assessment(("resources-malformed", f"Pod {key}: {exc}: protected"), None, False, "", "")
            return _Pod(key, obj, bound, req, 0, None, 0.0, blocked, pdb_ids, usage)
        assessment = assess(pod_settings, usage, scheduled, self.now, self.config, pdb_reason)
        age = max(0.0, (self.now - scheduled).total_seconds()) if scheduled else 0.0
        return _Pod(key, obj, bound, req, priority, scheduled, age, assessment, pdb_ids, usage)

    def _add_preemptor(self, key: PodKey, obj: JsonObj) -> None:
        error: str | None = None
        req: Requests | None = None
        priority = 0
        created = created_at({})
        try:
            priority = pod_priority(obj, self.classes, self.global_default)
            created = created_at(obj)
            req = pod_requests(obj, self.config.gpu_resources)
        except FieldError as exc:
            error = f"malformed pod: {exc}"
        if req is not None and req.gpus == 0:
            return  # not a GPU pod: not ours to help
        self.preemptors.append(_Preemptor(key, obj, priority, created, req, error))

    def _cooldown(self, pre: _Preemptor) -> str | None:
        raw = annotations_of(pre.obj).get(LAST_RECLAIM_ANNOTATION)
        if raw is None:
            return None
        try:
            last = parse_time(raw, LAST_RECLAIM_ANNOTATION)
        except FieldError:
            return (
                f"annotation {LAST_RECLAIM_ANNOTATION} {raw!r} is not an RFC 3339 time: treated as in "
                "cooldown"
            )
        elapsed = (self.now - last).total_seconds()
        if elapsed < self.config.cooldown_seconds:
            remaining = math.ceil(self.config.cooldown_seconds - elapsed)
            return (
                f"in cooldown: victims were evicted for it {elapsed:.0f} s ago ({raw}); "
                f"{remaining} s of the {self.config.cooldown_seconds} s cooldown remain"
            )
        return None

    def _static(self, pre: _Preemptor) -> _Static:
        signature = scheduling_signature(pre.obj)
        cached = self.static_cache.get(signature)
        if cached is None:
            cached = _Static([], Counter())
            for node in self.nodes.values():
                misfit = (
                    static_misfit(pre.obj, node.obj) if node.error is None else ("unreadable", node.error)
                )
                if misfit is None:
                    cached.feasible.append(node)
                else:
                    cached.ruled_out[misfit[0]] += 1
                    cached.first_detail = cached.first_detail or f"{node.name}: {misfit[1]}"
            self.static_cache[signature] = cached
        return cached

    def _record(self, pre: _Preemptor, result: _NodeResult, force: bool = False) -> None:
        if not force and self.verdict_count >= VERDICT_LIMIT:
            return
        for pod in result.eligible:
            _, rule, reason = verdict_for(pod.assessment, pre.priority)
            self.plan.verdicts.setdefault(pod.key, []).append(Verdict(pre.key, True, rule, reason))
        for key, (rule, reason) in result.protected.items():
            self.plan.verdicts.setdefault(key, []).append(Verdict(pre.key, False, rule, reason))
        self.verdict_count += len(result.eligible) + len(result.protected)

    def run(self) -> Plan:
        self.build()
        for pre in self.preemptors:
            self._place(pre)
        return self.plan

    def _unresolved(self, pre: _Preemptor, reason: str) -> None:
        self.plan.unresolved.append(Unresolved(pre.key, reason))

    def _place(self, pre: _Preemptor) -> None:
        if pre.error is not None or pre.req is None:
            self._unresolved(pre, pre.error or "malformed pod")
            return
        cooldown = self._cooldown(pre)
        if cooldown is not None:
            self.plan.skipped_cooldown.append(pre.key)
            self._unresolved(pre, cooldown)
            return
        req = pre.req
        static = self._static(pre)
        too_small: list[_Node] = []
        cache = self.search_cache.setdefault((pre.priority, req), {})
        results: list[tuple[_Node, _NodeResult]] = []
        best: tuple[SetKey, _Node, _NodeResult] | None = None
        for node in static.feasible:  # in name order: the first of equal sets wins
            if node.alloc.gpus < req.gpus:
                too_small.append(node)
                continue
            entry = cache.get(node.name)
            if entry is None or entry[0] != node.version or entry[1] != self.pdb_version:
                entry = (
                    node.version,
                    self.pdb_version,
                    _search_node(node, req, pre.priority, self.pdbs, self.exclude),
                )
                cache[node.name] = entry
            result = entry[2]
            results.append((node, result))
            # Across nodes the set order alone decides (not the victims' names): equal sets go to the
            # node whose name sorts first, which is the first one met.
            if result.key is not None and (best is None or result.key[:-1] < best[0][:-1]):
                best = (result.key, node, result)
        if best is None:
            self._explain_unresolved(pre, req, results, static, too_small)
            return
        best_key, best_node, best_result = best
        # Verdicts where the preemptor already fits say nothing about who is evicted: not recorded.
        if self.verdict_count < VERDICT_LIMIT:
            for _, result in results:
                if result.key is None or result.key[0] > 0:
                    self._record(pre, result)
        elif best_key[0] > 0:
            self._record(pre, best_result, force=True)
        self._commit(pre, req, best_node, best_result)

    def _commit(self, pre: _Preemptor, req: Requests, node: _Node, result: _NodeResult) -> None:
        free_before, _, _ = _free(node)
        victims = result.victims
        freed = sum(v.req.gpus for v in victims)
        for victim in victims:
            node.candidates.remove(victim)
            node.used_gpus -= victim.req.gpus
            node.used_cpu -= victim.req.cpu_m
            node.used_mem -= victim.req.memory
            for pdb in victim.pdbs:
                self.pdbs.remaining[pdb] = self.pdbs.remaining.get(pdb, 0) - 1
                self.pdb_version += 1
        # The preemptor takes its requests; GPUs freed beyond them stay reserved for it this pass (issue 4:
        # freed GPUs are not offered to the next preemptor).
        excess = max(0, min(freed, free_before + freed - req.gpus))
        node.used_gpus += req.gpus + excess
        node.used_cpu += req.cpu_m
        node.used_mem += req.memory
        node.version += 1
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
        pre: _Preemptor,
        req: Requests,
        results: list[tuple[_Node, _NodeResult]],
        static: _Static,
        too_small: list[_Node],
    ) -> None:
        ruled_out = Counter(static.ruled_out)
        first_detail = static.first_detail
        if too_small:
            ruled_out["too few GPUs in total"] += len(too_small)
            small = too_small[0]
            first_detail = first_detail or f"{small.name}: allocatable {small.alloc.gpus} GPUs < {req.gpus}"
        excluded = ""
        if ruled_out:
            parts = ", ".join(f"{n} {why}" for why, n in sorted(ruled_out.items()))
            first = f" ({first_detail})" if first_detail else ""
            excluded = f"{sum(ruled_out.values())} node(s) ruled out: {parts}{first}"
        if not results:
            if not self.nodes:
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
            f"{result.reclaimable} reclaimable ({_protected_summary(result)})"
        )
        if result.misfit and result.free_gpus + result.reclaimable >= req.gpus:
            closest += f"; enough GPUs but {result.misfit}"
        reason = f"no node fits even after evicting all eligible idle pods; {closest}"
        if excluded:
            reason += f"; {excluded}"
        self._unresolved(pre, reason)


def plan(
    cluster: ClusterState,
    usage: Mapping[PodKey, PodUsage],
    config: PlannerConfig,
    now: datetime,
    exclude: frozenset[PodKey] = frozenset(),
) -> Plan:
    """Plan one pass. exclude: pods never to be chosen as victims (e.g. their eviction was refused)."""
    return _Pass(cluster, usage, config, now, exclude).run()


def _activity(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


def plan_to_json(result: Plan) -> dict[str, Any]:
    """The CLI JSON: decisions (each evicts), unresolved, already_fit, warnings, skipped_cooldown."""
    return {
        "decisions": [
            {
                "preemptor": str(d.preemptor),
                "node": d.node,
                "victims": [str(v.pod) for v in d.victims],
                "gpus_freed": d.gpus_freed,
                "gpus_requested": d.gpus_requested,
                "preemptor_priority": d.preemptor_priority,
                "free_gpus_before": d.free_gpus_before,
                "victim_details": [
                    {
                        "pod": str(v.pod),
                        "gpus": v.gpus,
                        "priority": v.priority,
                        "gpu_activity": _activity(v.gpu_activity),
                        "cpu_cores": _activity(v.cpu_cores),
                    }
                    for v in d.victims
                ],
            }
            for d in result.decisions
        ],
        "unresolved": [{"preemptor": str(u.preemptor), "reason": u.reason} for u in result.unresolved],
        # Preemptors that fit as the cluster is: nothing evicted, left to the scheduler.
        "already_fit": [
            {
                "preemptor": str(d.preemptor),
                "node": d.node,
                "gpus_requested": d.gpus_requested,
                "free_gpus_before": d.free_gpus_before,
            }
            for d in result.already_fit
        ],
        "warnings": [
            {
                "priority_class": w.priority_class,
                "annotation": w.annotation,
                "value": w.value,
                "message": w.message,
                "pods": [str(p) for p in w.pods],
            }
            for w in result.warnings
        ],
        "skipped_cooldown": [str(k) for k in result.skipped_cooldown],
    }


def explain(plan: Plan, cluster: ClusterState, key: PodKey, config: PlannerConfig | None = None) -> str:
    """Why a pod is or is not a victim, or what happens to it as a preemptor. LookupError if unknown."""
    config = config or PlannerConfig()
    obj = next((p for p in cluster.pods if PodKey.of(p) == key), None)
    if obj is None:
        raise LookupError(f"Pod {key}: not found in the cluster snapshot")
    spec = obj.get("spec") or {}
    try:
        gpus: int | str = pod_requests(obj, config.gpu_resources).gpus
    except FieldError as exc:
        gpus = f"unreadable ({exc})"
    phase = (obj.get("status") or {}).get("phase", "unknown")
    lines = [
        f"Pod {key}: phase {phase}, node {node_name(obj) or '-'}, "
        f"class {spec.get('priorityClassName') or '-'}, GPUs {gpus}"
    ]
    for fit in plan.already_fit:
        if fit.preemptor == key:
            lines.append(
                f"preemptor (priority {fit.preemptor_priority}, needs {fit.gpus_requested} GPUs): "
                f"already fits on node {fit.node} without evicting anything "
                f"({fit.free_gpus_before} GPUs free); left to the scheduler"
            )
    for decision in plan.decisions:
        if decision.preemptor == key:
            names = ", ".join(
                f"{v.pod} ({v.gpus} GPUs, priority {v.priority}, activity {fmt_measure(v.gpu_activity)})"
                for v in decision.victims
            )
            lines.append(
                f"preemptor (priority {decision.preemptor_priority}, "
                f"needs {decision.gpus_requested} GPUs): "
                f"goes to node {decision.node} by evicting {names}; frees {decision.gpus_freed} GPUs, "
                f"{decision.free_gpus_before} were free"
            )
        for victim in decision.victims:
            if victim.pod == key:
                lines.append(
                    f"victim: evicted for {decision.preemptor} (priority {decision.preemptor_priority}) "
                    f"on node {decision.node}"
                )
    for unresolved in plan.unresolved:
        if unresolved.preemptor == key:
            lines.append(f"preemptor unresolved: {unresolved.reason}")
    for verdict in plan.verdicts.get(key, []):
        state = "eligible" if verdict.eligible else "protected"
        lines.append(f"for preemptor {verdict.preemptor}: {state} [{verdict.rule}] {verdict.reason}")
    for warning in plan.warnings:
        if key in warning.pods:
            lines.append(f"warning: PriorityClass {warning.priority_class}: {warning.message}")
    if len(lines) == 1:
        lines.append(_not_considered(plan, obj, gpus))
    return "\n".join(lines)


def _not_considered(plan: Plan, obj: JsonObj, gpus: int | str) -> str:
    if is_finished(obj):
        return "not a victim: the pod has finished"
    if is_terminating(obj):
        return "not a victim: the pod is terminating (its GPUs still count as used until it is gone)"
    if not node_name(obj):
        return (
            "not a preemptor: a preemptor must be Pending with PodScheduled=False reason Unschedulable, "
            f'request GPUs, and have a PriorityClass annotated {RECLAIM_ANNOTATION}: "true"'
        )
    if gpus == 0:
        return "not a victim: holds no GPUs of the configured resources"
    if not plan.decisions and not plan.unresolved and not plan.already_fit:
        return "not a victim: no pending preemptor in this pass"
    return (
        "not a victim: no preemptor in this pass had a strictly higher priority and needed its node "
        "(or the pass recorded verdicts only for chosen nodes; see docs/reclaim.md)"
    )
