"""Pure readers of Kubernetes objects: quantities, priorities, pod status and times.

Every reader raises FieldError (a ValueError naming the field path) on malformed data, so the snapshot
adapter can turn it into an InputError and the live planner can treat the object safely.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from steward_common.quantity import parse_quantity


class FieldError(ValueError):
    """Malformed field of a Kubernetes object; `field` is its path, e.g. spec.containers[0].resources."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# The resources read as themselves (scaled); every other resource a container names is counted in whole
# devices, and the planner's setting says which of them are GPUs.
CPU_AND_MEMORY = ("cpu", "memory")


@dataclass(frozen=True)
class Requests:
    """What a pod takes from its node: whole GPUs, cpu in millicores, memory in bytes."""

    gpus: int
    cpu_m: int
    memory: int


def quantity(value: Any, field: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise FieldError(field, f"{value!r} is not a quantity")
    try:
        result = parse_quantity(value) if isinstance(value, str) else Decimal(value)
    except (ValueError, InvalidOperation, TypeError) as exc:
        raise FieldError(field, f"{value!r} is not a quantity") from exc
    if not result.is_finite() or result < 0:
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
