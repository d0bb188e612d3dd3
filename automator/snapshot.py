"""Offline adapter: a cluster snapshot (`kubectl get -o yaml` List or multi-document YAML) and a usage file.

Unlike the live path, which plans around malformed objects safely, a snapshot is checked up front: any
malformed field is an InputError naming the object and the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from automator.eligibility import LABEL_SELECTOR_OPERATORS, selector_matches
from automator.model import ClusterState, JsonObj, PodKey, PodUsage
from automator.resources import (
    FieldError,
    integer,
    node_allocatable,
    parse_time,
    pod_requests,
)

KINDS = ("Node", "Pod", "PriorityClass", "PodDisruptionBudget")


class InputError(Exception):
    """Bad input; the message names the object and the field."""


def _documents(path: Path) -> Iterator[Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        yield from yaml.safe_load_all(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML/JSON: {exc}") from exc


def _flatten(doc: Any, where: str) -> Iterator[tuple[JsonObj, str]]:
    if doc is None:
        return
    if not isinstance(doc, Mapping):
        raise InputError(f"{where}: expected a Kubernetes object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise InputError(f"{where}: items: expected a list")
        for i, item in enumerate(items):
            yield from _flatten(item, f"{where} items[{i}]")
        return
    yield dict(doc), where


def _name(obj: JsonObj, kind: str, where: str, namespaced: bool) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise InputError(f"{kind} at {where}: metadata.name: missing")
    if namespaced:
        return f"{kind} {PodKey.of(obj)}"
    return f"{kind} {meta['name']}"


# Shapes of the fields the planner reads, checked before any value: a list where a map belongs must be an
# InputError naming the field, not a crash. "x[]" walks the items of list x; absent or null fields pass.
_MAP, _LIST, _STR = (Mapping, "a map"), (list, "a list"), (str, "a string")
_META = [("metadata.namespace", _STR), ("metadata.labels", _MAP), ("metadata.annotations", _MAP)]
_SELECTOR_TERMS = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
_CONTAINER = [
    ("", _MAP),
    (".resources", _MAP),
    (".resources.limits", _MAP),
    (".resources.requests", _MAP),
]
_SHAPES: dict[str, list[tuple[str, tuple[Any, str]]]] = {
    "Pod": [
        *_META,
        ("spec", _MAP),
        ("spec.nodeName", _STR),
        ("spec.priorityClassName", _STR),
        ("spec.containers", _LIST),
        *[("spec.containers[]" + path, shape) for path, shape in _CONTAINER],
        ("spec.initContainers", _LIST),
        *[("spec.initContainers[]" + path, shape) for path, shape in _CONTAINER],
        ("spec.overhead", _MAP),
        ("spec.nodeSelector", _MAP),
        ("spec.tolerations", _LIST),
        ("spec.tolerations[]", _MAP),
        ("spec.affinity", _MAP),
        ("spec.affinity.nodeAffinity", _MAP),
        (_SELECTOR_TERMS, _MAP),
        (_SELECTOR_TERMS + ".nodeSelectorTerms", _LIST),
        (_SELECTOR_TERMS + ".nodeSelectorTerms[]", _MAP),
        (_SELECTOR_TERMS + ".nodeSelectorTerms[].matchExpressions", _LIST),
        (_SELECTOR_TERMS + ".nodeSelectorTerms[].matchExpressions[]", _MAP),
        (_SELECTOR_TERMS + ".nodeSelectorTerms[].matchExpressions[].values", _LIST),
        (_SELECTOR_TERMS + ".nodeSelectorTerms[].matchFields", _LIST),
        (_SELECTOR_TERMS + ".nodeSelectorTerms[].matchFields[]", _MAP),
        (_SELECTOR_TERMS + ".nodeSelectorTerms[].matchFields[].values", _LIST),
        ("status", _MAP),
        ("status.phase", _STR),
        ("status.conditions", _LIST),
        ("status.conditions[]", _MAP),
    ],
    "Node": [
        *_META,
        ("spec", _MAP),
        ("spec.taints", _LIST),
        ("spec.taints[]", _MAP),
        ("status", _MAP),
        ("status.allocatable", _MAP),
        ("status.conditions", _LIST),
        ("status.conditions[]", _MAP),
    ],
    "PriorityClass": list(_META),
    "PodDisruptionBudget": [
        *_META,
        ("spec", _MAP),
        ("spec.selector", _MAP),
        ("spec.selector.matchLabels", _MAP),
        ("spec.selector.matchExpressions", _LIST),
        ("spec.selector.matchExpressions[]", _MAP),
        ("spec.selector.matchExpressions[].values", _LIST),
        ("status", _MAP),
    ],
}


def _values_at(value: Any, steps: list[str], where: str) -> Iterator[tuple[Any, str]]:
    """(value, field path) for every value a dotted path with [] steps reaches; wrong shapes above stop."""
    if not steps:
        yield value, where
        return
    step, rest = steps[0], steps[1:]
    name, each = (step[:-2], True) if step.endswith("[]") else (step, False)
    if not isinstance(value, Mapping) or value.get(name) is None:
        return
    inner = value[name]
    path = f"{where}.{name}" if where else name
    if not each:
        yield from _values_at(inner, rest, path)
    elif isinstance(inner, list):
        for i, item in enumerate(inner):
            yield from _values_at(item, rest, f"{path}[{i}]")


def _check_shape(obj: JsonObj, kind: str, label: str) -> None:
    for dotted, (expected, text) in _SHAPES[kind]:
        for value, where in _values_at(obj, dotted.split("."), ""):
            if not isinstance(value, expected):
                raise InputError(f"{label}: {where}: expected {text}, got {type(value).__name__}")


def _check(label: str, check: Any, *args: Any) -> None:
    try:
        check(*args)
    except FieldError as exc:
        raise InputError(f"{label}: {exc}") from exc


def _check_pod(pod: JsonObj, label: str, gpu_resources: tuple[str, ...]) -> None:
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise InputError(f"{label}: spec: missing")
    _check(label, pod_requests, pod, gpu_resources)
    if spec.get("priority") is not None:
        _check(label, integer, spec["priority"], "spec.priority")
    meta = pod.get("metadata") or {}
    for key in ("creationTimestamp", "deletionTimestamp"):
        if meta.get(key) is not None:
            _check(label, parse_time, meta[key], f"metadata.{key}")
    for i, condition in enumerate((pod.get("status") or {}).get("conditions") or []):
        if isinstance(condition, Mapping) and condition.get("lastTransitionTime") is not None:
            _check(
                label,
                parse_time,
                condition["lastTransitionTime"],
                f"status.conditions[{i}].lastTransitionTime",
            )


def _check_pdb(pdb: JsonObj, label: str) -> None:
    spec = pdb.get("spec") or {}
    try:
        selector_matches(spec.get("selector"), {})
    except ValueError as exc:
        raise InputError(f"{label}: {exc}") from exc
    # selector_matches stops at the first requirement that fails: check every operator here.
    for i, expr in enumerate((spec.get("selector") or {}).get("matchExpressions") or []):
        op = expr.get("operator")
        if op not in LABEL_SELECTOR_OPERATORS:
            raise InputError(
                f"{label}: spec.selector.matchExpressions[{i}].operator: unknown operator {op!r}"
            )
    allowed = (pdb.get("status") or {}).get("disruptionsAllowed")
    if allowed is not None:
        _check(label, integer, allowed, "status.disruptionsAllowed")


def load_cluster(path: Path, gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)) -> ClusterState:
    state = ClusterState([], [], [], [])
    lists = {
        "Node": state.nodes,
        "Pod": state.pods,
        "PriorityClass": state.priority_classes,
        "PodDisruptionBudget": state.pdbs,
    }
    seen: set[str] = set()
    for d, doc in enumerate(_documents(path)):
        for obj, where in _flatten(doc, f"{path} document {d}"):
            kind = obj.get("kind")
            if kind not in KINDS:
                continue  # other kinds (Services, Deployments...) play no part
            label = _name(obj, str(kind), where, kind in ("Pod", "PodDisruptionBudget"))
            if label in seen:
                raise InputError(f"{label}: listed twice")
            seen.add(label)
            _check_shape(obj, str(kind), label)
            if kind == "Pod":
                _check_pod(obj, label, gpu_resources)
            elif kind == "Node":
                _check(label, node_allocatable, obj, gpu_resources)
            elif kind == "PriorityClass":
                _check(label, integer, obj.get("value", 0), "value")
            else:
                _check_pdb(obj, label)
            lists[str(kind)].append(obj)
    return state


def _number(value: Any, label: str, field: str, upper: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{label}: {field}: {value!r} is not a number")
    if value < 0 or (upper is not None and value > upper):
        bound = f"between 0 and {upper}" if upper is not None else ">= 0"
        raise InputError(f"{label}: {field}: {value!r} is not {bound}")
    return float(value)


def load_usage(path: Path) -> dict[PodKey, PodUsage]:
    """YAML `pods: [{namespace, name, gpu_activity, coverage, cpu_cores, gpu_recent_max}]`; a pod not
    listed is unknown; gpu_recent_max absent or null: no recent sample (protected)."""
    docs = [d for d in _documents(path) if d is not None]
    if len(docs) != 1 or not isinstance(docs[0], Mapping):
        raise InputError(f"{path}: expected one YAML mapping with a `pods` list")
    pods = docs[0].get("pods")
    if not isinstance(pods, list):
        raise InputError(f"{path}: pods: expected a list")
    usage: dict[PodKey, PodUsage] = {}
    for i, entry in enumerate(pods):
        where = f"{path} pods[{i}]"
        if not isinstance(entry, Mapping):
            raise InputError(f"{where}: expected a mapping")
        for field in ("namespace", "name"):
            if not isinstance(entry.get(field), str) or not entry[field]:
                raise InputError(f"{where}: {field}: missing")
        key = PodKey(entry["namespace"], entry["name"])
        label = f"usage of Pod {key} ({where})"
        if key in usage:
            raise InputError(f"{label}: listed twice")
        activity = _number(entry.get("gpu_activity"), label, "gpu_activity", 1.0)
        coverage = _number(entry.get("coverage", 1.0), label, "coverage", 1.0)
        cpu = _number(entry.get("cpu_cores"), label, "cpu_cores", None)
        recent = _number(entry.get("gpu_recent_max"), label, "gpu_recent_max", 1.0)
        usage[key] = PodUsage(activity, 1.0 if coverage is None else coverage, cpu, recent)
    return usage
