"""The fields of a snapshot file's objects that the decoders and the snapshot's shape check read, kept as
each object is parsed, so a large file's pods do not hold managedFields, env, volumes, container statuses
and the like until they are decoded. Pure.

A field whose shape is wrong is kept as it is (the loader's shape check then names it); a field that is
not listed here is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from automator.objects.model import JsonObj

_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "creationTimestamp",
    "deletionTimestamp",
    "ownerReferences",  # the KEDA cache finds a workload's pods by their owners
)
# Annotations no reader uses and that can be as large as the object itself.
_DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})
_CONTAINER = ("name", "resources", "restartPolicy")
_POD_SPEC = (
    "nodeName",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "schedulerName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "overhead",
)
_POD_STATUS = ("phase", "conditions", "nominatedNodeName")
_NODE_SPEC = ("unschedulable", "taints")
_NODE_STATUS = ("allocatable", "capacity", "conditions")


def _pick(value: Any, keys: tuple[str, ...]) -> Any:
    if not isinstance(value, Mapping):
        return value  # a wrong shape stays for the shape check to report
    return {k: value[k] for k in keys if k in value}


def _metadata(value: Any) -> Any:
    meta = _pick(value, _METADATA)
    if isinstance(meta, dict) and isinstance(meta.get("annotations"), Mapping):
        annotations = meta["annotations"]
        if not _DROPPED_ANNOTATIONS.isdisjoint(annotations):
            meta["annotations"] = {k: v for k, v in annotations.items() if k not in _DROPPED_ANNOTATIONS}
    return meta


def _containers(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    return [_pick(c, _CONTAINER) for c in value]


def _pod_spec(value: Any) -> Any:
    spec = _pick(value, _POD_SPEC)
    if isinstance(spec, dict):
        for key in ("containers", "initContainers"):
            if key in value:
                spec[key] = _containers(value[key])
    return spec


def _pod_status(value: Any) -> Any:
    return _pick(value, _POD_STATUS)


def _node_spec(value: Any) -> Any:
    return _pick(value, _NODE_SPEC)


def _node_status(value: Any) -> Any:
    return _pick(value, _NODE_STATUS)


_PARTS: dict[str, tuple[tuple[str, Callable[[Any], Any]], ...]] = {
    "Pod": (("spec", _pod_spec), ("status", _pod_status)),
    "Node": (("spec", _node_spec), ("status", _node_status)),
}


def record(obj: Mapping[str, Any]) -> JsonObj:
    """The fields of a Pod, Node, PriorityClass or PodDisruptionBudget that the planner reads."""
    parts = _PARTS.get(str(obj.get("kind")))
    if parts is None:  # PriorityClass (value, globalDefault...), PodDisruptionBudget (spec, status): small
        out = dict(obj)
        if "metadata" in obj:
            out["metadata"] = _metadata(obj["metadata"])
        return out
    out = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    if "metadata" in obj:
        out["metadata"] = _metadata(obj["metadata"])
    for key, pick in parts:
        if key in obj:
            out[key] = pick(obj[key])
    return out
