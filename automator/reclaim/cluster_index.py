"""Stage 1 of a plan: index one cluster snapshot for the search (pure, read once per pass).

Nodes with their allocatable and used resources and their candidate victims (bound, running, not terminating,
holding GPUs, each assessed once against rules 0 and 2-8), the pending preemptors in the order they are
served, the PodDisruptionBudgets and the warnings about malformed PriorityClass annotations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from automator.objects.cluster import ClusterState
from automator.objects.gang import GangWarning
from automator.objects.keys import ObjectKey
from automator.objects.node import Node
from automator.objects.pod import NOT_CREATED, Pod, created_at, pod_priority
from automator.objects.priority_class import PriorityClass, find_global_default
from automator.objects.resources import FieldError, Requests
from automator.reclaim.annotations import NO_NOTICE, NoticeMarks, read_notice
from automator.reclaim.class_settings import ClassSettings, class_settings
from automator.reclaim.eligibility import (
    NEVER,
    Assessment,
    PdbIndex,
    Rule,
    assess,
    deferral,
    scope_verdict,
)
from automator.reclaim.gangs import Gang, resolve_gangs
from automator.reclaim.model import AnnotationWarning, PlannerConfig, PodUsage, PodWarning, UsageWindow
from steward_common.conventions import RECLAIM_ANNOTATION

# PDBs covering a pod (read only: shared by the pods of a workload), why they protect it, its scope verdict
_Standing = tuple[list[tuple[str, str]], str | None, tuple[Rule, str] | None]


@dataclass(slots=True)
class Candidate:
    """A pod that may be evicted, with what the search and the report need of it."""

    key: ObjectKey
    pod: Pod
    node: str
    req: Requests
    priority: int
    scheduled: datetime | None
    age: float  # seconds since scheduled (0 when unknown): run time an eviction throws away
    assessment: Assessment
    pdbs: list[tuple[str, str]]
    usage: PodUsage | None
    # the lowest preemptor priority it is a victim for: above its own priority and eligible_from (one
    # comparison where the search and the rankings sort every candidate for every preemptor priority)
    floor: int
    unit: Unit | None = None  # its victim gang: evicted with it or not at all
    notice: NoticeMarks = NO_NOTICE  # the notice it carries (docs/reclaim.md, "Notice")


@dataclass(slots=True, eq=False)
class Unit:
    """A victim gang: its bound, non-terminating GPU-holding members, evicted together or not at all."""

    gang: Gang
    members: list[Candidate]  # in name order, on whichever nodes they run
    # the lowest preemptor priority every member is a victim for (NEVER for a malformed gang)
    floor: int


@dataclass(slots=True)
class NodeState:
    name: str
    node: Node
    alloc: Requests
    error: str | None = None
    used_gpus: int = 0
    used_cpu: int = 0
    used_mem: int = 0
    candidates: list[Candidate] = field(default_factory=list)
    version: int = 0  # bumped by every decision on the node: cached search results are then stale
    has_units: bool = False  # some candidate is a member of a victim gang

    def free(self) -> tuple[int, int, int]:
        """(GPUs, CPU millicores, memory bytes) not taken."""
        return (
            self.alloc.gpus - self.used_gpus,
            self.alloc.cpu_m - self.used_cpu,
            self.alloc.memory - self.used_mem,
        )

    def shortfall(self, req: Requests) -> tuple[int, int, int] | None:
        """The fit check: None when the requests fit the node as it is, else what it lacks (GPUs, cpu
        millicores, memory bytes still needed; an amount it has enough of is <= 0)."""
        alloc = self.alloc
        gpus, cpu = req.gpus - alloc.gpus + self.used_gpus, req.cpu_m - alloc.cpu_m + self.used_cpu
        memory = req.memory - alloc.memory + self.used_mem
        return None if gpus <= 0 and cpu <= 0 and memory <= 0 else (gpus, cpu, memory)

    def take(self, req: Requests, sign: int = 1) -> None:
        self.used_gpus += sign * req.gpus
        self.used_cpu += sign * req.cpu_m
        self.used_mem += sign * req.memory


@dataclass(slots=True)
class Preemptor:
    key: ObjectKey
    pod: Pod
    priority: int
    created: datetime
    req: Requests | None
    error: str | None
    gang: Gang | None = None


def classes_by_name(priority_classes: list[PriorityClass]) -> dict[str, PriorityClass]:
    return {pc.name: pc for pc in priority_classes}


def is_reclaim_class(pc: PriorityClass | None) -> bool:
    """The opt-in value is exactly "true" (not "TRUE", not " true")."""
    return pc is not None and pc.annotations.get(RECLAIM_ANNOTATION) == "true"


def reclaim_annotation_warnings(priority_classes: list[PriorityClass]) -> list[AnnotationWarning]:
    """A warning for every class whose opt-in annotation is neither "true" nor "false" (no opt-in)."""
    warnings: list[AnnotationWarning] = []
    for pc in sorted(priority_classes, key=lambda pc: pc.name):
        ann = pc.annotations
        if RECLAIM_ANNOTATION in ann and ann[RECLAIM_ANNOTATION] not in ("true", "false"):
            value = ann[RECLAIM_ANNOTATION]
            message = (
                f'{RECLAIM_ANNOTATION}: {value!r} is neither "true" nor "false": '
                "the class does not opt in to reclaim"
            )
            warnings.append(AnnotationWarning(pc.name, RECLAIM_ANNOTATION, str(value), message, ()))
    return warnings


class SettingsCache:
    """ClassSettings per PriorityClass name, parsed once."""

    def __init__(self, classes: Mapping[str, PriorityClass], config: PlannerConfig) -> None:
        self.classes = classes
        self.config = config
        self.cache: dict[str | None, ClassSettings] = {}

    def named(self, class_name: str | None) -> tuple[str | None, ClassSettings]:
        """The settings of a pod's spec.priorityClassName: the defaults when no such class is listed."""
        name = class_name if class_name in self.classes else None
        cached = self.cache.get(name)
        if cached is None:
            cached = self.cache[name] = class_settings(self.classes[name] if name else None, self.config)
        return name, cached


def is_victim_candidate(pod: Pod) -> bool:
    return bool(pod.node_name) and not pod.finished and not pod.terminating


def usage_windows(cluster: ClusterState, config: PlannerConfig) -> dict[ObjectKey, UsageWindow]:
    """The usage window every GPU-holding bound pod (potential victim) needs, from its PriorityClass's
    annotations."""
    settings = SettingsCache(classes_by_name(cluster.priority_classes), config)
    windows: dict[ObjectKey, UsageWindow] = {}
    for pod in cluster.pods:
        if not is_victim_candidate(pod):
            continue
        try:
            gpus = pod.requests(config.gpu_resources).gpus
        except FieldError:
            continue  # protected anyway; no query needed
        if gpus > 0:
            windows[pod.key] = settings.named(pod.class_name)[1].window
    return windows


@dataclass
class ClusterIndex:
    """What one pass plans over; the plan loop mutates nodes and pdbs as it decides."""

    nodes: dict[str, NodeState]
    preemptors: list[Preemptor]
    pdbs: PdbIndex
    warnings: list[AnnotationWarning]
    # Pods that still exist with a deletionTimestamp (a preemptor's victims still terminating: cooldown).
    terminating: frozenset[ObjectKey] = frozenset()
    candidates: int = 0
    candidates_usage_unknown: int = 0
    gang_warnings: list[GangWarning] = field(default_factory=list)
    # per gang, its bound members that are not terminating (they count towards what it needs)
    gang_running: dict[Gang, int] = field(default_factory=dict)
    # Notice: per target (preemptor or gang) the nodes of the candidates under a readable notice for it, the
    # candidates carrying notice annotations (readable or not), owners' annotations ignored.
    noticed_nodes: dict[str, set[str]] = field(default_factory=dict)
    noticed: list[Candidate] = field(default_factory=list)
    pod_warnings: list[PodWarning] = field(default_factory=list)


@dataclass
class _Builder:
    cluster: ClusterState
    usage: Mapping[ObjectKey, PodUsage]
    config: PlannerConfig
    now: datetime
    classes: dict[str, PriorityClass] = field(default_factory=dict)
    global_default: PriorityClass | None = None
    pdbs: PdbIndex = field(default_factory=PdbIndex)
    nodes: dict[str, NodeState] = field(default_factory=dict)
    preemptors: list[Preemptor] = field(default_factory=list)
    class_pods: dict[str, list[ObjectKey]] = field(default_factory=dict)
    # (namespace, label items) -> PDBs covering, PDB protection reason, scope verdict
    standing_cache: dict[tuple[str, tuple[Any, ...]], _Standing] = field(default_factory=dict)
    terminating: set[ObjectKey] = field(default_factory=set)
    candidates: int = 0
    unknown: int = 0
    gpu_resources: tuple[str, ...] = ()
    gangs: dict[ObjectKey, Gang] = field(default_factory=dict)
    gang_running: dict[Gang, int] = field(default_factory=dict)
    noticed: list[Candidate] = field(default_factory=list)
    pod_warnings: list[PodWarning] = field(default_factory=list)

    def build(self) -> ClusterIndex:
        self.gpu_resources = tuple(self.config.gpu_resources)
        self.gangs, gang_warnings = resolve_gangs(self.cluster.pods, self.cluster.groups)
        self.classes = classes_by_name(self.cluster.priority_classes)
        self.global_default = find_global_default(self.cluster.priority_classes)
        self.pdbs = PdbIndex.build(self.cluster.pdbs)
        self._nodes()
        settings = SettingsCache(self.classes, self.config)
        self._pods(settings)
        if self.gangs:
            self._units()
        self.preemptors.sort(key=lambda p: (-p.priority, p.created, p.key))
        return ClusterIndex(
            self.nodes,
            self.preemptors,
            self.pdbs,
            reclaim_annotation_warnings(self.cluster.priority_classes) + self._warnings(settings),
            frozenset(self.terminating),
            self.candidates,
            self.unknown,
            gang_warnings,
            self.gang_running,
            _noticed_nodes(self.noticed),
            self.noticed,
            self.pod_warnings,
        )

    def _units(self) -> None:
        """Each victim gang's members made one unit: eligible for a preemptor only when every member is."""
        members: dict[Gang, list[Candidate]] = {}
        for node in self.nodes.values():
            for candidate in node.candidates:
                gang = self.gangs.get(candidate.key)
                if gang is not None:
                    members.setdefault(gang, []).append(candidate)
        for gang, pods in members.items():
            pods.sort(key=lambda c: c.key)
            floor = NEVER if gang.needed is None else max(c.floor for c in pods)
            unit = Unit(gang, pods, floor)
            for candidate in pods:
                candidate.unit = unit
                self.nodes[candidate.node].has_units = True

    def _nodes(self) -> None:
        for node in sorted(self.cluster.nodes, key=lambda n: n.name):
            name = node.name
            try:
                self.nodes[name] = NodeState(name, node, node.offers(self.config.gpu_resources))
            except FieldError as exc:
                self.nodes[name] = NodeState(name, node, Requests(0, 0, 0), error=f"Node {name}: {exc}")

    def _pods(self, settings: SettingsCache) -> None:
        """Every pod: bound pods take their requests on their node and GPU holders become candidates;
        unbound ones may be preemptors."""
        nodes, names, terminating = self.nodes, self.gpu_resources, self.terminating
        for pod in self.cluster.pods:
            if pod.terminating:
                terminating.add(pod.key)
            if pod.finished:
                continue
            if not pod.node_name:
                if (
                    pod.unschedulable
                    and pod.class_name
                    and is_reclaim_class(self.classes.get(pod.class_name))
                ):
                    self._preemptor(pod)
                continue
            if not pod.terminating and pod.key in self.gangs:
                gang = self.gangs[pod.key]
                self.gang_running[gang] = self.gang_running.get(gang, 0) + 1
            node = nodes.get(pod.node_name)
            if node is None:
                continue  # bound to a node we do not know: nothing to plan there
            try:
                req = pod.requests(names)
            except FieldError as exc:
                # Unknown usage of the node: fail safe, plan nothing there.
                node.error = f"Pod {pod.key}: {exc}"
                continue
            node.take(req)
            if req.gpus and not pod.terminating:
                candidate = self._candidate(pod, node.name, req, settings)
                node.candidates.append(candidate)
                notice = read_notice(pod.annotations)
                if notice.present:
                    candidate.notice = notice
                    self.noticed.append(candidate)

    def _candidate(self, pod: Pod, bound: str, req: Requests, settings: SettingsCache) -> Candidate:
        """A GPU holder assessed."""
        key = pod.key
        class_name, pod_settings = settings.named(pod.class_name)
        if pod_settings.malformed and class_name is not None:  # only _warnings reads them
            self.class_pods.setdefault(class_name, []).append(key)
        usage = self.usage.get(key)
        self.candidates += 1
        if usage is None or usage.gpu_activity is None:
            self.unknown += 1
        standing = self._standing(pod)
        try:
            priority = pod_priority(pod, self.classes, self.global_default)
            if pod.scheduled_error is not None:
                raise pod.scheduled_error.error()
        except FieldError as exc:
            # A victim we cannot read is protected; priority 0 keeps it out of nothing but harms no one.
            why = f"Pod {key}: {exc}: protected"
            blocked = Assessment((Rule.RESOURCES_MALFORMED, why), None, False, Rule.RESOURCES_MALFORMED, "")
            return Candidate(key, pod, bound, req, 0, None, 0.0, blocked, standing[0], usage, NEVER)
        scheduled = pod.scheduled
        since = (self.now - scheduled).total_seconds() if scheduled is not None else None
        deferred, warning = deferral(pod, self.now, self.config)
        if warning is not None:
            self.pod_warnings.append(warning)
        assessment = assess(pod_settings, usage, since, self.config, standing[1], standing[2], deferred)
        age = max(0.0, since) if since is not None else 0.0
        floor = max(priority + 1, assessment.eligible_from)
        pdb_ids = standing[0]
        return Candidate(key, pod, bound, req, priority, scheduled, age, assessment, pdb_ids, usage, floor)

    def _standing(self, pod: Pod) -> _Standing:
        """PdbIndex.covering and scope_verdict, once per namespace and labels (pods of one workload share
        them); not cached for a pod with an unhashable label value."""
        try:
            key = (pod.key.namespace, tuple(pod.labels.items()))
            known = self.standing_cache.get(key)
        except TypeError:
            return (*self.pdbs.covering(pod), scope_verdict(pod, self.config))
        if known is None:
            known = self.standing_cache[key] = (*self.pdbs.covering(pod), scope_verdict(pod, self.config))
        return known

    def _preemptor(self, pod: Pod) -> None:
        error: str | None = None
        req: Requests | None = None
        priority = 0
        created = NOT_CREATED
        try:
            priority = pod_priority(pod, self.classes, self.global_default)
            created = created_at(pod)
            req = pod.requests(self.config.gpu_resources)
        except FieldError as exc:
            error = f"malformed pod: {exc}"
        if req is not None and req.gpus == 0:
            return  # not a GPU pod: not ours to help
        gang = self.gangs.get(pod.key)
        self.preemptors.append(Preemptor(pod.key, pod, priority, created, req, error, gang))

    def _warnings(self, settings: SettingsCache) -> list[AnnotationWarning]:
        warnings: list[AnnotationWarning] = []
        for class_name, pod_settings in sorted(settings.cache.items(), key=lambda kv: str(kv[0])):
            for bad in pod_settings.malformed:
                pods = tuple(sorted(self.class_pods.get(class_name or "", [])))
                message = bad.message + "; its pods are protected"
                warnings.append(replace(bad, priority_class=str(class_name), message=message, pods=pods))
        return warnings


def _noticed_nodes(noticed: list[Candidate]) -> dict[str, set[str]]:
    nodes: dict[str, set[str]] = {}
    for candidate in noticed:
        target = candidate.notice.target
        if isinstance(target, str) and candidate.notice.problem is None:
            nodes.setdefault(target, set()).add(candidate.node)
    return nodes


def index_cluster(
    cluster: ClusterState, usage: Mapping[ObjectKey, PodUsage], config: PlannerConfig, now: datetime
) -> ClusterIndex:
    """Index a snapshot for one pass (nodes in name order, preemptors by priority then age)."""
    return _Builder(cluster, usage, config, now).build()
