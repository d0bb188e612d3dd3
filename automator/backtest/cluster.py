"""What a live pass would have listed at one time, rebuilt from kube-state-metrics series. Pure.

`cluster_at` turns one step's samples (a `Frame`) into Kubernetes-shaped Pods, Nodes and
PodDisruptionBudgets, as `kubectl get -o json` gives them, and hands them to the same record boundary the
snapshot and live readers use; the planner then reads them as it reads a live list. The metrics and labels
are kube-state-metrics' own (docs/metrics/workload/pod-metrics.md, cluster/node-metrics.md,
policy/poddisruptionbudget-metrics.md); resource names come sanitized (nvidia.com/gpu -> nvidia_com_gpu).

Approximations, each one able only to make the backtest evict less than the live service would have:

- PodDisruptionBudget selectors are not in kube-state-metrics: a PDB covers every pod of its namespace.
  Its allowed disruptions are consumed as the planner consumes them, a PDB allowing 0 protects the whole
  namespace, two PDBs in a namespace protect all of its pods (the Eviction API refuses a pod two PDBs
  select), and a simulated eviction keeps consuming its namespace's PDBs until history shows the victim
  ended (history's count does not know about it).
- Tolerations are not read: a node with a NoSchedule or NoExecute taint is taken as untolerated by the
  preemptor (victims already run where they run).
- Node affinity and nodeSelector are not read: a preemptor may only use the nodes on which history shows it,
  or a pod of the same owner (kube_pod_info created_by_kind/created_by_name), bound at some time in the
  window: evidence that its constraints allow them. A preemptor with no such evidence (one that never ran
  and has no sibling that did) may use any untainted node, and the report names it in a warning: this is the
  one approximation that can evict more than the live service; `--strict-placement` makes such a preemptor
  fit no node instead.
- A pod's scheduling time is kube_pod_status_scheduled_time, else kube_pod_start_time (later: the pod looks
  younger, so its guaranteed run time protects it longer); a pod with neither is not yet scheduled
  (protected).
- Pod labels and annotations are known only as far as kube-state-metrics exports them
  (--metric-labels-allowlist, --metric-annotations-allowlist): only the opt-out label and the gang keys
  (GANG_LABELS, GANG_ANNOTATIONS) are read; the report warns when no pod in the window carries the opt-out
  label. Group objects (PodGroups, Workloads) are not exported: a gang needs the members history shows
  (the planner's rule for a gang whose group object is not listed); spec.schedulingGroup and spec.workloadRef
  are not exported either, so gangs of the Workload API are not seen.
- Init containers' requests are not read (kube-state-metrics' init container series are experimental);
  a preemptor's priority and preemptionPolicy come from its PriorityClass, as admission sets them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache
from typing import NamedTuple

from automator.objects.cluster import ClusterState
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.priority_class import PriorityClass, priority_class_records
from automator.objects.resources import rfc3339
from steward_common.conventions import (
    GANG_COSCHEDULING_LABEL,
    GANG_JOBSET_LABEL,
    GANG_KAI_ANNOTATION,
    GANG_KUEUE_COUNT_ANNOTATION,
    GANG_KUEUE_LABEL,
    GANG_LWS_LABEL,
    GANG_LWS_SIZE_ANNOTATION,
    GANG_VOLCANO_ANNOTATION,
    NAMESPACE_LABEL,
    NEVER_RECLAIM_LABEL,
    POD_LABEL,
)

# One step's samples: metric name -> (labels, value) of every series present at that time.
Frame = Mapping[str, Sequence[tuple[Mapping[str, str], float]]]

POD_INFO = "kube_pod_info"
POD_PHASE = "kube_pod_status_phase"
POD_CREATED = "kube_pod_created"
POD_START = "kube_pod_start_time"
POD_SCHEDULED_TIME = "kube_pod_status_scheduled_time"
POD_UNSCHEDULABLE = "kube_pod_status_unschedulable"
POD_DELETION = "kube_pod_deletion_timestamp"
POD_REQUESTS = "kube_pod_container_resource_requests"
POD_LIMITS = "kube_pod_container_resource_limits"
POD_LABELS = "kube_pod_labels"
POD_ANNOTATIONS = "kube_pod_annotations"
NODE_ALLOCATABLE = "kube_node_status_allocatable"
NODE_UNSCHEDULABLE = "kube_node_spec_unschedulable"
NODE_TAINT = "kube_node_spec_taint"
NODE_CONDITION = "kube_node_status_condition"
PDB_ALLOWED = "kube_poddisruptionbudget_status_pod_disruptions_allowed"


def sanitized(name: str) -> str:
    """A resource or label name as kube-state-metrics writes it (nvidia.com/gpu -> nvidia_com_gpu)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


OPT_OUT_LABEL = "label_" + sanitized(NEVER_RECLAIM_LABEL)
# The pod labels and annotations read (kube-state-metrics' allow-lists must name them; docs/backtest.md).
GANG_LABELS = (GANG_COSCHEDULING_LABEL, GANG_KUEUE_LABEL, GANG_LWS_LABEL, GANG_JOBSET_LABEL)
GANG_ANNOTATIONS = (
    GANG_VOLCANO_ANNOTATION,
    GANG_KAI_ANNOTATION,
    GANG_KUEUE_COUNT_ANNOTATION,
    GANG_LWS_SIZE_ANNOTATION,
)
# key as the pod carries it -> its kube-state-metrics label
READ_LABELS = {key: "label_" + sanitized(key) for key in (NEVER_RECLAIM_LABEL, *GANG_LABELS)}
READ_ANNOTATIONS = {key: "annotation_" + sanitized(key) for key in GANG_ANNOTATIONS}


def _carrying(metric: str, labels: Iterable[str]) -> str:
    """The series of `metric` of the pods that carry any of these labels (the only ones read)."""
    return " or ".join(f'{metric}{{{label}!=""}}' for label in labels)


# The query of each metric: state series (one per phase, condition...) keep only the one that holds, so an
# answer carries one series per object.
KSM_QUERIES: dict[str, str] = {
    POD_INFO: POD_INFO,
    POD_PHASE: f"{POD_PHASE} == 1",
    POD_CREATED: POD_CREATED,
    POD_START: POD_START,
    POD_SCHEDULED_TIME: POD_SCHEDULED_TIME,
    POD_UNSCHEDULABLE: f"{POD_UNSCHEDULABLE} == 1",
    POD_DELETION: POD_DELETION,
    POD_REQUESTS: POD_REQUESTS,
    POD_LIMITS: POD_LIMITS,
    POD_LABELS: _carrying(POD_LABELS, READ_LABELS.values()),
    POD_ANNOTATIONS: _carrying(POD_ANNOTATIONS, READ_ANNOTATIONS.values()),
    NODE_ALLOCATABLE: NODE_ALLOCATABLE,
    NODE_UNSCHEDULABLE: f"{NODE_UNSCHEDULABLE} == 1",
    NODE_TAINT: NODE_TAINT,
    NODE_CONDITION: f"{NODE_CONDITION} == 1",
    PDB_ALLOWED: PDB_ALLOWED,
}
# Without these a step has no cluster to plan over: it is counted as a step without data.
REQUIRED = (POD_INFO, NODE_ALLOCATABLE)
NO_OWNER = ("", "<none>")
_FINISHED = ("Succeeded", "Failed")


def has_data(frame: Frame | IndexedFrame) -> bool:
    samples = frame.frame if isinstance(frame, IndexedFrame) else frame
    return all(samples.get(metric) for metric in REQUIRED)


# Times a sample may hold: 1970 to 9999 (beyond, or not finite, it is no time: unknown).
_LAST_TIME = 253_402_300_799


@lru_cache(maxsize=65_536)  # every pod's times, every step: most repeat from step to step
def _time(seconds: float) -> str | None:
    if not 0 <= seconds <= _LAST_TIME:  # also NaN
        return None
    return rfc3339(datetime.fromtimestamp(seconds, tz=UTC))


@lru_cache(maxsize=65_536)  # every container's requests, every step: a cluster repeats a few amounts
def _quantity(value: float) -> str:
    """A sample as a Kubernetes quantity (plain decimal: 8589934592, 0.5)."""
    return f"{Decimal(repr(value)).normalize():f}"


def _key(labels: Mapping[str, str]) -> ObjectKey:
    return ObjectKey(*_pair(labels))


def _pair(labels: Mapping[str, str]) -> tuple[str, str]:
    """A pod's (namespace, name): equal to its ObjectKey, made without the named tuple's constructor (every
    pod sample of every step)."""
    return (str(labels.get(NAMESPACE_LABEL) or "default"), str(labels.get(POD_LABEL) or ""))


@dataclass(frozen=True)
class Overlay:
    """What the simulated service changed in the cluster that history does not show."""

    gone: frozenset[str] = frozenset()  # uids of evicted victims
    placed: Mapping[str, tuple[str, float]] = field(default_factory=dict)  # preemptor uid -> (node, time)
    annotations: Mapping[ObjectKey, Mapping[str, str]] = field(default_factory=dict)  # written on preemptors
    # namespace -> simulated evictions whose victims history still shows running
    pdb_consumed: Mapping[str, int] = field(default_factory=dict)


@dataclass
class Evidence:
    """Where history shows each pod, and each owner's pods, bound during the window."""

    by_pod: dict[str, set[str]] = field(default_factory=dict)  # uid -> nodes
    by_owner: dict[tuple[str, str, str], set[str]] = field(default_factory=dict)  # (ns, kind, name) -> nodes
    strict: bool = False  # a pod with no node in history fits no node (else: any untainted node)
    unplaced: set[ObjectKey] = field(default_factory=set)  # pending pods planned without such evidence

    def add(self, labels: Mapping[str, str]) -> None:
        node = labels.get("node")
        if not node:
            return
        self.by_pod.setdefault(_uid(labels), set()).add(node)
        owner = _owner(labels)
        if owner is not None:
            self.by_owner.setdefault(owner, set()).add(node)

    def nodes_for(self, labels: Mapping[str, str]) -> list[str]:
        owner = _owner(labels)
        found = set(self.by_pod.get(_uid(labels), ()))
        if owner is not None:
            found |= self.by_owner.get(owner, set())
        return sorted(found)


def _uid(labels: Mapping[str, str]) -> str:
    return str(labels.get("uid") or _key(labels))


def _owner(labels: Mapping[str, str]) -> tuple[str, str, str] | None:
    kind, name = labels.get("created_by_kind", ""), labels.get("created_by_name", "")
    if kind in NO_OWNER or name in NO_OWNER:
        return None
    return (_key(labels).namespace, kind, name)


_Entries = list[tuple[Mapping[str, str], float]]


class IndexedFrame:
    """One step's samples indexed by pod once, shared by every policy replayed over the step."""

    def __init__(self, frame: Frame) -> None:
        self.frame = frame
        self._by_pod: dict[str, dict[tuple[str, str], _Entries]] = {}
        self._infos: dict[str, Mapping[str, str]] | None = None
        self._history: dict[str, PodHistory] | None = None
        self._running: dict[tuple[str, ...], set[ObjectKey]] = {}

    def by_pod(self, metric: str) -> dict[tuple[str, str], _Entries]:
        found = self._by_pod.get(metric)
        if found is None:
            found = self._by_pod[metric] = {}
            for labels, value in self.frame.get(metric, ()):
                found.setdefault(_pair(labels), []).append((labels, value))
        return found

    def infos(self) -> dict[str, Mapping[str, str]]:
        """kube_pod_info's labels by uid. Where a pod shows twice (its unbound series still in Prometheus'
        lookback after it was bound, as without staleness markers), the bound one: binding is never undone."""
        if self._infos is None:
            self._infos = {}
            for labels, _ in self.frame.get(POD_INFO, ()):
                uid = _uid(labels)
                if uid not in self._infos or labels.get("node"):
                    self._infos[uid] = labels
        return self._infos

    def history(self) -> dict[str, PodHistory]:
        """Every pod of the step by uid, as history shows it (what outcomes are settled against)."""
        if self._history is None:
            phases, starts = self.by_pod(POD_PHASE), self.by_pod(POD_START)
            self._history = {}
            for uid, labels in self.infos().items():
                pair = _pair(labels)
                phase = phases.get(pair)
                self._history[uid] = PodHistory(
                    ObjectKey(*pair),
                    uid,
                    str(labels.get("node") or ""),
                    str(phase[0][0].get("phase")) if phase else "Unknown",
                    _finite(_first(starts, pair)),
                )
        return self._history

    def running_gpu_pods(self, gpu_resources: Sequence[str]) -> set[ObjectKey]:
        """The pods history shows bound, not finished and requesting GPUs (whatever the simulation did to
        them): the exporter has data for the step if it has some for any of them."""
        names = tuple(gpu_resources)
        found = self._running.get(names)
        if found is None:
            gpu = {sanitized(r) for r in names}
            holding = {
                pair
                for metric in (POD_REQUESTS, POD_LIMITS)
                for labels, value in self.frame.get(metric, ())
                if labels.get("resource") in gpu and value > 0
                for pair in (_pair(labels),)
            }
            found = self._running[names] = {
                pod.key for pod in self.history().values() if pod.running and pod.key in holding
            }
        return found


def indexed(frame: Frame | IndexedFrame) -> IndexedFrame:
    return frame if isinstance(frame, IndexedFrame) else IndexedFrame(frame)


def pods_in_history(frame: Frame | IndexedFrame) -> dict[str, PodHistory]:
    return indexed(frame).history()


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def _first(index: Mapping[tuple[str, str], _Entries], key: tuple[str, str]) -> float | None:
    entries = index.get(key)
    return entries[0][1] if entries else None


def _resources(
    entries: Iterable[tuple[Mapping[str, str], float]], names: Mapping[str, str]
) -> dict[str, dict[str, str]]:
    """container -> {resource: quantity} for the resources the planner reads (GPUs, cpu, memory)."""
    out: dict[str, dict[str, str]] = {}
    for labels, value in entries:
        name = names.get(str(labels.get("resource", "")))
        if name is not None:
            out.setdefault(str(labels.get("container", "")), {})[name] = _quantity(value)
    return out


@dataclass(frozen=True)
class PodHistory:
    """A pod as history shows it at one step (before the simulation's changes)."""

    key: ObjectKey
    uid: str
    node: str
    phase: str
    start_time: float | None

    @property
    def running(self) -> bool:
        return bool(self.node) and self.phase not in _FINISHED


class Objects(NamedTuple):
    """One step's Kubernetes-shaped objects, as `kubectl get -o json` would list them."""

    nodes: list[JsonObj]
    pods: list[JsonObj]
    pdbs: list[JsonObj]


def cluster_at(
    frame: Frame | IndexedFrame,
    priority_classes: Sequence[PriorityClass | JsonObj],
    gpu_resources: Sequence[str],
    overlay: Overlay,
    evidence: Evidence,
) -> ClusterState:
    """The cluster a live pass would have listed at this step, with the simulation's changes (victims gone,
    preemptors placed, reclaim annotations written), decoded by the one decoder of each kind, as every
    reader's objects are."""
    classes = priority_class_records(priority_classes)
    nodes, pods, pdbs = objects_at(frame, classes, gpu_resources, overlay, evidence)
    return ClusterState.from_objects(nodes, pods, classes, pdbs)


def objects_at(
    frame: Frame | IndexedFrame,
    priority_classes: Sequence[PriorityClass | JsonObj],
    gpu_resources: Sequence[str],
    overlay: Overlay,
    evidence: Evidence,
) -> Objects:
    """The objects a live pass would have listed at this step, with the simulation's changes."""
    classes = {pc.name: pc for pc in priority_class_records(priority_classes)}
    names = {sanitized(r): r for r in gpu_resources} | {"cpu": "cpu", "memory": "memory"}
    step = indexed(frame)
    index = {
        m: step.by_pod(m)
        for m in (
            POD_PHASE,
            POD_CREATED,
            POD_START,
            POD_SCHEDULED_TIME,
            POD_UNSCHEDULABLE,
            POD_DELETION,
            POD_REQUESTS,
            POD_LIMITS,
            POD_LABELS,
            POD_ANNOTATIONS,
        )
    }
    pods: list[JsonObj] = []
    for uid, labels in step.infos().items():
        if uid in overlay.gone:
            continue
        pods.append(_pod(labels, uid, index, classes, names, overlay, evidence))
    nodes = _nodes(step.frame, names)
    pdbs = _pdbs(step.frame, overlay)
    return Objects(nodes, pods, pdbs)


def _read(entries: _Entries | None, keys: Mapping[str, str]) -> dict[str, str]:
    """The pod's labels or annotations read, by their own keys, from a kube_pod_labels or
    kube_pod_annotations series (kube-state-metrics writes them as label_<key> and annotation_<key>)."""
    if not entries:
        return {}
    series = entries[0][0]
    return {key: series[name] for key, name in keys.items() if series.get(name)}


def _pod(
    labels: Mapping[str, str],
    uid: str,
    index: Mapping[str, Mapping[tuple[str, str], _Entries]],
    classes: Mapping[str, PriorityClass],
    names: Mapping[str, str],
    overlay: Overlay,
    evidence: Evidence,
) -> JsonObj:
    key = _key(labels)
    node = str(labels.get("node") or "")
    phase_entries = index[POD_PHASE].get(key)
    phase = str(phase_entries[0][0].get("phase")) if phase_entries else "Unknown"
    meta: JsonObj = {"name": key.name, "namespace": key.namespace, "uid": uid}
    created = _first(index[POD_CREATED], key)
    if created is not None and _time(created) is not None:
        meta["creationTimestamp"] = _time(created)
    deleted = _first(index[POD_DELETION], key)
    if deleted is not None:  # an unreadable time still says it is being deleted
        meta["deletionTimestamp"] = _time(deleted) or _time(0)
    read = _read(index[POD_LABELS].get(key), READ_LABELS)
    if read:
        meta["labels"] = read
    annotations = _read(index[POD_ANNOTATIONS].get(key), READ_ANNOTATIONS)
    if key in overlay.annotations:
        annotations.update(overlay.annotations[key])
    if annotations:
        meta["annotations"] = annotations
    requests = _resources(index[POD_REQUESTS].get(key, ()), names)
    limits = _resources(index[POD_LIMITS].get(key, ()), names)
    containers = [
        {"name": c, "resources": {"requests": requests.get(c, {}), "limits": limits.get(c, {})}}
        for c in sorted(set(requests) | set(limits))
    ]
    spec: JsonObj = {"containers": containers}
    class_name = labels.get("priority_class")
    if class_name:
        spec["priorityClassName"] = class_name
        pc = classes.get(class_name)
        if pc is not None and pc.value_error is None:  # as admission sets it from the class
            spec["priority"] = pc.value
    scheduled_time = _first(index[POD_SCHEDULED_TIME], key)
    if scheduled_time is None:
        scheduled_time = _first(index[POD_START], key)
    conditions: list[JsonObj] = []
    placed = overlay.placed.get(uid)
    if placed is not None and phase not in _FINISHED:  # once history shows it finished, it is
        node, phase, scheduled_time = placed[0], "Running", placed[1]
    if node:
        spec["nodeName"] = node
        condition: JsonObj = {"type": "PodScheduled", "status": "True"}
        if scheduled_time is not None and _time(scheduled_time) is not None:
            condition["lastTransitionTime"] = _time(scheduled_time)  # else unknown: not yet scheduled
        conditions.append(condition)
    else:
        if key in index[POD_UNSCHEDULABLE]:
            conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable"})
        # Unknown affinity: only the nodes history shows it (or its owner's pods) bound on, if it shows any.
        nodes = evidence.nodes_for(labels)
        if nodes or evidence.strict:
            term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": nodes}]}
            required = {"nodeSelectorTerms": [term]}
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
        else:
            evidence.unplaced.add(key)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions},
    }


def _nodes(frame: Frame, names: Mapping[str, str]) -> list[JsonObj]:
    nodes: dict[str, JsonObj] = {}

    def node(labels: Mapping[str, str]) -> JsonObj:
        name = str(labels.get("node") or "")
        return nodes.setdefault(
            name,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name},
                "spec": {},
                "status": {"allocatable": {}, "conditions": []},
            },
        )

    for labels, value in frame.get(NODE_ALLOCATABLE, ()):
        resource = names.get(str(labels.get("resource", "")))
        if resource is not None:
            node(labels)["status"]["allocatable"][resource] = _quantity(value)
    for labels, _ in frame.get(NODE_UNSCHEDULABLE, ()):
        if labels.get("node") in nodes:
            node(labels)["spec"]["unschedulable"] = True
    for labels, _ in frame.get(NODE_TAINT, ()):
        if labels.get("node") in nodes:
            taint = {k: labels[k] for k in ("key", "value", "effect") if labels.get(k)}
            node(labels)["spec"].setdefault("taints", []).append(taint)
    for labels, _ in frame.get(NODE_CONDITION, ()):
        if labels.get("node") in nodes:
            status = str(labels.get("status", "")).capitalize()
            node(labels)["status"]["conditions"].append({"type": labels.get("condition"), "status": status})
    return list(nodes.values())


def _pdbs(frame: Frame, overlay: Overlay) -> list[JsonObj]:
    """One per namespace and name (two kube-state-metrics replicas give each twice; the lower count)."""
    pdbs: dict[tuple[str, str], JsonObj] = {}
    for labels, value in frame.get(PDB_ALLOWED, ()):
        ns = str(labels.get(NAMESPACE_LABEL) or "default")
        name = str(labels.get("poddisruptionbudget", ""))
        allowed = int(value) if value == value and abs(value) < 2**31 else 0  # NaN or absurd: none allowed
        allowed = max(0, allowed - overlay.pdb_consumed.get(ns, 0))
        known = pdbs.get((ns, name))
        if known is not None and known["status"]["disruptionsAllowed"] <= allowed:
            continue
        pdbs[(ns, name)] = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {}},  # selectors are not in kube-state-metrics: the whole namespace
            "status": {"disruptionsAllowed": allowed},
        }
    return list(pdbs.values())
