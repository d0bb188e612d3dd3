"""The PodDisruptionBudget record: its namespace and name, its label selector as given (read by the
planner's selector matching, which names a malformed one), and the disruptions it allows now. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from automator.objects.fields import as_map
from automator.objects.resources import FieldProblem
from automator.objects.shapes import Shapes


class PodDisruptionBudget(msgspec.Struct, frozen=True):
    namespace: str
    name: str
    selector: Any = None  # spec.selector
    # status.disruptionsAllowed; 0 without a status yet (the controller has not observed it: the Eviction
    # API would refuse) or when it is not an integer
    allowed: int = 0
    shape_error: FieldProblem | None = None  # the first field of a wrong shape (objects/shapes.py)


def pdb_record(obj: Mapping[str, Any]) -> PodDisruptionBudget:
    """The record of one PodDisruptionBudget object (as the API and kubectl give it)."""
    shapes = Shapes()
    meta = as_map(obj.get("metadata"))
    namespace, _, _ = shapes.metadata(meta)
    spec = shapes.map(obj.get("spec"), "spec")
    selector = shapes.map(spec.get("selector"), "spec.selector")
    shapes.map(selector.get("matchLabels"), "spec.selector.matchLabels")
    where = "spec.selector.matchExpressions"
    for i, expression in enumerate(shapes.maps(selector.get("matchExpressions"), where)):
        shapes.items(expression.get("values"), f"{where}[{i}].values")
    allowed = shapes.map(obj.get("status"), "status").get("disruptionsAllowed")
    return PodDisruptionBudget(
        str(namespace or "default"),
        str(meta.get("name")),
        spec.get("selector"),
        allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0,
        shapes.first,
    )


def pdb_records(pdbs: Iterable[PodDisruptionBudget | Mapping[str, Any]]) -> list[PodDisruptionBudget]:
    """Records of PDBs given as records or as objects."""
    return [p if isinstance(p, PodDisruptionBudget) else pdb_record(p) for p in pdbs]
