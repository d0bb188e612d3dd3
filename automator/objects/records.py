"""Plain records of the Kubernetes objects the planner reads: only the fields it (and its report) use,
taken while reading, so a large cluster's pods do not hold managedFields, env, volumes, container statuses
and the like. The snapshot loader and the live adapter share them. Pure (msgspec is a decoder, no client).

A field whose shape is wrong is kept as it is (the loader's shape check then names it); a field that is
not listed here is dropped.

`decode_pods` turns a page of a pod list (the API server's JSON bytes) straight into the same records:
msgspec decodes it into TypedDicts made from the field lists below, so the fields a record drops are
skipped by the C parser and never become Python objects (about 6x less time than `json.loads` then
`record`, docs/benchmarks.md). A page it cannot type (a field of an unexpected shape) goes the slow way,
`json.loads` then `record`, so both give the same records.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

import msgspec

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


# --- typed decoding of pod list pages (msgspec) -----------------------------------------------------------


def _typed(name: str, fields: Mapping[str, Any]) -> Any:
    """A total=False TypedDict of these fields: msgspec keeps exactly them and skips every other key."""
    return TypedDict(name, dict(fields), total=False)  # type: ignore[operator]


_ANY = dict.fromkeys


def _list_of(item: Any) -> Any:
    return list.__class_getitem__(item)


_Containers = _list_of(_typed("_Container", _ANY(_CONTAINER, Any)))
_Pod = _typed(
    "_Pod",
    {
        "apiVersion": Any,
        "kind": Any,
        "metadata": _typed("_PodMetadata", _ANY(_METADATA, Any)),
        "spec": _typed(
            "_PodSpec",
            {
                **_ANY(_POD_SPEC, Any),
                "containers": _Containers,
                "initContainers": _Containers,
            },
        ),
        "status": _typed("_PodStatus", _ANY(_POD_STATUS, Any)),
    },
)
_PodPage = _typed("_PodPage", {"metadata": _typed("_ListMeta", {"continue": Any}), "items": _list_of(_Pod)})
_PAGE_DECODER = msgspec.json.Decoder(_PodPage)
_POD_DECODER = msgspec.json.Decoder(_Pod)


def _finish_pod(pod: JsonObj) -> JsonObj:
    """A decoded pod as `record` leaves one: kind and apiVersion set (list items carry none), the large
    annotations dropped."""
    pod.setdefault("kind", "Pod")
    pod.setdefault("apiVersion", "v1")
    annotations = (pod.get("metadata") or {}).get("annotations")
    if isinstance(annotations, Mapping) and not _DROPPED_ANNOTATIONS.isdisjoint(annotations):
        pod["metadata"]["annotations"] = {
            k: v for k, v in annotations.items() if k not in _DROPPED_ANNOTATIONS
        }
    return pod


def _all_pods(items: list[JsonObj]) -> bool:
    return all(item.get("kind", "Pod") == "Pod" for item in items)


def decode_pods(data: bytes) -> tuple[list[JsonObj], str | None]:
    """The records of one page of a pod list (JSON bytes) and its continue token (None on the last page).

    The same records as `json.loads` then `record` of each item (kind "Pod" and apiVersion "v1" when the
    item has none, as list items do not); raises ValueError when the page is not JSON."""
    try:
        page = _PAGE_DECODER.decode(data)
    except msgspec.MsgspecError:
        page = None
    items = page.get("items") if page is not None else None
    if page is None or not _all_pods(items or []):
        return _decode_pods_slowly(data)
    token = (page.get("metadata") or {}).get("continue") or None
    return [_finish_pod(item) for item in items or []], token


def _decode_pods_slowly(data: bytes) -> tuple[list[JsonObj], str | None]:
    body = json.loads(data)
    if not isinstance(body, dict):
        raise ValueError("a list answer is not a JSON object")
    out = []
    for item in body.get("items") or []:
        item.setdefault("kind", "Pod")
        item.setdefault("apiVersion", "v1")
        out.append(record(item))
    token = (body.get("metadata") or {}).get("continue") or None
    return out, token


def decode_pod(data: bytes) -> JsonObj:
    """The record of one Pod (JSON bytes, as a get answers); ValueError when it is not a JSON object."""
    try:
        pod = _POD_DECODER.decode(data)
    except msgspec.MsgspecError:
        pod = None
    if pod is not None and _all_pods([pod]):
        return _finish_pod(pod)
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError("the answer is not an object")
    obj.setdefault("kind", "Pod")
    obj.setdefault("apiVersion", "v1")
    return record(obj)
