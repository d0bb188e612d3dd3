"""Reading one field of a Kubernetes object where the first field that does not parse ends the reading
(the DRA loaders, a Pod's claim references): the helpers every object kind shares. Pure.

A field that does not parse raises FieldError (objects/resources.py), naming the field relative to what the
helper was given; the reader catches it at the object that owns the field, and loops add the indexed prefix
(`under`) only when one is raised: formatting paths for every field of every object would be most of the
loading time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from automator.objects.resources import FieldError

EMPTY: Mapping[str, Any] = {}  # shared: what is read from it is never changed in place


def map_field(obj: Mapping[str, Any], key: str, prefix: str = "") -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return EMPTY
    if isinstance(value, (dict, Mapping)):  # dict first: the ABC check is slow
        return value
    raise FieldError(prefix + key, f"expected a map, got {type(value).__name__}")


def list_field(obj: Mapping[str, Any], key: str, prefix: str = "") -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise FieldError(prefix + key, f"expected a list, got {type(value).__name__}")
    return value


def str_field(obj: Mapping[str, Any], key: str, prefix: str = "", *, required: bool = True) -> str | None:
    value = obj.get(key)
    if isinstance(value, str) and value:
        return value
    if value is None or value == "":
        if required:
            raise FieldError(prefix + key, "missing")
        return None
    raise FieldError(prefix + key, f"expected a string, got {type(value).__name__}")


def as_map(value: Any) -> Mapping[str, Any]:
    """A map as decoded from JSON or YAML (always a dict), or none."""
    return value if isinstance(value, dict) else EMPTY


def is_name(value: Any) -> TypeGuard[str]:
    """The common case, checked without a call per field; the helpers above name the field otherwise."""
    return type(value) is str and value != ""


def item(value: Any) -> Mapping[str, Any]:
    if isinstance(value, (dict, Mapping)):
        return value
    raise FieldError("", f"expected a map, got {type(value).__name__}")
