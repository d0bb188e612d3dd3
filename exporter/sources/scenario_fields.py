"""Typed readers of a scenario's fields (pure): each takes the value and its field path, returns the
typed value or raises ScenarioError naming the path (``gpus[2].processes[0].pid: ...``)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from exporter.sources.scenario_model import MAX_BYTES, MAX_COUNT, MAX_SECONDS, ScenarioError
from steward_common.quantity import parse_quantity


def fail(path: str, message: str) -> ScenarioError:
    return ScenarioError(f"{path}: {message}")


def mapping(
    value: Any, path: str, allowed: Collection[str], required: Collection[str] = ()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(path or "(document)", f"expected a mapping, got {type(value).__name__}")
    for key in value:
        if key not in allowed:
            raise fail(
                f"{path}.{key}" if path else str(key),
                f"unknown field (allowed: {', '.join(sorted(allowed))})",
            )
    for key in sorted(required):
        if key not in value:
            raise fail(f"{path}.{key}" if path else key, "required field missing")
    return value


def items(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise fail(path, f"expected a list, got {type(value).__name__}")
    return value


def text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise fail(path, f"expected a non-empty string, got {value!r}")
    return value


def flag(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise fail(path, f"expected true or false, got {value!r}")
    return value


def integer(value: Any, path: str, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    # bool is an int subclass; `pid: true` is a typo, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise fail(path, f"expected an integer >= {minimum}, got {value!r}")
    if value > maximum:
        raise fail(path, f"expected an integer between {minimum} and {maximum}, got {value!r}")
    return value


def number(value: Any, path: str, minimum: float = 0.0, maximum: float | None = MAX_SECONDS) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fail(path, f"expected a number, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise fail(path, f"expected a number {bound}, got {value!r}")
    return float(value)


def optional_number(raw: Mapping[str, Any], key: str, path: str) -> float | None:
    """A number field that may be left out or null."""
    return None if raw.get(key) is None else number(raw[key], f"{path}.{key}" if path else key)


def byte_count(value: Any, path: str) -> int:
    """Bytes as an integer or a Kubernetes quantity string ("80Gi", "512Mi", "80G")."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # `8.0e+10` is YAML for a whole number of bytes
    if isinstance(value, str):
        try:
            quantity = parse_quantity(value)
        except ValueError as e:
            raise fail(path, f"not a byte quantity (bytes, or e.g. 80Gi, 512Mi, 80G): {value!r}") from e
        if quantity < 0:
            raise fail(path, f"expected a non-negative quantity, got {value!r}")
        if quantity != quantity.to_integral_value():
            raise fail(path, f"not a whole number of bytes: {value!r}")
        value = int(quantity)
    elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(path, f"expected bytes (an integer >= 0) or a quantity such as 80Gi, got {value!r}")
    if value > MAX_BYTES:
        raise fail(path, f"expected at most {MAX_BYTES} bytes (1Pi), got {value!r}")
    return int(value)
