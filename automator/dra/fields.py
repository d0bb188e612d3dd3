"""Reading one field of a Kubernetes object for the DRA loader: the helpers every object kind shares. Pure.

A field that does not parse raises `Unparsable`, naming the field; the loader catches it at the object that
owns the field and turns it into an `unparsable` finding (`unparsable_finding`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypeGuard

from automator.dra.model import UNPARSABLE, Finding
from steward_common.quantity import parse_quantity

# 2**63: no capacity or memory figure is larger; anything above is a typo or an attack on the sums.
MAX_AMOUNT = Decimal(2**63)
MAX_INT = 2**63

EMPTY: Mapping[str, Any] = {}

# The records' NamedTuples built without their generated __new__ (a Python call each, for records made per
# claim, pod and usage entry): the same tuple, the fields in declaration order.
new = tuple.__new__


class Unparsable(Exception):
    """A field that does not parse; caught at the object that owns it and turned into a finding.

    Helpers name the field relative to what they were given; loops add the indexed prefix only when one is
    raised (formatting paths for every field of every object would be most of the loading time).
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path, self.problem = path, problem

    def under(self, prefix: str) -> Unparsable:
        self.path = prefix + self.path if self.path else prefix.rstrip(".")
        return self

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def unparsable_finding(
    exc: Unparsable,
    label: str,
    *,
    node: str | None = None,
    device: str | None = None,
    claim: str | None = None,
    pod: str | None = None,
) -> Finding:
    return Finding(UNPARSABLE, node, device, claim, pod, f"{label}: {exc}")


def quantity(raw: Any, path: str, *, negative: bool = False) -> Decimal:
    """A quantity field as an exact number; Unparsable names the path. Bounded and, unless allowed, >= 0."""
    try:
        if isinstance(raw, str):
            value = parse_quantity(raw)
        elif isinstance(raw, int) and not isinstance(raw, bool):
            value = Decimal(raw)
        elif isinstance(raw, float) and math.isfinite(raw):
            value = Decimal(str(raw))
        else:
            raise ValueError(f"{raw!r} is not a Kubernetes quantity")
        if abs(value) > MAX_AMOUNT:
            raise ValueError(f"{raw!r} is larger than 2^63")
        if value < 0 and not negative:
            raise ValueError(f"{raw!r} is negative")
    except ValueError as exc:
        raise Unparsable(path, str(exc)) from None
    return value


def map_field(obj: Mapping[str, Any], key: str, prefix: str = "") -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return EMPTY
    if isinstance(value, (dict, Mapping)):  # dict first: the ABC check is slow
        return value
    raise Unparsable(prefix + key, f"expected a map, got {type(value).__name__}")


def list_field(obj: Mapping[str, Any], key: str, prefix: str = "") -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise Unparsable(prefix + key, f"expected a list, got {type(value).__name__}")
    return value


def str_field(obj: Mapping[str, Any], key: str, prefix: str = "", *, required: bool = True) -> str | None:
    value = obj.get(key)
    if isinstance(value, str) and value:
        return value
    if value is None or value == "":
        if required:
            raise Unparsable(prefix + key, "missing")
        return None
    raise Unparsable(prefix + key, f"expected a string, got {type(value).__name__}")


def is_name(value: Any) -> TypeGuard[str]:
    """The common case, checked without a call per field; the helpers above name the field otherwise."""
    return type(value) is str and value != ""


def item(value: Any) -> Mapping[str, Any]:
    if isinstance(value, (dict, Mapping)):
        return value
    raise Unparsable("", f"expected a map, got {type(value).__name__}")
