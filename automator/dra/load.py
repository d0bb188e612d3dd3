"""Cluster objects (ResourceSlices, ResourceClaims, DeviceClasses, Pods, Nodes) -> DRA records. Pure.

Every field the checks read is parsed here once. A field that does not parse becomes an `unparsable`
finding naming the object and the field, and only that field is left out: the rest of the object is still
checked, and nothing is skipped silently. Only input that is not a set of objects at all (unreadable file,
not YAML, wrong top-level shape) is an error (`DraInputError`), which the CLI turns into exit status 2.

By kind: load_slices.py (ResourceSlices, DeviceClasses), load_claims.py; the field helpers they share are
in fields.py. Pods and Nodes are read by their records' decoders (automator/objects/): here, what the checks
take of those records, the dispatch by kind, the files, the usage entries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from automator.dra.fields import MAX_INT, new, quantity, unparsable_finding
from automator.dra.load_claims import ClaimLoader
from automator.dra.load_slices import DEVICE_PLUGIN_GPU, SliceLoader, parse_slice
from automator.dra.model import UNPARSABLE, Finding, Node, Pod, Records
from automator.objects.cache import RecordCache, version_key
from automator.objects.fields import is_name
from automator.objects.files import InputError, documents, flatten
from automator.objects.node import node_record
from automator.objects.pod import pod_record
from automator.objects.resources import MAX_AMOUNT, FieldError
from automator.ports import ContainerUsage
from steward_common.gc_pause import gc_paused

KINDS = ("ResourceSlice", "ResourceClaim", "DeviceClass", "Pod", "Node")

# What loading one object version made, kept across passes (automator/objects/cache.py): its kind, its
# record (a claim, a pod, a parsed slice, a node), the findings reading it gave, and the key the records know
# it by (namespace/name of a claim or a pod, the name of a slice or a node).
Entry = tuple[str, Any, tuple[Finding, ...], str]

# Input that is not a set of objects at all; the message names the file and the place. The same error as
# the kubectl file reader's (objects/files.py), whose List flattening is reused.
DraInputError = InputError


class _Loader:
    def __init__(self, cache: RecordCache[Entry] | None = None) -> None:
        self.records = Records()
        self._slices = SliceLoader()
        self._claims = ClaimLoader(self.records.findings)
        self._findings = self.records.findings
        self._cache = cache

    def add(self, obj: Mapping[str, Any], where: str) -> None:
        """One object's records, read from it alone, with its findings; kept in the cache when the object
        names its version."""
        kind = obj.get("kind")
        if kind not in KINDS:
            return  # other kinds play no part
        meta = obj.get("metadata")
        if type(meta) is not dict and not isinstance(meta, Mapping):
            meta = {}
        name, namespace = meta.get("name"), meta.get("namespace")
        if type(name) is not str or not name:
            self._missing(kind, where, "metadata.name")
            return
        findings = self._findings
        before = len(findings)
        if kind == "ResourceClaim" or kind == "Pod":
            if type(namespace) is not str or not namespace:
                self._missing(kind, where, "metadata.namespace")
                return
            key = f"{namespace}/{name}"
            if kind == "ResourceClaim":
                made: Any = self._claims.claim(obj, namespace, name)
            else:
                made = _pod(obj, namespace, name, findings)
        elif kind == "ResourceSlice":
            key, made = name, parse_slice(obj, f"ResourceSlice {name}")
        elif kind == "Node":
            key, made = name, _node(obj, name, findings)
        else:
            self._slices.add_device_class(obj, name)
            return
        if self._cache is not None:
            self._cache.put(version_key(obj), (kind, made, tuple(findings[before:]), key))
        self._use(kind, made, key)

    def add_versioned(
        self, objects: Sequence[Mapping[str, Any]], where: str, cache: RecordCache[Entry]
    ) -> None:
        """As `add` for each object, but an object version the previous pass loaded is not read again
        (a uid names one object of one kind: an entry of another kind is not taken)."""
        listed = cache.get_listed(objects)
        if listed is None:  # not every object names its version: one by one
            keys: Iterable[Any] = map(version_key, objects)
            entries: Iterable[Entry | None] = map(cache.get, map(version_key, objects))
        else:
            keys, entries = listed
        findings, use, keep = self._findings, self._use, cache.keep
        for obj, key, entry in zip(objects, keys, entries, strict=True):
            if entry is None or entry[0] != obj.get("kind"):
                self.add(obj, where)
                continue
            keep(key, entry)
            if entry[2]:
                findings.extend(entry[2])
            use(entry[0], entry[1], entry[3])

    def _use(self, kind: str, made: Any, key: str) -> None:
        """The records of one object into the pass's records."""
        if kind == "ResourceClaim":
            self.records.claims.append(made)
        elif kind == "Pod":
            self.records.pods[key] = made
        elif kind == "ResourceSlice":
            self._slices.add_parsed(made, self._findings)
        else:
            self.records.nodes[key] = made

    def _missing(self, kind: str, where: str, field: str) -> None:
        self._findings.append(
            Finding(UNPARSABLE, None, None, None, None, f"{kind} at {where}: {field}: missing")
        )

    def finish(self) -> Records:
        self._slices.finish(self.records.devices, self.records.findings)
        return self.records


def _pod(obj: Mapping[str, Any], namespace: str, name: str, findings: list[Finding]) -> Pod:
    """The pod's claim references; the first field that does not parse is one `unparsable` finding."""
    record = pod_record(obj)
    error = record.claims_error
    # the claim fields are read after the node name: a pod whose spec or node name is malformed is on no node
    node = None if error and error.path in ("spec", "spec.nodeName") else record.node_name or None
    key = f"{namespace}/{name}"
    if error is not None:
        findings.append(unparsable_finding(error, f"Pod {key}", node=node, pod=key))
    return Pod(namespace, name, record.uid, node, record.claim_names, record.container_claims)


def _node(obj: Mapping[str, Any], name: str, findings: list[Finding]) -> Node:
    """The node's allocatable device-plugin GPU resources above zero; each amount that does not parse, and an
    allocatable that is not a map, is one `unparsable` finding."""
    record, label = node_record(obj), f"Node {name}"
    if record.allocatable_error is not None:
        findings.append(unparsable_finding(record.allocatable_error, label, node=name))
    gpus: dict[str, Decimal] = {}
    for resource, raw in record.allocatable.items():
        if DEVICE_PLUGIN_GPU.fullmatch(str(resource)):
            try:
                amount = quantity(raw, f"status.allocatable.{resource}")
            except FieldError as exc:
                findings.append(unparsable_finding(exc.found, label, node=name))
                continue
            if amount > 0:
                gpus[str(resource)] = amount
    return Node(name, gpus)


def load_objects(objects: Iterable[tuple[Mapping[str, Any], str]]) -> Records:
    """Records from (object, where it came from) pairs; other kinds are ignored."""
    loader = _Loader()
    with gc_paused():
        for obj, where in objects:
            loader.add(obj, where)
        return loader.finish()


def load_api_objects(
    objects: Sequence[Mapping[str, Any]], cache: RecordCache[Entry], where: str = "API"
) -> Records:
    """Records from the API server's objects, as load_objects; an object version the previous call loaded
    is not read again (automator/objects/cache.py: the service lists the same objects every pass)."""
    loader = _Loader(cache)
    cache.start()
    with gc_paused():
        loader.add_versioned(objects, where, cache)
        records = loader.finish()
    cache.finish()
    return records


# --- files ---------------------------------------------------------------------------------------------


def read_objects(path: Path) -> list[tuple[Mapping[str, Any], str]]:
    """(object, where) pairs of a `List` (`kubectl get ... -o yaml|json`) or multi-document YAML."""
    objects: list[tuple[Mapping[str, Any], str]] = []
    for d, doc in enumerate(documents(path)):
        objects.extend(flatten(doc, f"{path} document {d}", consume=True))
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
    """The usage file: JSON (told by content, as a script writing Prometheus' answer would) or YAML."""
    docs = [d for d in documents(path) if d is not None]
    if len(docs) != 1:
        raise DraInputError(f"{path}: expected one YAML mapping with a `containers` list")
    return parse_usage(docs[0], str(path))
