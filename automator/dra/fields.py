"""The DRA loader's exact quantities and its `unparsable` findings. Pure.

The field helpers it shares with the Pod record are automator/objects/fields.py's; an `Unparsable` is caught
at the object that owns the field and turned into an `unparsable` finding (`unparsable_finding`).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from automator.dra.model import UNPARSABLE, Finding
from automator.objects.fields import Unparsable
from steward_common.quantity import parse_quantity

# 2**63: no capacity or memory figure is larger; anything above is a typo or an attack on the sums.
MAX_AMOUNT = Decimal(2**63)
MAX_INT = 2**63

# The records' NamedTuples built without their generated __new__ (a Python call each, for records made per
# claim, pod and usage entry): the same tuple, the fields in declaration order.
new = tuple.__new__


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
