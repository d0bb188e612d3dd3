"""The pass's gangs (pure): which pods belong together, and how many members each gang needs.

A pod's gang is the first gang key it carries (objects/gang.py), within its namespace. The count needed
comes from the gang's group object (PodGroup or Workload), from the count the members state (Kueue,
LeaderWorkerSet), or from the members listed (JobSet, and any gang whose group object is not in the
snapshot, with a warning). A count that is not a positive integer makes the gang malformed: its members are
never planned as single pods.
docs/reclaim.md ("Gangs") states the rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from automator.objects.gang import GangRef, GangSource, GangWarning, GroupObject
from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from steward_common.conventions import WORD_GANG_MALFORMED
from steward_common.settingspec import shown, whole_number

# The largest count read: a gang of more members than this is no count anyone writes (Kubernetes' int32).
MAX_NEEDED = 2**31 - 1


@dataclass(frozen=True, eq=False)
class Gang:
    name: str  # namespace/name, as output shows it
    source: GangSource
    members: tuple[ObjectKey, ...]  # every listed member that is not finished, in name order
    needed: int | None  # members that must run together; None when malformed
    problem: str | None = None  # why the gang is malformed (the reason its members get)
    counted: bool = False  # needed is the members listed: the group object is not in the snapshot


def _count(value: Any, what: str) -> tuple[int | None, str | None]:
    """A needed count as given: a positive integer, else the problem."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        try:
            number = whole_number(value)
        except ValueError:
            number = None
    if number is None or not 1 <= number <= MAX_NEEDED:
        shown_value = shown(value) if isinstance(value, str) else repr(value)
        return None, f"{what} {shown_value} is not a positive integer"
    return number, None


_GroupKey = tuple[str, GangRef]  # (namespace, the key without the pod's own count)


def _group_key(pod: Pod, ref: GangRef) -> _GroupKey:
    return (pod.key.namespace, GangRef(ref.source, ref.group, ref.pod_group, ref.replica))


def resolve_gangs(
    pods: Iterable[Pod], groups: Iterable[GroupObject]
) -> tuple[dict[ObjectKey, Gang], list[GangWarning]]:
    """Every gang member's gang, and a warning per gang whose group object is not in the snapshot."""
    members: dict[_GroupKey, list[Pod]] = {}
    for pod in pods:
        if pod.gang is not None and not pod.finished:
            members.setdefault(_group_key(pod, pod.gang), []).append(pod)
    objects = {(g.source, g.namespace, g.name): g for g in groups}
    by_pod: dict[ObjectKey, Gang] = {}
    warnings: list[GangWarning] = []
    for (namespace, ref), pods_of in sorted(members.items(), key=lambda kv: (kv[0][0], kv[0][1].name)):
        pods_of.sort(key=lambda p: p.key)
        gang = _gang(namespace, ref, pods_of, objects)
        if gang is None:
            continue  # a group whose policy is no gang: its pods are single pods
        if gang.counted:
            obj = f"{ref.source} {namespace}/{ref.group}"
            warnings.append(
                GangWarning(
                    gang.name,
                    f"{obj} is not in the snapshot: {gang.needed} member(s) needed, "
                    "counted from the pods listed",
                )
            )
        for pod in pods_of:
            by_pod[pod.key] = gang
    return by_pod, warnings


def _gang(
    namespace: str, ref: GangRef, pods: list[Pod], objects: Mapping[tuple[GangSource, str, str], GroupObject]
) -> Gang | None:
    name = f"{namespace}/{ref.name}"
    keys = tuple(p.key for p in pods)
    source = ref.source
    if source in (GangSource.KUEUE, GangSource.LWS):
        stated = {repr(p.gang.declared) for p in pods if p.gang is not None}
        what = "pod-group-total-count" if source is GangSource.KUEUE else "size"
        if len(stated) > 1:
            return _malformed(name, source, keys, f"its members state different {what} annotations")
        declared = pods[0].gang.declared if pods[0].gang is not None else None
        needed, problem = _count(declared, f"annotation {what}")
        return _malformed(name, source, keys, problem) if needed is None else Gang(name, source, keys, needed)
    if source is GangSource.JOBSET:
        return Gang(name, source, keys, len(keys))
    obj = objects.get((source, namespace, ref.group))
    if obj is None or ref.pod_group not in obj.needed:
        return Gang(name, source, keys, len(keys), counted=True)
    if ref.pod_group in obj.basic:
        return None  # a pod group whose policy is not a gang: its pods are single pods
    value = obj.needed[ref.pod_group]
    field = "minCount" if source in (GangSource.POD_GROUP, GangSource.WORKLOAD) else "minMember"
    needed, problem = _count(value, f"{source} {namespace}/{ref.group} {field}")
    return _malformed(name, source, keys, problem) if needed is None else Gang(name, source, keys, needed)


def _malformed(name: str, source: GangSource, keys: tuple[ObjectKey, ...], problem: str | None) -> Gang:
    return Gang(name, source, keys, None, f"{WORD_GANG_MALFORMED}: gang {name}: {problem}")
