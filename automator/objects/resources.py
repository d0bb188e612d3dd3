"""Pure readers of Kubernetes objects: quantities, priorities, pod status and times.

Every reader raises FieldError (a ValueError carrying a FieldProblem: the field's path and what is wrong) on
malformed data, so the snapshot adapter can turn it into an InputError and the live planner can treat the
object safely; a record keeps the FieldProblem as a value and raises it when the field is read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from steward_common.quantity import MAX_LENGTH, parse_quantity


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """A malformed field of a Kubernetes object: its path (e.g. spec.containers[0].resources) and what is
    wrong with it. Records keep it as a value; `error()` raises it."""

    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"

    def under(self, prefix: str) -> FieldProblem:
        """The problem as read from a parent: "spec." + "nodeName" ("" gives the prefix without its dot)."""
        return FieldProblem(prefix + self.path if self.path else prefix.rstrip("."), self.problem)

    def error(self) -> FieldError:
        """A fresh exception each time: a record's problem is raised on every pass that reads it."""
        return FieldError(self.path, self.problem)


class FieldError(ValueError):
    """A FieldProblem raised; caught at the object that owns the field, which keeps `found`."""

    def __init__(self, path: str, problem: str) -> None:
        self.found = FieldProblem(path, problem)
        super().__init__(str(self.found))


def kept(read: Callable[..., int], *args: Any) -> int | FieldProblem:
    """read(*args) at decoding, or the problem it raised: a record keeps either (read back by `amount`)."""
    try:
        return read(*args)
    except FieldError as exc:
        return exc.found


def amount(value: int | FieldProblem) -> int:
    """An amount a record read at decoding, or the problem it met raised."""
    if isinstance(value, FieldProblem):
        raise value.error()
    return value


# The resources read as themselves (scaled); every other resource a container names is counted in whole
# devices, and the planner's setting says which of them are GPUs.
CPU_AND_MEMORY = ("cpu", "memory")


@dataclass(frozen=True)
class Requests:
    """What a pod takes from its node: whole GPUs, cpu in millicores, memory in bytes."""

    gpus: int
    cpu_m: int
    memory: int


# 2**63: no DRA capacity or claimed amount is larger; anything above is a typo or an attack on the sums.
MAX_AMOUNT = Decimal(2**63)


def quantity(value: Any, field: str, *, negative: bool = False, bounded: bool = False) -> Decimal:
    """A quantity field as an exact number: a string by the API's grammar, a YAML or JSON number through its
    text (0.1 is 0.1, as the API server reads it, not the binary float's 0.1000000000000000055...).
    At least 0 unless `negative`; at most 2^63 in size when `bounded` (the DRA checks' sums)."""
    if type(value) is str:
        try:
            result = parse_quantity(value)
        except ValueError:  # a hostile length is not echoed whole
            shown = repr(value) if len(value) <= MAX_LENGTH else f"{value[:MAX_LENGTH]!r}..."
            raise FieldError(field, f"{shown} is not a quantity") from None
    elif isinstance(value, int) and not isinstance(value, bool):
        result = Decimal(value)
    elif isinstance(value, float) and math.isfinite(value):
        result = Decimal(str(value))
    else:
        raise FieldError(field, f"{value!r} is not a quantity")
    if bounded and abs(result) > MAX_AMOUNT:
        raise FieldError(field, f"{value!r} is larger than 2^63")
    if result < 0 and not negative:
        raise FieldError(field, f"{value!r} is not a non-negative quantity")
    return result


def whole(value: Any, field: str) -> int:
    """A GPU count: extended resources are whole numbers."""
    result = quantity(value, field)
    if result != result.to_integral_value():
        raise FieldError(field, f"{value!r} is not a whole number of devices")
    return int(result)


def scaled(value: Any, scale: int, field: str) -> int:
    """A quantity times `scale` (1000: millicores), rounded up as the scheduler does."""
    return math.ceil(quantity(value, field) * scale)


def floored(value: Any, scale: int, field: str) -> int:
    """A quantity times `scale`, rounded down (what a node offers)."""
    return math.floor(quantity(value, field) * scale)


def integer(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(field, f"{value!r} is not an integer")
    return value


# RFC 3339 date-time: fromisoformat alone would also take ISO forms such as 20250601T1200Z or a bare date.
# ASCII digits only (\d takes any script's)
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def rfc3339(t: datetime) -> str:
    """The API's timestamp form (UTC, whole seconds, Z), as annotations and Events carry it."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any, field: str) -> datetime:
    """RFC 3339 (trailing Z or a numeric offset, optional fraction); always timezone-aware, in UTC."""
    if isinstance(value, datetime):  # YAML decodes an unquoted time itself
        if value.tzinfo is None:
            raise FieldError(field, f"{value!r} has no time zone")
        return value.astimezone(UTC)
    text = value.strip() if isinstance(value, str) else ""
    if _RFC3339.fullmatch(text):  # it has a zone, so the time is aware
        try:
            return datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00")).astimezone(UTC)
        except ValueError:
            pass  # a day or hour out of range
    raise FieldError(field, f"{value!r} is not an RFC 3339 time")
