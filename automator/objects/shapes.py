"""What a decoder notes while it reads an object's fields: the first one whose shape is wrong (a list where a
map belongs, say). Pure.

The decoder reads around a wrong shape (the field counts as absent), so the live planner keeps its fail-safe
answers; a snapshot file, checked up front, is refused with the noted problem, which names the field.
Absent and null fields pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from automator.objects.fields import EMPTY
from automator.objects.resources import FieldProblem


class Shapes:
    __slots__ = ("noted",)

    def __init__(self) -> None:
        self.noted: dict[str, FieldProblem] = {}  # by path, in reading order

    @property
    def first(self) -> FieldProblem | None:
        return next(iter(self.noted.values()), None)

    def _wrong(self, path: str, expected: str, value: Any) -> None:
        self.noted.setdefault(path, FieldProblem(path, f"expected {expected}, got {type(value).__name__}"))

    def map(self, value: Any, path: str) -> Mapping[str, Any]:
        """value when it is a map (as JSON and YAML decode one), else an empty one."""
        if isinstance(value, dict):
            return value
        if value is not None:
            self._wrong(path, "a map", value)
        return EMPTY

    def items(self, value: Any, path: str) -> list[Any]:
        if isinstance(value, list):
            return value
        if value is not None:
            self._wrong(path, "a list", value)
        return []

    def maps(self, value: Any, path: str) -> list[Mapping[str, Any]]:
        """The items of a list of maps, each one that is not a map noted and left out."""
        return [self.map(item, f"{path}[{i}]") for i, item in enumerate(self.items(value, path))]

    def text(self, value: Any, path: str) -> Any:
        if value is not None and not isinstance(value, str):
            self._wrong(path, "a string", value)
        return value

    def metadata(self, meta: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any], Mapping[str, Any]]:
        """(namespace, labels, annotations) of an object's metadata, as every kind reads them."""
        namespace = self.text(meta.get("namespace"), "metadata.namespace")
        labels = self.map(meta.get("labels"), "metadata.labels")
        return namespace, labels, self.map(meta.get("annotations"), "metadata.annotations")
