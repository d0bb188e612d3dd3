"""YAML for the exporter's own files (scenarios, the web config): safe, fast, and strict about
duplicate keys, which plain YAML loading lets through (the last one silently wins) (pure)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from steward_common.untrusted import UnreadableError, json_document, yaml_document


class DuplicateKeyError(ValueError):
    pass


__all__ = ["DuplicateKeyError", "UnreadableError", "load"]


# libyaml's safe loader when PyYAML was built with it (it parses in C: large scenarios load several times
# faster), else the pure-Python one.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_SafeLoader):  # type: ignore[valid-type,misc]
    pass


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            duplicate = key in result
        except TypeError:
            raise DuplicateKeyError(f"line {line}: a key must be a scalar") from None
        if duplicate:
            raise DuplicateKeyError(f"line {line}: duplicate key {key!r}")
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise DuplicateKeyError(f"duplicate key {key!r}")
        result[key] = value
    return result


def load(text: str) -> Any:
    """Parse one YAML document; yaml.YAMLError when malformed, DuplicateKeyError on a repeated key,
    UnreadableError (steward_common/untrusted.py) past the limits on aliases, nesting and numbers.

    JSON (told by content: it starts with `{`) is parsed by json, many times faster than a YAML parser;
    text that only looks like JSON (a YAML flow mapping) falls back to YAML."""
    if text.lstrip().startswith("{"):
        try:
            return json_document(text, object_pairs_hook=_json_object)
        except json.JSONDecodeError:
            pass
    return yaml_document(text, _StrictLoader)
