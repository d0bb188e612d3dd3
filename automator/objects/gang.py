"""Gang membership as the objects say it (pure): which gang key a pod carries, and the group objects that
say how many members a gang needs. docs/reclaim.md ("Gangs") lists the keys in the order they are read;
reclaim/gangs.py turns them into the pass's gangs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

import msgspec

from steward_common.conventions import (
    GANG_COSCHEDULING_LABEL,
    GANG_JOBSET_LABEL,
    GANG_KAI_ANNOTATION,
    GANG_KUEUE_COUNT_ANNOTATION,
    GANG_KUEUE_LABEL,
    GANG_LWS_LABEL,
    GANG_LWS_SIZE_ANNOTATION,
    GANG_VOLCANO_ANNOTATION,
)


class GangSource(StrEnum):
    """Where a pod's gang comes from, in the order a pod's keys are read (the first one found wins)."""

    POD_GROUP = "scheduling.k8s.io/PodGroup"  # spec.schedulingGroup.podGroupName
    WORKLOAD = "scheduling.k8s.io/Workload"  # spec.workloadRef
    COSCHEDULING = "scheduling.x-k8s.io/PodGroup"  # label
    VOLCANO = "scheduling.volcano.sh/PodGroup"  # annotation
    KAI = "scheduling.run.ai/PodGroup"  # annotation
    KUEUE = "kueue.x-k8s.io pod group"  # label, needed from the total-count annotation
    LWS = "leaderworkerset.sigs.k8s.io group"  # label, needed from the size annotation
    JOBSET = "jobset.sigs.k8s.io JobSet"  # label, needed: every listed pod of the JobSet


# The sources whose needed count is a group object's: (API group, kind) of that object.
GROUP_KINDS: Mapping[tuple[str, str], GangSource] = {
    ("scheduling.k8s.io", "PodGroup"): GangSource.POD_GROUP,
    ("scheduling.k8s.io", "Workload"): GangSource.WORKLOAD,
    ("scheduling.x-k8s.io", "PodGroup"): GangSource.COSCHEDULING,
    ("scheduling.volcano.sh", "PodGroup"): GangSource.VOLCANO,
    ("scheduling.run.ai", "PodGroup"): GangSource.KAI,
}


# The group objects' APIs a live cluster may serve: (group, version, plural, kind), the newest version of a
# group's resource first (the adapter lists the first one served).
GANG_APIS: tuple[tuple[str, str, str, str], ...] = (
    ("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup"),
    ("scheduling.k8s.io", "v1alpha3", "podgroups", "PodGroup"),
    ("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup"),
    ("scheduling.k8s.io", "v1alpha1", "workloads", "Workload"),
    ("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup"),
    ("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup"),
    ("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup"),
)


class GangRef(msgspec.Struct, frozen=True):
    """The gang key one pod carries, as given (within the pod's namespace)."""

    source: GangSource
    group: str  # the group object's name, or the label's value
    pod_group: str = ""  # a Workload's pod group
    replica: str = ""  # a Workload pod group's podGroupReplicaKey
    declared: Any = None  # the count the pod itself states (Kueue total count, LWS size), as given

    @property
    def name(self) -> str:
        """The gang's name in output, after its namespace."""
        if self.source is GangSource.WORKLOAD:
            return f"{self.group}/{self.pod_group}" + (f"/{self.replica}" if self.replica else "")
        return self.group


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def gang_ref(
    spec: Mapping[str, Any], labels: Mapping[str, Any], annotations: Mapping[str, Any]
) -> GangRef | None:
    """The first gang key the pod carries, None when it carries none. A key whose value is not a name is
    passed over (the API writes strings; only a hand-written file has anything else)."""
    group = spec.get("schedulingGroup")
    if isinstance(group, Mapping) and _text(group.get("podGroupName")):
        return GangRef(GangSource.POD_GROUP, group["podGroupName"])
    ref = spec.get("workloadRef")
    if isinstance(ref, Mapping) and _text(ref.get("name")):
        return GangRef(
            GangSource.WORKLOAD, ref["name"], _text(ref.get("podGroup")), _text(ref.get("podGroupReplicaKey"))
        )
    for source, keys, key in (
        (GangSource.COSCHEDULING, labels, GANG_COSCHEDULING_LABEL),
        (GangSource.VOLCANO, annotations, GANG_VOLCANO_ANNOTATION),
        (GangSource.KAI, annotations, GANG_KAI_ANNOTATION),
    ):
        if _text(keys.get(key)):
            return GangRef(source, keys[key])
    if _text(labels.get(GANG_KUEUE_LABEL)):
        count = annotations.get(GANG_KUEUE_COUNT_ANNOTATION)
        return GangRef(GangSource.KUEUE, labels[GANG_KUEUE_LABEL], declared=count)
    if _text(labels.get(GANG_LWS_LABEL)):
        size = annotations.get(GANG_LWS_SIZE_ANNOTATION)
        return GangRef(GangSource.LWS, labels[GANG_LWS_LABEL], declared=size)
    if _text(labels.get(GANG_JOBSET_LABEL)):
        return GangRef(GangSource.JOBSET, labels[GANG_JOBSET_LABEL])
    return None


class GangWarning(msgspec.Struct, frozen=True):
    """A gang planned on a count made from its listed members: its group object is not in the snapshot."""

    gang: str  # namespace/name
    message: str


class GroupObject(msgspec.Struct, frozen=True):
    """A group object (PodGroup of one of the four APIs, or a Workload): how many members each of its pod
    groups needs. needed: pod group ("" for the kinds with one group) -> the count as given (None when
    absent: not a positive integer); basic: the pod groups whose policy is not a gang."""

    source: GangSource
    namespace: str
    name: str
    needed: Mapping[str, Any] = {}
    basic: frozenset[str] = frozenset()


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _is_basic(policy: Mapping[str, Any]) -> bool:
    """A Workload API policy that is not a gang (`basic`, and no `gang`)."""
    return "gang" not in policy and "basic" in policy


def _policy_count(policy: Mapping[str, Any]) -> Any:
    """A Workload API policy's gang minCount as given (None when absent)."""
    return _map(policy.get("gang")).get("minCount")


def group_object(obj: Mapping[str, Any]) -> GroupObject | None:
    """The record of a group object; None when the object is of no kind gangs read."""
    api_group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    source = GROUP_KINDS.get((api_group, str(obj.get("kind") or "")))
    if source is None:
        return None
    meta = _map(obj.get("metadata"))
    spec = _map(obj.get("spec"))
    policies: dict[str, Mapping[str, Any]] = {}  # pod group -> its Workload API policy
    if source is GangSource.POD_GROUP:
        policies = {"": _map(spec.get("schedulingPolicy"))}
    elif source is GangSource.WORKLOAD:
        groups = spec.get("podGroups")
        policies = {
            str(g.get("name")): _map(g.get("policy"))
            for g in (groups if isinstance(groups, list) else [])
            if isinstance(g, Mapping)
        }
    if source in (GangSource.POD_GROUP, GangSource.WORKLOAD):
        needed = {k: _policy_count(p) for k, p in policies.items()}
    else:
        needed = {"": spec.get("minMember")}
    basic = frozenset(k for k, p in policies.items() if _is_basic(p))
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    return GroupObject(source, namespace, name, needed, basic)


def group_objects(objs: Iterable[GroupObject | Mapping[str, Any]]) -> list[GroupObject]:
    """Records of group objects given as records or as objects (objects of other kinds left out)."""
    records: list[GroupObject] = []
    for obj in objs:
        record = obj if isinstance(obj, GroupObject) else group_object(obj)
        if record is not None:
            records.append(record)
    return records
