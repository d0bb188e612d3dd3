"""The PriorityClass record: its name, value, globalDefault and annotations (the plugin's settings and the
reclaim opt-in), decoded once (`priority_class_record`). Pure. A malformed value is carried as its
FieldProblem: a pod that takes its priority from the class is then protected, as a malformed pod is."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from automator.objects.fields import as_map
from automator.objects.resources import FieldError, FieldProblem, integer
from automator.objects.shapes import Shapes


class PriorityClass(msgspec.Struct, frozen=True):
    name: str
    value: int = 0
    global_default: bool = False
    annotations: Mapping[str, Any] = {}
    value_error: FieldProblem | None = None  # a value that is not an integer
    shape_error: FieldProblem | None = None  # the first field of a wrong shape (objects/shapes.py)

    def priority(self) -> int:
        """The value a pod of this class takes; FieldError when it is malformed."""
        if self.value_error is not None:
            raise self.value_error.error()
        return self.value


def priority_class_record(obj: Mapping[str, Any]) -> PriorityClass:
    """The record of one PriorityClass object (as the API and kubectl give it)."""
    meta = as_map(obj.get("metadata"))
    shapes = Shapes()
    _, _, annotations = shapes.metadata(meta)
    raw = obj.get("value", 0)
    try:
        value, error = integer(raw, "value"), None
    except FieldError as exc:
        value, error = 0, exc.found
    return PriorityClass(
        str(meta.get("name")),
        value,
        obj.get("globalDefault") is True,
        annotations,
        error,
        shapes.first,
    )


def priority_class_records(classes: Iterable[PriorityClass | Mapping[str, Any]]) -> list[PriorityClass]:
    """Records of classes given as records or as objects."""
    return [pc if isinstance(pc, PriorityClass) else priority_class_record(pc) for pc in classes]


def find_global_default(classes: Iterable[PriorityClass]) -> PriorityClass | None:
    # Kubernetes allows only one; if a snapshot has several, the lowest value is the cautious choice.
    defaults = [pc for pc in classes if pc.global_default]
    return min(defaults, key=lambda pc: pc.value) if defaults else None
