"""A `kubectl get -o json` file read for the DRA loader with msgspec: only the fields the loader reads. Pure.

msgspec decodes the document straight into the Structs below, in C: every object keeps its kind, name,
namespace, uid, and of its spec and status only the fields the loader reads (automator/dra/load_*.py);
the rest (managedFields, labels, annotations, container images and env, container statuses, allocation
node selectors: most of a dump) is never built. Each object is then one small dict of those fields, which
the loader reads as it reads any object, with where it was in the file as reclaim/snapshot.py's flatten
says it. A document of another shape (not JSON, a number out of range, metadata that is not a map, ...)
gives None, and the caller reads the file with the general reader (reclaim/snapshot.py), which reports or
accepts it as it always did: what this reader accepts, it reads the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

import msgspec

from automator.reclaim.snapshot import is_json


def _typed(name: str, fields: dict[str, Any]) -> Any:
    """A total=False TypedDict of these fields: msgspec keeps exactly them and skips every other key."""
    return TypedDict(name, fields, total=False)  # type: ignore[operator]


# Any JSON value, but an object of the type given (a map: only its fields), or a list of them: a field the
# loader reads in the usual shape, that may have any other shape (the loader reports it, unparsable).
def _map_or_any(of: Any) -> Any:
    return of | list[Any] | str | int | float | bool | None


def _list_or_any(of: Any) -> Any:
    return list.__class_getitem__(_map_or_any(of)) | dict[str, Any] | str | int | float | bool | None


_Resources = _typed("_Resources", {"claims": Any})
_Containers = _list_or_any(_typed("_Container", {"name": Any, "resources": _map_or_any(_Resources)}))
# The fields the loader reads of each kind's spec and status, in one map for all kinds (a field of one
# kind never appears in another's): Pod, ResourceSlice, DeviceClass spec; ResourceClaim, Pod, Node status.
_SPEC_FIELDS = ("nodeName", "resourceClaims", "driver", "pool", "extendedResourceName", "selectors")
_Spec = _typed(
    "_Spec",
    {
        **dict.fromkeys(_SPEC_FIELDS, Any),
        "containers": _Containers,
        "initContainers": _Containers,
        # a ResourceSlice's devices (a list); a ResourceClaim's requests (a map), which nothing reads
        "devices": list[Any] | _typed("_Requests", {}) | str | int | float | bool | None,
    },
)
_Allocation = _typed("_Allocation", {"devices": _map_or_any(_typed("_Results", {"results": Any}))})
_Status = _typed(
    "_Status",
    {
        **dict.fromkeys(("reservedFor", "resourceClaimStatuses", "allocatable"), Any),
        "allocation": _map_or_any(_Allocation),
    },
)


class _Metadata(msgspec.Struct):
    name: Any = None
    namespace: Any = None
    uid: Any = None


class _Object(msgspec.Struct):
    kind: Any = None
    metadata: _Metadata | None = None
    spec: _map_or_any(_Spec) = None  # type: ignore[valid-type]
    status: _map_or_any(_Status) = None  # type: ignore[valid-type]
    items: list[_Object] | msgspec.UnsetType | None = msgspec.UNSET  # a List's objects (null: none)


_DECODER = msgspec.json.Decoder(_Object)


def _pairs(obj: _Object, where: str, out: list[tuple[Mapping[str, Any], str]]) -> None:
    """As automator/reclaim/snapshot.py's flatten: a List's items (recursively), each with where it was."""
    kind = obj.kind
    items = obj.items
    if items is not msgspec.UNSET and isinstance(kind, str) and kind.endswith("List"):
        for i, item in enumerate(items or ()):
            _pairs(item, f"{where} items[{i}]", out)
        return
    meta = obj.metadata
    fields = None if meta is None else {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid}
    out.append(({"kind": kind, "metadata": fields, "spec": obj.spec, "status": obj.status}, where))


def json_bytes(path: Path) -> bytes | None:
    """The file's bytes when they are JSON by content (as the general reader tells it), else None: the
    general reader reads, reports or refuses it."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if is_json(data) else None


def read_json_objects(path: Path) -> list[tuple[Mapping[str, Any], str]] | None:
    """(object, where) pairs of the file's one JSON document, or None when msgspec does not read it."""
    data = json_bytes(path)
    if data is None:
        return None
    try:
        doc = _DECODER.decode(data)  # a top-level array is no _Object: ValidationError
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # the general reader reports it
        return None
    del data
    out: list[tuple[Mapping[str, Any], str]] = []
    _pairs(doc, f"{path} document 0", out)
    return out


def read_json_document(path: Path) -> tuple[Any] | None:
    """(the file's one JSON document,) decoded by msgspec into plain dicts and lists (the usage file), or
    None when msgspec does not read it: then the general reader reports or accepts it as it always did."""
    data = json_bytes(path)
    if data is None:
        return None
    try:
        return (msgspec.json.decode(data),)
    except (msgspec.DecodeError, RecursionError):  # the general reader reports it
        return None
