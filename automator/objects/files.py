"""The kubectl file reader: the documents of a `kubectl get -o json|yaml` file or multi-document YAML,
parsed once with what no reader uses dropped, and the objects of a document (`*List` unpacked). Used by
the planner's snapshot (reclaim/snapshot.py), the DRA check and the KEDA scaler's file mode. Pure but for
reading the file it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import yaml

from automator.objects.keys import JsonObj
from steward_common.untrusted import UnreadableError, yaml_documents


class InputError(Exception):
    """Bad input; the message names the object and the field."""


# Keys no reader of a snapshot uses, dropped while parsing (before the objects under them are built):
# `kubectl get -o json|yaml` writes managedFields on every object, often half of its size.
DROPPED_KEYS = frozenset({"managedFields", "kubectl.kubernetes.io/last-applied-configuration"})

_YAML_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML has it


class _PruningLoader(_YAML_BASE):  # type: ignore[misc]
    """Safe YAML loader (libyaml's when available) that never builds the values of DROPPED_KEYS."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        node.value = [
            (k, v) for k, v in node.value if not (isinstance(k, yaml.ScalarNode) and k.value in DROPPED_KEYS)
        ]
        result: dict[Any, Any] = super().construct_mapping(node, deep)
        return result


def _lean(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without DROPPED_KEYS (in its metadata and annotations, where kubectl writes them)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    return obj


class _Listed(msgspec.Struct):
    """A JSON document read for its kind and its items, each item left as its bytes: an item is decoded,
    passed through `keep` (load_cluster's makes it its record) and released before the next one, so a large
    dump is never held decoded whole."""

    kind: Any = None
    items: list[msgspec.Raw] | None = None


_LISTED = msgspec.json.Decoder(_Listed)
_JSON = msgspec.json.Decoder()


def _json(data: bytes, keep: Callable[[JsonObj], JsonObj]) -> Any:
    """The JSON document (msgspec.DecodeError when it is not JSON), its objects passed through keep."""
    try:
        try:
            listed: _Listed | None = _LISTED.decode(data)
        except msgspec.ValidationError:  # not an object with a list of items: read whole, as it is
            listed = None
        if listed is None or listed.items is None or not str(listed.kind).endswith("List"):
            return _kept(_JSON.decode(data), keep)
        items = listed.items
        return {"kind": listed.kind, "items": [_one(_JSON.decode(raw), keep) for raw in items]}
    except RecursionError:
        raise UnreadableError("nested too deeply") from None
    except msgspec.ValidationError as exc:  # a number JSON can write but no reader can hold
        raise UnreadableError(str(exc)) from None


def _one(obj: Any, keep: Callable[[JsonObj], JsonObj]) -> Any:
    return keep(_lean(obj)) if isinstance(obj, dict) and "metadata" in obj else obj


def _kept(doc: Any, keep: Callable[[JsonObj], JsonObj]) -> Any:
    """A document with keep applied to it, or to each of its items when it is a List."""
    if not isinstance(doc, dict):
        return doc
    items = doc.get("items")
    if isinstance(items, list) and str(doc.get("kind")).endswith("List"):
        doc["items"] = [_one(item, keep) for item in items]
        return doc
    return _one(doc, keep)


def is_json(text: str | bytes) -> bool:
    """JSON is told by content, not by file name: a document that starts with `{` or `[`."""
    head = text[:4096].lstrip()
    return head[:1] in ("{", "[", b"{", b"[")


def documents(path: Path, keep: Callable[[JsonObj], JsonObj] | None = None) -> Iterator[Any]:
    """The documents of a `kubectl get -o json|yaml` file or multi-document YAML, DROPPED_KEYS left out.

    JSON (told by content) goes through json; YAML through libyaml's safe loader when PyYAML has it, else
    the pure one. keep: applied to every JSON object as soon as it is built (what it drops is never held
    for the whole file). InputError names the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    parsed = _documents(path, data, keep)
    del data  # held by the parser alone, which lets go of it once parsed
    try:
        yield from parsed
    except UnreadableError as exc:
        raise InputError(f"{path}: refused: {exc}") from None


def _documents(path: Path, data: bytes, keep: Callable[[JsonObj], JsonObj] | None) -> Iterator[Any]:
    keep = keep or _unchanged
    if is_json(data):
        try:
            doc = _json(data, keep)
        except msgspec.DecodeError:
            pass  # not JSON after all (a YAML flow mapping, say): the YAML parser reports it
        else:
            del data
            yield doc
            return
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid YAML/JSON: not UTF-8: {exc}") from exc
    del data
    try:
        for doc in yaml_documents(text, _PruningLoader):
            yield _kept(doc, keep)
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML/JSON: {exc}") from exc


def _unchanged(obj: JsonObj) -> JsonObj:
    return obj


def flatten(doc: Any, where: str, consume: bool = False) -> Iterator[tuple[Any, str]]:
    """The objects of one document: a `*List` is unpacked (recursively), `where` says where each was.
    consume: each List item is released once the caller has it (a large file is not held twice). An object
    a keep function decoded already (Decoded) comes as it is."""
    if doc is None:
        return
    if isinstance(doc, Decoded):
        yield doc, where
        return
    if not isinstance(doc, Mapping):
        raise InputError(f"{where}: expected a Kubernetes object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise InputError(f"{where}: items: expected a list")
        for i, item in enumerate(items):
            if consume:
                items[i] = None
            yield from flatten(item, f"{where} items[{i}]", consume)
        return
    yield dict(doc), where


class Decoded(NamedTuple):
    """An object a keep function (documents) checked and decoded as soon as it was parsed: flatten passes
    it on as it is."""

    kind: str
    label: str
    record: Any
