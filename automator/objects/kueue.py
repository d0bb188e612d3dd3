"""Kueue's objects as read (pure): Workloads, ClusterQueues and LocalQueues of `kueue.x-k8s.io` (v1beta2, and
v1beta1 where only that is served), and the batch/v1 Jobs that tie a Workload's job to its pods.

They are records here, beside the other kinds, because both readers of the cluster decode them: the
Kubernetes adapter (automator/kube/) and the cluster file (reclaim/snapshot.py), and both sit below the
Kueue decisions (automator/kueue/). A field that does not parse ends the object's reading: its record
carries the error (the decisions leave such a Workload alone and say why; the cluster file refuses it).
docs/kueue.md states what is read and why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import msgspec

from automator.objects.fields import EMPTY, item, list_field, map_field
from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod, pod_record
from automator.objects.resources import CPU_AND_MEMORY, FieldError, FieldProblem, parse_time, whole

KUEUE_GROUP = "kueue.x-k8s.io"
# The versions read, newest first: the adapter lists the first one the cluster serves.
KUEUE_VERSIONS: tuple[str, ...] = ("v1beta2", "v1beta1")
# (plural, kind, namespaced) of the kinds read.
KUEUE_KINDS: tuple[tuple[str, str, bool], ...] = (
    ("workloads", "Workload", True),
    ("clusterqueues", "ClusterQueue", False),
    ("localqueues", "LocalQueue", True),
)
# A Workload's job, when its ownerReference is not there (Kueue labels every Workload with it).
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


class Owner(msgspec.Struct, frozen=True):
    kind: str
    name: str
    uid: str


class PodSet(msgspec.Struct, frozen=True):
    """One `spec.podSets[]` entry: its pod count and its template read as a Pod (the scheduler's request
    formula is the Pod record's)."""

    name: str
    count: int
    template: Pod


class KueueWorkload(msgspec.Struct, frozen=True):
    """A Kueue Workload as read. counts: every resource but cpu and memory, in whole devices."""

    key: ObjectKey
    uid: str = ""
    api_version: str = f"{KUEUE_GROUP}/v1beta2"
    created: datetime | None = None
    labels: Mapping[str, Any] = {}
    annotations: Mapping[str, Any] = {}
    owners: tuple[Owner, ...] = ()
    queue_name: str = ""
    priority: int = 0  # spec.priority (0 when absent, as Kueue reads it)
    active: bool = True  # spec.active (default true)
    quota_reserved: bool = False
    admitted: bool = False
    evicted: bool = False
    finished: bool = False
    cluster_queue: str = ""  # status.admission.clusterQueue
    pod_sets: tuple[PodSet, ...] = ()
    requested: Mapping[str, int] | None = None  # status.resourceRequests summed over pod sets, when present
    assigned: Mapping[str, int] | None = None  # status.admission.podSetAssignments[].resourceUsage summed
    error: FieldProblem | None = None  # the first field that did not parse: the Workload is left alone

    @property
    def job_uids(self) -> frozenset[str]:
        """The uids its job is known by: its ownerReferences and its job-uid label."""
        uids = {o.uid for o in self.owners if o.uid}
        label = self.labels.get(JOB_UID_LABEL)
        if isinstance(label, str) and label:
            uids.add(label)
        return frozenset(uids)

    def gpus(self, gpu_resources: Iterable[str]) -> int:
        """Its GPU need: status.resourceRequests where present, else the sum over podSets of count times
        the template's GPU requests (FieldError when a template's requests do not parse)."""
        names = tuple(gpu_resources)
        if self.requested is not None:
            return sum(self.requested.get(n, 0) for n in names)
        return sum(ps.count * ps.template.requests(names).gpus for ps in self.pod_sets)

    def quota_gpus(self, gpu_resources: Iterable[str]) -> int:
        """The GPU quota it holds once admitted: its admission's resource usage, else its need."""
        if self.assigned is not None:
            return sum(self.assigned.get(n, 0) for n in tuple(gpu_resources))
        return self.gpus(gpu_resources)


class ClusterQueue(msgspec.Struct, frozen=True):
    name: str
    cohort: str = ""  # spec.cohortName (v1beta1: spec.cohort)
    within_cluster_queue: str = "Never"  # spec.preemption.withinClusterQueue
    reclaim_within_cohort: str = "Never"  # spec.preemption.reclaimWithinCohort
    nominal: Mapping[str, int] = {}  # nominal quota per resource, summed over groups and flavors
    used: Mapping[str, int] = {}  # status.flavorsUsage[].resources[].total, summed over flavors
    error: FieldProblem | None = None


class LocalQueue(msgspec.Struct, frozen=True):
    key: ObjectKey
    cluster_queue: str = ""
    error: FieldProblem | None = None


class Job(msgspec.Struct, frozen=True):
    """A batch/v1 Job: its uid and who owns it (a JobSet's Jobs are owned by the JobSet)."""

    key: ObjectKey
    uid: str = ""
    owner_uids: tuple[str, ...] = ()


class KueueObjects(msgspec.Struct, frozen=True):
    """What one listing read of Kueue; `served` says whether the cluster (or the file) has Kueue at all."""

    workloads: tuple[KueueWorkload, ...] = ()
    cluster_queues: tuple[ClusterQueue, ...] = ()
    local_queues: tuple[LocalQueue, ...] = ()
    jobs: tuple[Job, ...] = ()
    served: bool = False


NO_KUEUE = KueueObjects()


# --- decoding -------------------------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else EMPTY


def _key(meta: Mapping[str, Any]) -> ObjectKey:
    return ObjectKey(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def _text(value: Any, path: str) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise FieldError(path, f"expected a string, got {type(value).__name__}")
    return value


def _strings(value: Any, path: str) -> Mapping[str, Any]:
    """labels or annotations: a map (of anything: only the keys read are checked)."""
    if value is None:
        return EMPTY
    if not isinstance(value, Mapping):
        raise FieldError(path, f"expected a map, got {type(value).__name__}")
    return value


def _counts(value: Any, path: str, into: dict[str, int]) -> None:
    """Add a resource map's devices (every resource but cpu and memory) into `into`."""
    for name, amount in _strings(value, path).items():
        if name in CPU_AND_MEMORY:
            continue
        into[str(name)] = into.get(str(name), 0) + whole(amount, f"{path}.{name}")


def _owners(meta: Mapping[str, Any]) -> tuple[Owner, ...]:
    owners: list[Owner] = []
    for i, ref in enumerate(list_field(meta, "ownerReferences", "metadata.")):
        try:
            ref = item(ref)
            owners.append(
                Owner(
                    _text(ref.get("kind"), "kind"),
                    _text(ref.get("name"), "name"),
                    _text(ref.get("uid"), "uid"),
                )
            )
        except FieldError as exc:
            raise exc.found.under(f"metadata.ownerReferences[{i}].").error() from None
    return tuple(owners)


def _condition_true(conditions: list[Any], kind: str) -> bool:
    for i, condition in enumerate(conditions):
        try:
            condition = item(condition)
        except FieldError as exc:
            raise exc.found.under(f"status.conditions[{i}]").error() from None
        if condition.get("type") == kind:
            return condition.get("status") == "True"
    return False


def _bool(value: Any, path: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise FieldError(path, f"{value!r} is not true or false")
    return value


def _int32(value: Any, path: str, low: int = -(2**31), default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 2**31:
        raise FieldError(path, f"{value!r} is not a 32-bit integer" + (" >= 0" if low == 0 else ""))
    return value


def _pod_sets(spec: Mapping[str, Any]) -> tuple[PodSet, ...]:
    sets: list[PodSet] = []
    for i, raw in enumerate(list_field(spec, "podSets", "spec.")):
        where = f"spec.podSets[{i}]"
        try:
            entry = item(raw)
            template = map_field(entry, "template")
            count = _int32(entry.get("count"), "count", low=0, default=1)
        except FieldError as exc:
            raise exc.found.under(f"{where}.").error() from None
        pod = pod_record({"metadata": {"name": f"podset-{i}"}, "spec": template.get("spec") or {}})
        problem = pod.requests_error or pod.shape_error
        if problem is not None:
            raise problem.under(f"{where}.template.").error()
        sets.append(PodSet(str(entry.get("name") or "main"), count, pod))
    return tuple(sets)


def _requested(status: Mapping[str, Any]) -> dict[str, int] | None:
    value = status.get("resourceRequests")
    if not value:
        return None
    entries = value if isinstance(value, list) else [value]
    total: dict[str, int] = {}
    for i, raw in enumerate(entries):
        try:
            _counts(item(raw).get("resources"), "resources", total)
        except FieldError as exc:
            raise exc.found.under(f"status.resourceRequests[{i}].").error() from None
    return total


def _assigned(admission: Mapping[str, Any]) -> dict[str, int] | None:
    assignments = list_field(admission, "podSetAssignments", "status.admission.")
    if not assignments:
        return None
    total: dict[str, int] = {}
    for i, raw in enumerate(assignments):
        try:
            _counts(item(raw).get("resourceUsage"), "resourceUsage", total)
        except FieldError as exc:
            raise exc.found.under(f"status.admission.podSetAssignments[{i}].").error() from None
    return total


def kueue_workload(obj: Mapping[str, Any]) -> KueueWorkload:
    """The record of one Workload (either version)."""
    meta = _meta(obj)
    key = _key(meta)
    api_version = str(obj.get("apiVersion") or f"{KUEUE_GROUP}/v1beta2")
    fields: dict[str, Any] = {}
    try:
        fields["uid"] = _text(meta.get("uid"), "metadata.uid")
        fields["labels"] = _strings(meta.get("labels"), "metadata.labels")
        fields["annotations"] = _strings(meta.get("annotations"), "metadata.annotations")
        if meta.get("creationTimestamp") is not None:
            fields["created"] = parse_time(meta["creationTimestamp"], "metadata.creationTimestamp")
        fields["owners"] = _owners(meta)
        spec = map_field(obj, "spec")
        fields["queue_name"] = _text(spec.get("queueName"), "spec.queueName")
        fields["priority"] = _int32(spec.get("priority"), "spec.priority")
        fields["active"] = _bool(spec.get("active"), "spec.active", True)
        fields["pod_sets"] = _pod_sets(spec)
        status = map_field(obj, "status")
        conditions = list_field(status, "conditions", "status.")
        for name, kind in (
            ("quota_reserved", "QuotaReserved"),
            ("admitted", "Admitted"),
            ("evicted", "Evicted"),
            ("finished", "Finished"),
        ):
            fields[name] = _condition_true(conditions, kind)
        admission = map_field(status, "admission", "status.")
        fields["cluster_queue"] = _text(admission.get("clusterQueue"), "status.admission.clusterQueue")
        fields["requested"] = _requested(status)
        fields["assigned"] = _assigned(admission)
    except FieldError as exc:
        fields["error"] = exc.found
    return KueueWorkload(key, api_version=api_version, **fields)


def _flavor_sums(groups: list[Any], path: str, key: str, into: dict[str, int]) -> None:
    """Σ over flavors of `resources[].<key>` (nominalQuota, or a usage's total) per resource name."""
    for i, raw in enumerate(groups):
        entry = item(raw)
        for j, flavor in enumerate(list_field(entry, "flavors") if "flavors" in entry else [entry]):
            where = f"{path}[{i}]" + (f".flavors[{j}]" if "flavors" in entry else "")
            try:
                for k, resource in enumerate(list_field(item(flavor), "resources")):
                    resource = item(resource)
                    name = str(resource.get("name") or "")
                    if name and name not in CPU_AND_MEMORY and resource.get(key) is not None:
                        into[name] = into.get(name, 0) + whole(resource[key], f"resources[{k}].{key}")
            except FieldError as exc:
                raise exc.found.under(f"{where}.").error() from None


def cluster_queue(obj: Mapping[str, Any]) -> ClusterQueue:
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    fields: dict[str, Any] = {}
    try:
        spec = map_field(obj, "spec")
        cohort = spec.get("cohortName") if "cohortName" in spec else spec.get("cohort")
        fields["cohort"] = _text(cohort, "spec.cohortName")
        preemption = map_field(spec, "preemption", "spec.")
        fields["within_cluster_queue"] = (
            _text(preemption.get("withinClusterQueue"), "spec.preemption.withinClusterQueue") or "Never"
        )
        fields["reclaim_within_cohort"] = (
            _text(preemption.get("reclaimWithinCohort"), "spec.preemption.reclaimWithinCohort") or "Never"
        )
        nominal: dict[str, int] = {}
        _flavor_sums(
            list_field(spec, "resourceGroups", "spec."), "spec.resourceGroups", "nominalQuota", nominal
        )
        used: dict[str, int] = {}
        status = map_field(obj, "status")
        _flavor_sums(list_field(status, "flavorsUsage", "status."), "status.flavorsUsage", "total", used)
        fields["nominal"], fields["used"] = nominal, used
    except FieldError as exc:
        fields["error"] = exc.found
    return ClusterQueue(name, **fields)


def local_queue(obj: Mapping[str, Any]) -> LocalQueue:
    meta = _meta(obj)
    try:
        target = _text(map_field(obj, "spec").get("clusterQueue"), "spec.clusterQueue")
    except FieldError as exc:
        return LocalQueue(_key(meta), error=exc.found)
    return LocalQueue(_key(meta), target)


def job_record(obj: Mapping[str, Any]) -> Job:
    meta = _meta(obj)
    try:
        owners = tuple(o.uid for o in _owners(meta) if o.uid)
    except FieldError:
        owners = ()  # an owner we cannot read ties no pod to a Workload: its pods are simply not found
    return Job(_key(meta), str(meta.get("uid") or ""), owners)


def kueue_record(obj: Mapping[str, Any]) -> KueueWorkload | ClusterQueue | LocalQueue | Job | None:
    """The record of a Kueue object or a batch Job (by apiVersion and kind); None for other kinds."""
    api_version, kind = str(obj.get("apiVersion") or ""), obj.get("kind")
    if api_version == "batch/v1" and kind == "Job":
        return job_record(obj)
    if api_version.rpartition("/")[0] != KUEUE_GROUP:
        return None
    if kind == "Workload":
        return kueue_workload(obj)
    if kind == "ClusterQueue":
        return cluster_queue(obj)
    if kind == "LocalQueue":
        return local_queue(obj)
    return None


def kueue_objects(records: Iterable[Any], served: bool = True) -> KueueObjects:
    """The records sorted by kind into one listing."""
    kinds: dict[type, list[Any]] = {KueueWorkload: [], ClusterQueue: [], LocalQueue: [], Job: []}
    for record in records:
        kinds[type(record)].append(record)
    return KueueObjects(
        tuple(kinds[KueueWorkload]),
        tuple(kinds[ClusterQueue]),
        tuple(kinds[LocalQueue]),
        tuple(kinds[Job]),
        served,
    )
