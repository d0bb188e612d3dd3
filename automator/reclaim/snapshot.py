"""Offline adapter: a cluster snapshot (`kubectl get -o yaml` List or multi-document YAML) and a usage file.

Unlike the live path, which plans around malformed objects safely, a snapshot is checked up front: any
malformed field is an InputError naming the object and the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from automator.objects.cluster import ClusterState
from automator.objects.files import Decoded, InputError, documents, flatten
from automator.objects.gang import GroupObject, group_object
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.kueue import NO_KUEUE, ClusterQueue, kueue_objects, kueue_record
from automator.objects.node import node_record
from automator.objects.pdb import pdb_record
from automator.objects.pod import Pod, pod_record
from automator.objects.priority_class import priority_class_record
from automator.objects.resources import FieldError, integer, parse_time
from automator.objects.selectors import LABEL_SELECTOR_OPERATORS, selector_matches
from automator.reclaim.model import PodUsage
from steward_common.gc_pause import gc_paused
from steward_common.series import MAX_SAMPLE_AGE_SECONDS

KINDS = ("Node", "Pod", "PriorityClass", "PodDisruptionBudget")


def _name(obj: JsonObj, kind: str, where: str, namespaced: bool) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise InputError(f"{kind} at {where}: metadata.name: missing")
    if namespaced:
        return f"{kind} {ObjectKey.of(obj)}"
    return f"{kind} {meta['name']}"


def _shaped(label: str, record: Any) -> Any:
    """The record, unless its decoder met a field of a wrong shape."""
    if record.shape_error is not None:
        raise InputError(f"{label}: {record.shape_error}")
    return record


def _check(label: str, check: Any, *args: Any) -> None:
    try:
        check(*args)
    except FieldError as exc:
        raise InputError(f"{label}: {exc}") from exc


def _check_pod(pod: JsonObj, label: str, gpu_resources: tuple[str, ...]) -> Pod:
    record: Pod = _shaped(label, pod_record(pod))
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise InputError(f"{label}: spec: missing")
    _check(label, record.requests, gpu_resources)
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
    return record


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


def _made(obj: JsonObj, kind: str, where: str, gpu_resources: tuple[str, ...]) -> Decoded:
    """The object's record; InputError names the object and the field."""
    label = _name(obj, kind, where, kind in ("Pod", "PodDisruptionBudget"))
    made: Any
    if kind == "Pod":
        made = _check_pod(obj, label, gpu_resources)
    elif kind == "Node":
        made = _shaped(label, node_record(obj))
        _check(label, made.offers, gpu_resources)
    elif kind == "PriorityClass":
        made = _shaped(label, priority_class_record(obj))
        _check(label, made.priority)
    else:
        made = _shaped(label, pdb_record(obj))
        _check_pdb(obj, label)
    return Decoded(kind, label, made)


def _kueue_label(record: Any) -> str:
    kind = type(record).__name__.removeprefix("Kueue")
    return f"{kind} {record.name if isinstance(record, ClusterQueue) else record.key}"


def load_cluster(
    path: Path, gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",), kueue: bool = False
) -> ClusterState:
    """The cluster of a file. kueue: Kueue's Workloads, ClusterQueues and LocalQueues and the batch Jobs
    are read too (--kueue on); a field of theirs that does not parse is an InputError naming it."""
    lists: dict[str, list[Any]] = {kind: [] for kind in KINDS}
    seen: set[str] = set()
    groups: list[GroupObject] = []
    kueue_found: list[Any] = []

    def keep(obj: JsonObj) -> Any:
        """An object of the kinds the planner reads becomes its record as it is parsed, so the file is never
        held decoded; one that fails a check stays as it is, and is checked again in the file's order,
        where its error names its place."""
        kind = obj.get("kind")
        if kind not in KINDS:
            return obj
        try:
            return _made(obj, str(kind), "", gpu_resources)
        except InputError:
            return obj

    with gc_paused():
        for d, doc in enumerate(documents(path, keep)):
            for item, where in flatten(doc, f"{path} document {d}", consume=True):
                made = item if isinstance(item, Decoded) else None
                if made is None and item.get("kind") in KINDS:
                    made = _made(item, str(item["kind"]), where, gpu_resources)
                if made is None and kueue:
                    record = kueue_record(item)
                    if record is not None:
                        label = f"{_kueue_label(record)} ({where})"
                        error = getattr(record, "error", None)  # a Job is read for its owners only
                        if error is not None:
                            raise InputError(f"{label}: {error}")
                        if _kueue_label(record) in seen:
                            raise InputError(f"{label}: listed twice")
                        seen.add(_kueue_label(record))
                        kueue_found.append(record)
                        continue
                if made is None:
                    group = group_object(item)
                    if group is not None:  # a PodGroup or Workload: how many members a gang needs
                        label = f"{group.source} {group.namespace}/{group.name}"
                        if label in seen:
                            raise InputError(f"{label}: listed twice")
                        seen.add(label)
                        groups.append(group)
                    continue  # other kinds (Services, Deployments...) play no part
                if made.label in seen:
                    raise InputError(f"{made.label}: listed twice")
                seen.add(made.label)
                lists[made.kind].append(made.record)
        return ClusterState(
            lists["Node"],
            lists["Pod"],
            lists["PriorityClass"],
            lists["PodDisruptionBudget"],
            groups,
            kueue_objects(kueue_found, served=any(type(r).__name__ != "Job" for r in kueue_found))
            if kueue
            else NO_KUEUE,
        )


def _number(value: Any, label: str, field: str, upper: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{label}: {field}: {value!r} is not a number")
    if value < 0 or (upper is not None and value > upper):
        bound = f"between 0 and {upper}" if upper is not None else ">= 0"
        raise InputError(f"{label}: {field}: {value!r} is not {bound}")
    return float(value)


def load_usage(path: Path) -> dict[ObjectKey, PodUsage]:
    """YAML `pods: [{namespace, name, gpu_activity, coverage, cpu_cores, gpu_recent_max,
    newest_sample_age_seconds}]`, optionally `max_sample_age_seconds`; a pod not listed is unknown;
    gpu_recent_max absent or null, or a newest sample older than max_sample_age_seconds (default
    MAX_SAMPLE_AGE_SECONDS): no recent usage (protected). newest_sample_age_seconds absent: fresh."""
    docs = [d for d in documents(path) if d is not None]
    if len(docs) != 1 or not isinstance(docs[0], Mapping):
        raise InputError(f"{path}: expected one YAML mapping with a `pods` list")
    pods = docs[0].get("pods")
    if not isinstance(pods, list):
        raise InputError(f"{path}: pods: expected a list")
    max_age = _number(docs[0].get("max_sample_age_seconds"), str(path), "max_sample_age_seconds", None)
    max_age = MAX_SAMPLE_AGE_SECONDS if max_age is None else max_age
    usage: dict[ObjectKey, PodUsage] = {}
    for i, entry in enumerate(pods):
        where = f"{path} pods[{i}]"
        if not isinstance(entry, Mapping):
            raise InputError(f"{where}: expected a mapping")
        for field in ("namespace", "name"):
            if not isinstance(entry.get(field), str) or not entry[field]:
                raise InputError(f"{where}: {field}: missing")
        key = ObjectKey(entry["namespace"], entry["name"])
        label = f"usage of Pod {key} ({where})"
        if key in usage:
            raise InputError(f"{label}: listed twice")
        activity = _number(entry.get("gpu_activity"), label, "gpu_activity", 1.0)
        coverage = _number(entry.get("coverage", 1.0), label, "coverage", 1.0)
        cpu = _number(entry.get("cpu_cores"), label, "cpu_cores", None)
        recent = _number(entry.get("gpu_recent_max"), label, "gpu_recent_max", 1.0)
        age = _number(entry.get("newest_sample_age_seconds"), label, "newest_sample_age_seconds", None)
        if age is not None and age > max_age:
            recent = None  # the newest sample is stale: its recent window says nothing about now
        usage[key] = PodUsage(activity, 1.0 if coverage is None else coverage, cpu, recent)
    return usage
