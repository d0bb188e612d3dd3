"""The DRA loader's `unparsable` findings and its bounds. Pure.

The field helpers it shares with the Pod record are automator/objects/fields.py's, and its quantities are
read by objects/resources.py's `quantity` (bounded: `quantity` here); a FieldError is caught at the object
that owns the field and its FieldProblem turned into an `unparsable` finding (`unparsable_finding`).
"""

from __future__ import annotations

from functools import partial

from automator.dra.model import UNPARSABLE, Finding
from automator.objects import resources
from automator.objects.resources import FieldProblem

MAX_INT = 2**63  # no count or byte figure is larger
# The DRA checks' quantities: the objects' reader, bounded to 2^63 (no sum of them overflows); a claim's
# consumed amounts may be negative (negative=True), which the invalid-consumption check judges.
quantity = partial(resources.quantity, bounded=True)

# The records' NamedTuples built without their generated __new__ (a Python call each, for records made per
# claim, pod and usage entry): the same tuple, the fields in declaration order.
new = tuple.__new__


def unparsable_finding(
    problem: FieldProblem,
    label: str,
    *,
    node: str | None = None,
    device: str | None = None,
    claim: str | None = None,
    pod: str | None = None,
) -> Finding:
    return Finding(UNPARSABLE, node, device, claim, pod, f"{label}: {problem}")
