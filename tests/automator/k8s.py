"""The one set of Kubernetes object builders of the automator tests, as `kubectl get -o json` writes them
(camelCase), with times relative to NOW."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from automator.objects.cluster import ClusterState
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.resources import rfc3339
from automator.reclaim.model import PodUsage
from steward_common.conventions import DEFAULT_GPU_RESOURCE, PLUGIN_PREFIX, RECLAIM_ANNOTATION

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
GPU = DEFAULT_GPU_RESOURCE
ts = rfc3339


def ago(seconds: float) -> str:
    return ts(NOW - timedelta(seconds=seconds))


def node(
    name: str,
    gpus: int = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    ready: str | None = "True",
) -> JsonObj:
    obj: JsonObj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {},
        "status": {"allocatable": {GPU: str(gpus), "cpu": cpu, "memory": memory, "pods": "110"}},
    }
    if taints:
        obj["spec"]["taints"] = taints
    if unschedulable:
        obj["spec"]["unschedulable"] = True
    if ready is not None:
        obj["status"]["conditions"] = [{"type": "Ready", "status": ready}]
    return obj


def pod(
    name: str,
    gpus: int | str = 1,
    node_name: str | None = None,
    namespace: str = "ml",
    priority: int | None = 100,
    priority_class: str | None = None,
    scheduled_ago: float | None = 7200,
    created_ago: float = 7200,
    cpu: str | None = None,
    memory: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str | None = None,
    terminating: bool = False,
    **spec_extra: Any,
) -> JsonObj:
    """A running pod on node_name, or (node_name None) a pending Unschedulable pod."""
    limits: dict[str, Any] = {GPU: gpus} if gpus != 0 else {}
    requests: dict[str, Any] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"limits": limits, "requests": requests}}]
    }
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if node_name is not None:
        spec["nodeName"] = node_name
    spec.update(spec_extra)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
        "creationTimestamp": ago(created_ago),
    }
    if terminating:
        meta["deletionTimestamp"] = ts(NOW)
    if node_name is None:
        status: dict[str, Any] = {
            "phase": phase or "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    else:
        status = {"phase": phase or "Running", "conditions": []}
        if scheduled_ago is not None:
            status["conditions"].append(
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": ago(scheduled_ago)}
            )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def preemptor(
    name: str, gpus: int = 4, priority: int | None = 1000, priority_class: str = "reclaim", **kw: Any
) -> JsonObj:
    return pod(name, gpus=gpus, node_name=None, priority=priority, priority_class=priority_class, **kw)


def priority_class(
    name: str, value: int, annotations: dict[str, str] | None = None, global_default: bool = False
) -> JsonObj:
    obj: JsonObj = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "value": value,
    }
    if global_default:
        obj["globalDefault"] = True
    return obj


def reclaim_class(name: str = "reclaim", value: int = 1000) -> JsonObj:
    obj = priority_class(name, value, {RECLAIM_ANNOTATION: "true"})
    obj["preemptionPolicy"] = "Never"
    return obj


def victim_class(name: str = "batch", value: int = 100, /, **ann: str) -> JsonObj:
    """A class with plugin annotations; keyword names use _ for - (gpu_idle_seconds=...)."""
    return priority_class(name, value, {PLUGIN_PREFIX + k.replace("_", "-"): v for k, v in ann.items()})


def pdb(name: str, selector: dict[str, Any] | None, allowed: int | None, namespace: str = "ml") -> JsonObj:
    obj: JsonObj = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector},
        "status": {},
    }
    if allowed is not None:
        obj["status"]["disruptionsAllowed"] = allowed
    return obj


def held_node(name: str, pod_name: str, gpus: int = 4) -> tuple[JsonObj, JsonObj]:
    """Node `name` with `gpus` GPUs and the pod (namespace ml, priority 100) that holds them all."""
    return node(name, gpus=gpus), pod(pod_name, gpus=gpus, node_name=name)


def _by_kind(objs: Iterable[JsonObj]) -> dict[str, list[JsonObj]]:
    # groups: PodGroups and Workloads, the objects of any other kind
    kinds: dict[str, list[JsonObj]] = {
        "Node": [], "Pod": [], "PriorityClass": [], "PodDisruptionBudget": [], "groups": []
    }  # fmt: skip
    for obj in objs:
        kinds.get(obj["kind"], kinds["groups"]).append(obj)
    return kinds


def cluster_objects(*objs: JsonObj) -> list[JsonObj]:
    """The objects with the "reclaim" class added unless given, grouped by kind."""
    kinds = _by_kind(objs)
    if not any(pc["metadata"]["name"] == "reclaim" for pc in kinds["PriorityClass"]):
        kinds["PriorityClass"].append(reclaim_class())
    return [obj for objs in kinds.values() for obj in objs]


def state(objs: list[JsonObj]) -> ClusterState:
    """The cluster of the objects as given (cluster_objects' list)."""
    return ClusterState.from_objects(*_by_kind(objs).values())


def cluster(*objs: JsonObj) -> ClusterState:
    return state(cluster_objects(*objs))


def idle(*names: str, activity: float = 0.0, namespace: str = "ml", **kw: Any) -> dict[ObjectKey, PodUsage]:
    """Idle pods; the recent maximum equals the average unless given (gpu_recent_max=...)."""
    kw.setdefault("gpu_recent_max", activity)
    return {ObjectKey(namespace, n): PodUsage(activity, **kw) for n in names}


def busy(*names: str, activity: float = 0.9, namespace: str = "ml") -> dict[ObjectKey, PodUsage]:
    return {ObjectKey(namespace, n): PodUsage(activity, gpu_recent_max=activity) for n in names}


def pod_group(
    name: str, min_member: int | str | None, namespace: str = "ml", api: str = "scheduling.x-k8s.io/v1alpha1"
) -> JsonObj:
    """A PodGroup of the coscheduling plugin (or of Volcano or KAI, by api) needing min_member members."""
    return {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member},
    }


# --- Kueue (docs/kueue.md) ---------------------------------------------------------------------------------

KUEUE_V1BETA2 = "kueue.x-k8s.io/v1beta2"


def kueue_workload(
    name: str,
    namespace: str = "ml",
    *,
    gpus: int = 8,
    count: int = 1,
    priority: int | None = 100,
    queue: str = "q",
    admitted_in: str | None = None,
    job_uid: str | None = None,
    annotations: dict[str, str] | None = None,
    active: bool | None = None,
    created_ago: float = 3600,
    conditions: list[dict[str, str]] | None = None,
    requests: dict[str, Any] | None = None,
    api: str = KUEUE_V1BETA2,
) -> JsonObj:
    """A Kueue Workload of `count` pods of `gpus` GPUs each: waiting (no condition) unless admitted_in names
    the ClusterQueue that admitted it; job_uid: the Job that owns it."""
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [
            {
                "name": "main",
                "count": count,
                "template": {
                    "spec": {"containers": [{"name": "main", "resources": {"requests": {GPU: str(gpus)}}}]}
                },
            }
        ],
    }
    if priority is not None:
        spec["priority"] = priority
    if active is not None:
        spec["active"] = active
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-wl-{namespace}-{name}",
        "creationTimestamp": ago(created_ago),
        "annotations": dict(annotations or {}),
    }
    if job_uid is not None:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid}]
    given = list(conditions or [])
    if admitted_in is not None:
        given += [
            {"type": "QuotaReserved", "status": "True", "message": f"reserved in {admitted_in}"},
            {"type": "Admitted", "status": "True", "message": "admitted"},
        ]
    # every field Kueue's CRD requires of a condition
    since = ago(created_ago)
    status: dict[str, Any] = {
        "conditions": [{"reason": c["type"], "message": "", "lastTransitionTime": since, **c} for c in given]
    }
    if admitted_in is not None:
        status["admission"] = {
            "clusterQueue": admitted_in,
            "podSetAssignments": [
                {"name": "main", "count": count, "resourceUsage": {GPU: str(gpus * count)}}
            ],
        }
    if requests is not None:
        status["resourceRequests"] = [{"name": "main", "resources": requests}]
    return {"apiVersion": api, "kind": "Workload", "metadata": meta, "spec": spec, "status": status}


def cluster_queue(
    name: str,
    nominal: int = 16,
    used: int = 16,
    *,
    within: str | None = "LowerPriority",
    reclaim: str | None = None,
    cohort: str | None = None,
    api: str = KUEUE_V1BETA2,
) -> JsonObj:
    preemption: dict[str, str] = {}
    if within is not None:
        preemption["withinClusterQueue"] = within
    if reclaim is not None:
        preemption["reclaimWithinCohort"] = reclaim
    spec: dict[str, Any] = {
        "preemption": preemption,
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": "h100", "resources": [{"name": GPU, "nominalQuota": str(nominal)}]}],
            }
        ],
    }
    if cohort is not None:
        spec["cohortName" if api.endswith("v1beta2") else "cohort"] = cohort
    status = {
        "flavorsUsage": [{"name": "h100", "resources": [{"name": GPU, "total": str(used), "borrowed": "0"}]}]
    }
    return {
        "apiVersion": api,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
        "status": status,
    }


def local_queue(
    name: str, cluster_queue_name: str, namespace: str = "ml", api: str = KUEUE_V1BETA2
) -> JsonObj:
    return {
        "apiVersion": api,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def job(name: str, uid: str, namespace: str = "ml", owner_uid: str | None = None) -> JsonObj:
    """A batch/v1 Job (owned by owner_uid: a JobSet's Jobs are owned by the JobSet)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if owner_uid is not None:
        meta["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": name,
                                    "uid": owner_uid}]  # fmt: skip
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {}}


def owned(obj: JsonObj, owner_uid: str, kind: str = "Job") -> JsonObj:
    """The pod owned by the object of that uid."""
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": kind, "name": "owner", "uid": owner_uid}
    ]
    return obj


def with_kueue(objs: list[JsonObj]) -> ClusterState:
    """The cluster of the objects (cluster_objects' list), Kueue's objects and Jobs read as Kueue's."""
    kueue_kinds = ("Workload", "ClusterQueue", "LocalQueue", "Job")
    rest = [o for o in objs if o["kind"] not in kueue_kinds]
    return ClusterState.from_objects(
        *_by_kind(rest).values(), kueue=[o for o in objs if o["kind"] in kueue_kinds]
    )
