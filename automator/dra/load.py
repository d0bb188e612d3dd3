"""Cluster objects (ResourceSlices, ResourceClaims, DeviceClasses, Pods, Nodes) -> DRA records. Pure.

Every field the checks read is parsed here once. A field that does not parse becomes an `unparsable`
finding naming the object and the field, and only that field is left out: the rest of the object is still
checked, and nothing is skipped silently. Only input that is not a set of objects at all (unreadable file,
not YAML, wrong top-level shape) is an error (`DraInputError`), which the CLI turns into exit status 2.

By kind: load_slices.py (ResourceSlices, DeviceClasses), load_claims.py, load_pods.py (Pods, Nodes); the
field helpers they share are in fields.py. Here: the dispatch by kind, the files, the usage entries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from automator.dra.cache import RecordCache
from automator.dra.fields import MAX_AMOUNT, MAX_INT, is_name, new
from automator.dra.load_claims import ClaimLoader
from automator.dra.load_pods import load_node, read_pod, usual_pod
from automator.dra.load_slices import SliceLoader, parse_slice
from automator.dra.model import UNPARSABLE, ContainerUsage, Finding, Records
from automator.dra.read_json import read_json_document, read_json_objects
from automator.gc_pause import gc_paused
from automator.snapshot import InputError, documents, flatten

KINDS = ("ResourceSlice", "ResourceClaim", "DeviceClass", "Pod", "Node")

# Input that is not a set of objects at all; the message names the file and the place. The same error as
# the snapshot loader's, whose List flattening is reused.
DraInputError = InputError


class _Loader:
    def __init__(self, cache: RecordCache | None = None) -> None:
        self.records = Records()
        self._slices = SliceLoader()
        self._claims = ClaimLoader(self.records.findings)
        self._findings, self._claim_list, self._pods = (
            self.records.findings,
            self.records.claims,
            self.records.pods,
        )
        self._cache = cache

    def add(self, obj: Mapping[str, Any], where: str) -> None:
        kind = obj.get("kind")
        if kind not in KINDS:
            return  # other kinds play no part
        meta = obj.get("metadata")
        if type(meta) is not dict and not isinstance(meta, Mapping):
            meta = {}
        name, namespace = meta.get("name"), meta.get("namespace")
        if type(name) is not str or not name:
            self._missing(kind, where, "metadata.name")
        elif (kind == "ResourceClaim" or kind == "Pod") and (type(namespace) is not str or not namespace):
            self._missing(kind, where, "metadata.namespace")
        elif kind == "DeviceClass":
            self._slices.add_device_class(obj, name)
        elif self._cache is None:
            self._use(kind, self._read(obj, kind, name, namespace), namespace, name)
        else:
            self._cached(obj, kind, meta, name, namespace)

    def _cached(self, obj: Mapping[str, Any], kind: str, meta: Mapping[str, Any], name: str, ns: Any) -> None:
        """As `_read` then `_use`, through the cache when the object names its version."""
        assert self._cache is not None
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not (type(uid) is str and uid and type(version) is str and version):
            self._use(kind, self._read(obj, kind, name, ns), ns, name)
            return
        entry = self._cache.get(kind, uid, version)
        if entry is None:
            before = len(self._findings)
            made = self._read(obj, kind, name, ns)
            found = tuple(self._findings[before:])
            del self._findings[before:]
            entry = (kind, made, found)
            self._cache.put(kind, uid, version, made, found)
        self._findings.extend(entry[2])
        self._use(kind, entry[1], ns, name)

    def _read(self, obj: Mapping[str, Any], kind: str, name: str, namespace: Any) -> Any:
        """What the object's records are, read from it alone (its findings appended)."""
        if kind == "ResourceClaim":
            return self._claims.claim(obj, namespace, name)
        if kind == "Pod":
            return usual_pod(obj, namespace, name) or read_pod(obj, namespace, name, self._findings)
        if kind == "ResourceSlice":
            return parse_slice(obj, f"ResourceSlice {name}")
        return load_node(obj, f"Node {name}", name, self._findings)

    def _use(self, kind: str, made: Any, namespace: Any, name: str) -> None:
        if kind == "ResourceClaim":
            self._claim_list.append(made)
        elif kind == "Pod":
            self._pods[f"{namespace}/{name}"] = made
        elif kind == "ResourceSlice":
            self._slices.add_parsed(made, self._findings)
        else:
            self.records.nodes[name] = made

    def _missing(self, kind: str, where: str, field: str) -> None:
        self._findings.append(
            Finding(UNPARSABLE, None, None, None, None, f"{kind} at {where}: {field}: missing")
        )

    def finish(self) -> Records:
        self._slices.finish(self.records.devices, self.records.findings)
        return self.records


def load_objects(
    objects: Iterable[tuple[Mapping[str, Any], str]], cache: RecordCache | None = None
) -> Records:
    """Records from (object, where it came from) pairs; other kinds are ignored. With a cache (the
    service's API objects, automator/dra/cache.py), an object version loaded in the previous pass is not
    read again."""
    loader = _Loader(cache)
    if cache is not None:
        cache.start()
    with gc_paused():
        for obj, where in objects:
            loader.add(obj, where)
        records = loader.finish()
    if cache is not None:
        cache.finish()
    return records


# --- files ---------------------------------------------------------------------------------------------


def read_objects(path: Path) -> list[tuple[Mapping[str, Any], str]]:
    """(object, where) pairs of a `List` (`kubectl get ... -o yaml|json`) or multi-document YAML.

    A JSON document goes through msgspec, keeping only the fields the loader reads (read_json.py); anything
    msgspec does not read, through the general reader (automator/snapshot.py)."""
    objects = read_json_objects(path)
    if objects is not None:
        return objects
    objects = []
    for d, doc in enumerate(documents(path)):
        objects.extend(flatten(doc, f"{path} document {d}"))
    return objects


def load_cluster_file(path: Path) -> Records:
    """A `List` (`kubectl get ... -o yaml|json`) or multi-document YAML of the five kinds."""
    return load_objects(read_objects(path))


_USAGE_KEYS = ("namespace", "pod", "container", "gpu_uuid")
_MISSING = object()


def _usage_memory(raw: Any, file: str, index: int) -> Decimal | None:
    if raw is None:
        return None  # unknown: never compared
    where = f"{file} containers[{index}]"
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise DraInputError(f"{where}: memory_bytes: {raw!r} is not a number")
    if raw < 0 or raw > MAX_AMOUNT:
        raise DraInputError(f"{where}: memory_bytes: {raw!r} is not between 0 and 2^63")
    return Decimal(raw) if isinstance(raw, int) else Decimal(str(raw))


def parse_usage(doc: Any, where: str) -> list[ContainerUsage]:
    """`containers: [{namespace, pod, container, gpu_uuid, memory_bytes}]`; DraInputError names the field."""
    if not isinstance(doc, Mapping):
        raise DraInputError(f"{where}: expected one YAML mapping with a `containers` list")
    entries = doc.get("containers")
    if not isinstance(entries, list):
        raise DraInputError(f"{where}: containers: expected a list")
    with gc_paused():
        return _usage_entries(entries, where)


def _usage_entries(entries: list[Any], where: str) -> list[ContainerUsage]:
    usage: list[ContainerUsage] = []
    seen: set[tuple[str, str, str, str]] = set()
    add, append = seen.add, usage.append
    for i, entry in enumerate(entries):
        if type(entry) is not dict and not isinstance(entry, Mapping):
            raise DraInputError(f"{where} containers[{i}]: expected a mapping")
        ns, pod = entry.get("namespace"), entry.get("pod")
        container, uuid = entry.get("container"), entry.get("gpu_uuid")
        if not (
            (type(ns) is str and ns != "")
            and (type(pod) is str and pod != "")
            and (type(container) is str and container != "")
            and (type(uuid) is str and uuid != "")
        ):
            missing = next(k for k in _USAGE_KEYS if not is_name(entry.get(k)))
            raise DraInputError(f"{where} containers[{i}]: {missing}: missing")
        raw = entry.get("memory_bytes", _MISSING)
        if raw is _MISSING:
            raise DraInputError(f"{where} containers[{i}]: memory_bytes: missing")
        ident = (ns, pod, container, uuid)
        if ident in seen:
            raise DraInputError(f"{where} containers[{i}]: {'/'.join(ident)} listed twice")
        add(ident)
        if type(raw) is int and 0 <= raw <= MAX_INT:  # the usual case, without the checks of _usage_memory
            memory: Decimal | None = Decimal(raw)
        else:
            memory = _usage_memory(raw, where, i)
        append(new(ContainerUsage, (ns, pod, container, uuid, memory)))
    return usage


def load_usage_file(path: Path) -> list[ContainerUsage]:
    """The usage file: JSON (told by content, as a script writing Prometheus' answer would) through msgspec,
    anything else (YAML, JSON msgspec does not read) through the general reader."""
    read = read_json_document(path)
    docs = [d for d in (documents(path) if read is None else read) if d is not None]
    if len(docs) != 1:
        raise DraInputError(f"{path}: expected one YAML mapping with a `containers` list")
    return parse_usage(docs[0], str(path))
