"""The Node record: what the planner reads of a Node (name, labels, cordon, readiness, taints, allocatable),
decoded once (`node_record`). Pure. A malformed allocatable amount is carried as its FieldProblem: the node
is then unplannable, as today."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from automator.objects.fields import as_map
from automator.objects.resources import FieldProblem, Requests, amount, floored, kept, whole
from automator.objects.shapes import Shapes


class Node(msgspec.Struct, frozen=True):
    name: str
    labels: Mapping[str, Any] = {}
    unschedulable: bool = False  # spec.unschedulable (cordoned)
    # A Ready condition that is not True. A node with no conditions at all is taken as ready: the API
    # server always reports one, so only a hand-written snapshot lacks it; a real node that is not ready
    # also carries the not-ready taint.
    not_ready: bool = False
    taints: Any = None  # spec.taints as given
    # status.allocatable as given (GPU resources are read by the planner's resource names), and its cpu
    # (millicores) and memory (bytes) rounded down; a FieldProblem in place of what failed
    allocatable: Mapping[str, Any] = {}
    cpu_m: int | FieldProblem = 0
    memory: int | FieldProblem = 0
    shape_error: FieldProblem | None = None  # the first field of a wrong shape (objects/shapes.py)
    allocatable_error: FieldProblem | None = None  # status or status.allocatable of a wrong shape

    def offers(self, gpu_resources: Iterable[str]) -> Requests:
        """What the node offers (whole GPUs of these resources, cpu, memory); FieldError when malformed."""
        gpus = sum(
            whole(self.allocatable[name], f"status.allocatable.{name}")
            for name in gpu_resources
            if name in self.allocatable
        )
        return Requests(gpus, amount(self.cpu_m), amount(self.memory))


def _not_ready(conditions: list[Mapping[str, Any]]) -> bool:
    for condition in conditions:
        if condition.get("type") == "Ready":
            return condition.get("status") != "True"
    return False


def node_record(obj: Mapping[str, Any]) -> Node:
    """The record of one Node object (as the API and kubectl give it)."""
    shapes = Shapes()
    meta = as_map(obj.get("metadata"))
    _, labels, _ = shapes.metadata(meta)
    spec = shapes.map(obj.get("spec"), "spec")
    shapes.maps(spec.get("taints"), "spec.taints")
    status = shapes.map(obj.get("status"), "status")
    shapes.map(status.get("allocatable"), "status.allocatable")
    conditions = shapes.maps(status.get("conditions"), "status.conditions")
    allocatable = status.get("allocatable") or {}
    fields: dict[str, Any] = {}
    if isinstance(allocatable, dict):
        fields["cpu_m"] = kept(floored, allocatable.get("cpu", 0), 1000, "status.allocatable.cpu")
        fields["memory"] = kept(floored, allocatable.get("memory", 0), 1, "status.allocatable.memory")
    else:
        allocatable = {}
        fields["cpu_m"] = FieldProblem("status.allocatable", "expected a map")
    return Node(
        str(meta.get("name")),
        labels=labels,
        unschedulable=spec.get("unschedulable") is True,
        not_ready=_not_ready(conditions),
        taints=spec.get("taints"),
        allocatable=allocatable,
        shape_error=shapes.first,
        allocatable_error=shapes.noted.get("status") or shapes.noted.get("status.allocatable"),
        **fields,
    )


def node_records(nodes: Iterable[Node | Mapping[str, Any]]) -> list[Node]:
    """Records of nodes given as records or as objects."""
    return [n if isinstance(n, Node) else node_record(n) for n in nodes]
