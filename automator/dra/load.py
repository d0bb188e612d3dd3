"""Cluster objects (ResourceSlices, ResourceClaims, DeviceClasses, Pods, Nodes) -> DRA records. Pure.

Every field the checks read is parsed here once. A field that does not parse becomes an `unparsable`
finding naming the object and the field, and only that field is left out: the rest of the object is still
checked, and nothing is skipped silently. Only input that is not a set of objects at all (unreadable file,
not YAML, wrong top-level shape) is an error (`DraInputError`), which the CLI turns into exit status 2.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeGuard

from automator.dra.model import (
    UNPARSABLE,
    Allocation,
    Capacity,
    Claim,
    ContainerClaimRef,
    ContainerUsage,
    Device,
    DeviceId,
    Finding,
    Node,
    Pod,
    PodConsumer,
    Records,
)
from automator.gc_pause import gc_paused
from automator.quantity import parse_quantity
from automator.snapshot import InputError, documents, flatten

KINDS = ("ResourceSlice", "ResourceClaim", "DeviceClass", "Pod", "Node")

# A driver counts as a GPU driver (for mixed-mode) when its name says so, as the NVIDIA and HAMi drivers'
# do ("gpu.nvidia.com", "hami-core-gpu.project-hami.io"), or when a DeviceClass named like a GPU class
# selects it by `device.driver == "..."`.
_GPU_WORD = re.compile(r"gpu", re.IGNORECASE)
_DRIVER_IN_CEL = re.compile(r'device\.driver\s*==\s*"([^"]+)"')
# Device-plugin GPU resources on a node: nvidia.com/gpu, HAMi's nvidia.com/gpumem, gpucores,
# gpumem-percentage, time-sliced nvidia.com/gpu.shared, MIG profiles, amd.com/gpu.
DEVICE_PLUGIN_GPU = re.compile(r"(?:nvidia\.com|amd\.com)/(?:gpu[a-z.-]*|mig-[a-z0-9.-]+)")
# The attribute the checks match measured usage by (unqualified or qualified with the driver's domain).
UUID_ATTRIBUTE = "uuid"
# 2**63: no capacity or memory figure is larger; anything above is a typo or an attack on the sums.
MAX_AMOUNT = Decimal(2**63)
_MAX_INT = 2**63


_EMPTY: Mapping[str, Any] = {}


# Input that is not a set of objects at all; the message names the file and the place. The same error as
# the snapshot loader's, whose List flattening is reused.
DraInputError = InputError


class _Unparsable(Exception):
    """A field that does not parse; caught at the object that owns it and turned into a finding.

    Helpers name the field relative to what they were given; loops add the indexed prefix only when one is
    raised (formatting paths for every field of every object would be most of the loading time).
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path, self.problem = path, problem

    def under(self, prefix: str) -> _Unparsable:
        self.path = prefix + self.path if self.path else prefix.rstrip(".")
        return self

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


@lru_cache(maxsize=65536)
def _parse_text(text: str, negative: bool) -> Decimal:
    """Parsed and range-checked once per distinct text: quantity strings repeat across devices and claims."""
    value = parse_quantity(text)
    _check_range(value, text, negative)
    return value


def _check_range(value: Decimal, raw: Any, negative: bool) -> None:
    if abs(value) > MAX_AMOUNT:
        raise ValueError(f"{raw!r} is larger than 2^63")
    if value < 0 and not negative:
        raise ValueError(f"{raw!r} is negative")


def quantity(raw: Any, path: str, *, negative: bool = False) -> Decimal:
    """A quantity field as an exact number; _Unparsable names the path. Bounded and, unless allowed, >= 0."""
    try:
        if isinstance(raw, str):
            return _parse_text(raw, negative)
        if isinstance(raw, int) and not isinstance(raw, bool):
            value = Decimal(raw)
        elif isinstance(raw, float) and math.isfinite(raw):
            value = Decimal(str(raw))
        else:
            raise ValueError(f"{raw!r} is not a Kubernetes quantity")
        _check_range(value, raw, negative)
    except ValueError as exc:
        raise _Unparsable(path, str(exc)) from None
    return value


def _map(obj: Mapping[str, Any], key: str, prefix: str = "") -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return _EMPTY
    if isinstance(value, (dict, Mapping)):  # dict first: the ABC check is slow
        return value
    raise _Unparsable(prefix + key, f"expected a map, got {type(value).__name__}")


def _list(obj: Mapping[str, Any], key: str, prefix: str = "") -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Unparsable(prefix + key, f"expected a list, got {type(value).__name__}")
    return value


def _str(obj: Mapping[str, Any], key: str, prefix: str = "", *, required: bool = True) -> str | None:
    value = obj.get(key)
    if isinstance(value, str) and value:
        return value
    if value is None or value == "":
        if required:
            raise _Unparsable(prefix + key, "missing")
        return None
    raise _Unparsable(prefix + key, f"expected a string, got {type(value).__name__}")


# The records' NamedTuples built without their generated __new__ (a Python call each; tens of thousands per
# check): the same tuple, the fields in declaration order.
_new = tuple.__new__


def _is_name(value: Any) -> TypeGuard[str]:
    """The common case, checked without a call per field; the helpers above name the field otherwise."""
    return type(value) is str and value != ""


def _item(value: Any) -> Mapping[str, Any]:
    if isinstance(value, (dict, Mapping)):
        return value
    raise _Unparsable("", f"expected a map, got {type(value).__name__}")


# Parsed capacities by their text: a driver publishes the same capacity on every device of a model, so one
# Capacity object serves them all (and the checks can remember what its policy allows; checks.py).
_CAPACITIES: dict[tuple[str, ...], Capacity] = {}
_MAX_CAPACITIES = 4096


def _capacity_key(item: Any) -> tuple[str, ...] | None:
    """The texts of a DeviceCapacity without validValues, when all are strings (the usual shape)."""
    if type(item) is not dict:
        return None
    value, policy = item.get("value"), item.get("requestPolicy")
    if type(value) is not str:
        return None
    if policy is None:
        return (value,)
    if type(policy) is not dict or "validValues" in policy:
        return None
    rng = policy.get("validRange")
    if type(rng) is not dict:
        return None
    low, high, step = rng.get("min"), rng.get("max"), rng.get("step")
    if type(low) is not str or type(high) is not str or type(step) is not str:
        return None
    return (value, low, high, step)


def _capacity(raw: Any, problems: list[_Unparsable]) -> Capacity:
    """One DeviceCapacity, shared with every identical one (an invalid one is never shared)."""
    key = _capacity_key(raw)
    if key is not None:
        cached = _CAPACITIES.get(key)
        if cached is not None:
            return cached
    own: list[_Unparsable] = []
    capacity = _parse_capacity(raw, own)
    problems.extend(own)
    if key is not None and not own and len(_CAPACITIES) < _MAX_CAPACITIES:
        _CAPACITIES[key] = capacity
    return capacity


def _parse_capacity(raw: Any, problems: list[_Unparsable]) -> Capacity:
    """One DeviceCapacity. A value that does not parse raises _Unparsable (relative path); a requestPolicy
    that does not parse is appended to `problems` and leaves the value usable."""
    item = _item(raw)
    value = quantity(item.get("value"), "value")
    try:
        policy = _map(item, "requestPolicy")
        valid = policy.get("validValues")
        if valid is not None:
            if not isinstance(valid, list):
                raise _Unparsable("requestPolicy.validValues", "expected a list")
            values = tuple(quantity(v, f"requestPolicy.validValues[{i}]") for i, v in enumerate(valid))
            return Capacity(value, valid_values=values)
        rng = _map(policy, "validRange", "requestPolicy.")
        if not rng:
            return Capacity(value)
        low = quantity(rng.get("min"), "requestPolicy.validRange.min")
        high = None if rng.get("max") is None else quantity(rng["max"], "requestPolicy.validRange.max")
        step = None if rng.get("step") is None else quantity(rng["step"], "requestPolicy.validRange.step")
        if step is not None and step <= 0:
            raise _Unparsable("requestPolicy.validRange.step", f"{rng['step']!r} is not > 0")
        return Capacity(value, range_min=low, range_max=high, range_step=step)
    except _Unparsable as exc:
        problems.append(exc)
        return Capacity(value, policy_known=False)


def _device(
    item: Mapping[str, Any], device_id: DeviceId, node: str | None, problems: list[_Unparsable]
) -> Device:
    """One published device; fields that do not parse go to `problems` (paths relative to the device)."""
    allow = item.get("allowMultipleAllocations", False)
    if allow is None:
        allow = False
    if not isinstance(allow, bool):
        problems.append(_Unparsable("allowMultipleAllocations", f"{allow!r} is not true or false"))
        allow = False  # treated as exclusive: the safer reading for the sharing check
    uuid: str | None = None
    try:
        attributes = _map(item, "attributes")
        for name in (UUID_ATTRIBUTE, f"{device_id.driver}/{UUID_ATTRIBUTE}"):
            if name in attributes:
                try:
                    uuid = _str(_item(attributes[name]), "string", ".")
                except _Unparsable as exc:
                    raise exc.under(f"attributes.{name}") from None
                break
    except _Unparsable as exc:
        problems.append(exc)
    capacity: dict[str, Capacity] = {}
    try:
        raw_capacity = _map(item, "capacity")
    except _Unparsable as exc:
        problems.append(exc)
        raw_capacity = _EMPTY
    for cap_name, raw in raw_capacity.items():
        own: list[_Unparsable] = []
        try:
            capacity[str(cap_name)] = _capacity(raw, own)
        except _Unparsable as exc:
            own.append(exc)
            capacity[str(cap_name)] = Capacity(None)
        problems.extend(exc.under(f"capacity.{cap_name}.") for exc in own)
    return Device(device_id, node, allow, capacity, uuid, bool(_GPU_WORD.search(device_id.driver)))


class _Loader:
    def __init__(self) -> None:
        self.records = Records()
        # (driver, pool) -> highest generation seen, and the devices of that generation
        self._pools: dict[tuple[str, str], tuple[int, list[Device], list[Finding]]] = {}
        self._class_drivers: set[str] = set()
        self._slices: list[tuple[Mapping[str, Any], str]] = []
        # one DeviceId per device named by allocations (thousands of claims name the same devices)
        self._device_ids: dict[tuple[str, str, str], DeviceId] = {}

    def unparsable(
        self,
        exc: _Unparsable,
        label: str,
        *,
        node: str | None = None,
        device: str | None = None,
        claim: str | None = None,
        pod: str | None = None,
        into: list[Finding] | None = None,
    ) -> None:
        finding = Finding(UNPARSABLE, node, device, claim, pod, f"{label}: {exc}")
        (self.records.findings if into is None else into).append(finding)

    # --- ResourceSlice ---------------------------------------------------------------------------------

    def slice_(self, obj: Mapping[str, Any], label: str) -> None:
        node: str | None = None
        try:
            spec = _map(obj, "spec")
            node = _str(spec, "nodeName", "spec.", required=False)
            driver = _str(spec, "driver", "spec.")
            pool = _map(spec, "pool", "spec.")
            pool_name = _str(pool, "name", "spec.pool.")
            generation = pool.get("generation", 0)
            if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
                raise _Unparsable("spec.pool.generation", f"{generation!r} is not an integer >= 0")
            devices = _list(spec, "devices", "spec.")
        except _Unparsable as exc:
            self.unparsable(exc, label, node=node)
            return
        assert driver is not None and pool_name is not None
        key = (driver, pool_name)
        current = self._pools.get(key)
        if current is not None and current[0] > generation:
            return  # an older generation of the pool: superseded, as the scheduler ignores it
        if current is None or current[0] < generation:
            current = (generation, [], [])
            self._pools[key] = current
        for i, raw in enumerate(devices):
            try:
                item = _item(raw)
                name = _str(item, "name")
            except _Unparsable as exc:
                self.unparsable(exc.under(f"spec.devices[{i}]."), label, node=node, into=current[2])
                continue
            assert name is not None
            device_id = DeviceId(driver, pool_name, name)
            problems: list[_Unparsable] = []
            current[1].append(_device(item, device_id, node, problems))
            for problem in problems:
                self.unparsable(
                    problem.under(f"spec.devices[{i}]."),
                    f"{label} device {name}",
                    node=node,
                    device=str(device_id),
                    into=current[2],
                )

    # --- ResourceClaim ---------------------------------------------------------------------------------

    def claim(self, obj: Mapping[str, Any], label: str, namespace: str, name: str) -> None:
        claim = Claim(namespace, name, allocated=False)
        key = claim.key
        try:
            status = _map(obj, "status")
            allocation = status.get("allocation")
            if allocation is not None:
                claim.allocated = True
                try:
                    devices = _map(_item(allocation), "devices", ".")
                    results = _list(devices, "results", ".devices.")
                except _Unparsable as exc:
                    raise exc.under("status.allocation") from None
            else:
                results = []
            reserved = _list(status, "reservedFor", "status.")
        except _Unparsable as exc:
            self.unparsable(exc, label, claim=key)
            self.records.claims.append(claim)
            return
        for i, raw in enumerate(results):
            try:
                result = raw if type(raw) is dict else _item(raw)
                driver, pool, device = result.get("driver"), result.get("pool"), result.get("device")
                if not (
                    (type(driver) is str and driver != "")
                    and (type(pool) is str and pool != "")
                    and (type(device) is str and device != "")
                ):
                    driver, pool, device = (
                        _str(result, "driver"),
                        _str(result, "pool"),
                        _str(result, "device"),
                    )
                request = result.get("request")
                if not (type(request) is str and request != ""):
                    request = _str(result, "request", required=False) or ""
                consumed_raw = result.get("consumedCapacity")
                consumed_map = (
                    consumed_raw if type(consumed_raw) is dict else _map(result, "consumedCapacity")
                )
            except _Unparsable as exc:
                self.unparsable(exc.under(f"status.allocation.devices.results[{i}]."), label, claim=key)
                continue
            assert driver is not None and pool is not None and device is not None
            ids_key = (driver, pool, device)
            device_id = self._device_ids.get(ids_key)
            if device_id is None:
                device_id = self._device_ids[ids_key] = DeviceId(driver, pool, device)
            consumed: dict[str, Decimal] = {}
            for cap_name, amount in consumed_map.items():
                try:
                    # negative amounts parse here and are judged by the invalid-consumption check
                    consumed[cap_name if type(cap_name) is str else str(cap_name)] = (
                        _parse_text(amount, True)
                        if type(amount) is str
                        else quantity(amount, "", negative=True)
                    )
                except (ValueError, _Unparsable) as exc:  # ValueError: from _parse_text, as quantity() says
                    problem = exc if isinstance(exc, _Unparsable) else _Unparsable("", str(exc))
                    path = f"status.allocation.devices.results[{i}].consumedCapacity.{cap_name}"
                    self.unparsable(problem.under(path), label, device=str(device_id), claim=key)
            claim.allocations.append(
                _new(Allocation, (request, device_id, consumed, consumed_raw is not None))
            )
        for i, raw in enumerate(reserved):
            try:
                ref = raw if type(raw) is dict else _item(raw)
                resource, consumer, uid = ref.get("resource"), ref.get("name"), ref.get("uid")
                if not (
                    (type(resource) is str and resource != "")
                    and (type(consumer) is str and consumer != "")
                    and (type(uid) is str and uid != "")
                ):
                    resource, consumer = _str(ref, "resource"), _str(ref, "name")
                    uid = _str(ref, "uid", required=False)
            except _Unparsable as exc:
                self.unparsable(exc.under(f"status.reservedFor[{i}]."), label, claim=key)
                claim.other_consumers += 1  # unreadable consumer: assume it exists, claim it is not orphaned
                continue
            assert consumer is not None
            if resource == "pods" and not ref.get("apiGroup"):
                claim.pods.append(_new(PodConsumer, (consumer, uid)))
            else:
                claim.other_consumers += 1
        self.records.claims.append(claim)

    # --- DeviceClass, Pod, Node ------------------------------------------------------------------------

    def device_class(self, obj: Mapping[str, Any], name: str) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            return
        extended = spec.get("extendedResourceName")
        gpu_class = bool(_GPU_WORD.search(name)) or (
            isinstance(extended, str) and DEVICE_PLUGIN_GPU.fullmatch(extended) is not None
        )
        if not gpu_class:
            return
        for selector in spec.get("selectors") or []:
            cel = selector.get("cel") if isinstance(selector, Mapping) else None
            expression = cel.get("expression") if isinstance(cel, Mapping) else None
            if isinstance(expression, str):
                self._class_drivers.update(_DRIVER_IN_CEL.findall(expression))

    def pod(self, obj: Mapping[str, Any], label: str, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        uid = obj["metadata"].get("uid")
        pod = Pod(namespace, name, uid if isinstance(uid, str) else None, None, {}, {})
        # what is being read, formatted into the field path only when something does not parse
        where: tuple[str, int, int] = ("", -1, -1)
        # Each field is read with a fast check of the common shape; anything else goes through the helpers,
        # which raise _Unparsable naming the field (or accept what they allow).
        try:
            spec = obj.get("spec")
            if type(spec) is not dict:
                spec = _map(obj, "spec")
            node = spec.get("nodeName")
            pod.node = (
                node
                if (type(node) is str and node != "")
                else _str(spec, "nodeName", "spec.", required=False)
            )
            refs_raw = spec.get("resourceClaims")
            if refs_raw:
                refs_list = refs_raw if type(refs_raw) is list else _list(spec, "resourceClaims", "spec.")
                for i, raw in enumerate(refs_list):
                    where = ("spec.resourceClaims", i, -1)
                    self._pod_claim(pod, raw, False)
            where = ("", -1, -1)
            status = obj.get("status")
            if type(status) is not dict:
                status = _map(obj, "status")
            refs_raw = status.get("resourceClaimStatuses")
            if refs_raw:
                refs_list = (
                    refs_raw if type(refs_raw) is list else _list(status, "resourceClaimStatuses", "status.")
                )
                for i, raw in enumerate(refs_list):
                    where = ("status.resourceClaimStatuses", i, -1)
                    self._pod_claim(pod, raw, True)  # claims made from a template
            for group in ("spec.initContainers", "spec.containers"):
                where = ("", -1, -1)
                containers = spec.get(group[5:])
                if not containers:
                    continue
                if type(containers) is not list:
                    containers = _list(spec, group[5:], "spec.")
                for i, raw in enumerate(containers):
                    where = (group, i, -1)
                    container = raw if type(raw) is dict else _item(raw)
                    cname = container.get("name")
                    if not (type(cname) is str and cname != ""):
                        cname = _str(container, "name")
                    assert cname is not None
                    refs = pod.containers.setdefault(cname, [])
                    resources = container.get("resources")
                    if not resources:
                        continue
                    claims = resources.get("claims") if type(resources) is dict else None
                    if type(claims) is not list:
                        if claims is None and type(resources) is dict:
                            continue
                        claims = _list(_map(container, "resources"), "claims", "resources.")
                    for j, rraw in enumerate(claims):
                        where = (group, i, j)
                        ref = rraw if type(rraw) is dict else _item(rraw)
                        local, request = ref.get("name"), ref.get("request")
                        if not (type(local) is str and local != "") or (
                            request is not None and not (type(request) is str and request != "")
                        ):
                            local = _str(ref, "name")
                            request = _str(ref, "request", required=False)
                        assert local is not None
                        refs.append(_new(ContainerClaimRef, (local, request)))
                        where = (group, i, -1)
        except _Unparsable as exc:
            section, i, j = where
            prefix = "" if i < 0 else f"{section}[{i}]." + ("" if j < 0 else f"resources.claims[{j}].")
            self.unparsable(exc.under(prefix), label, node=pod.node, pod=key)
        self.records.pods[key] = pod

    @staticmethod
    def _pod_claim(pod: Pod, raw: Any, from_status: bool) -> None:
        """One `spec.resourceClaims[]` or `status.resourceClaimStatuses[]` entry: name -> claim name."""
        ref = raw if type(raw) is dict else _item(raw)
        local, claim_name = ref.get("name"), ref.get("resourceClaimName")
        if not ((type(local) is str and local != "") and (type(claim_name) is str and claim_name != "")):
            local = _str(ref, "name")
            claim_name = _str(ref, "resourceClaimName", required=False)
        if local is not None and claim_name is not None:
            if from_status:
                pod.claim_names.setdefault(local, claim_name)
            else:
                pod.claim_names[local] = claim_name

    def node(self, obj: Mapping[str, Any], label: str, name: str) -> None:
        gpus: dict[str, Decimal] = {}
        try:
            allocatable = _map(_map(obj, "status", ""), "allocatable", "status.")
        except _Unparsable as exc:
            self.unparsable(exc, label, node=name)
            allocatable = {}
        for resource, raw in allocatable.items():
            if not DEVICE_PLUGIN_GPU.fullmatch(str(resource)):
                continue
            try:
                amount = quantity(raw, f"status.allocatable.{resource}")
            except _Unparsable as exc:
                self.unparsable(exc, label, node=name)
                continue
            if amount > 0:
                gpus[str(resource)] = amount
        self.records.nodes[name] = Node(name, gpus)

    # --- all objects -----------------------------------------------------------------------------------

    def add(self, obj: Mapping[str, Any], where: str) -> None:
        kind = obj.get("kind")
        if kind not in KINDS:
            return  # other kinds play no part
        meta = obj.get("metadata")
        if type(meta) is not dict and not isinstance(meta, Mapping):
            meta = _EMPTY
        name = meta.get("name")
        namespaced = kind == "ResourceClaim" or kind == "Pod"
        namespace = meta.get("namespace")
        if (
            type(name) is not str
            or not name
            or (namespaced and (type(namespace) is not str or not namespace))
        ):
            field = "metadata.namespace" if isinstance(name, str) and name else "metadata.name"
            self.records.findings.append(
                Finding(UNPARSABLE, None, None, None, None, f"{kind} at {where}: {field}: missing")
            )
            return
        if kind == "ResourceClaim":
            self.claim(obj, f"ResourceClaim {namespace}/{name}", str(namespace), name)
        elif kind == "Pod":
            self.pod(obj, f"Pod {namespace}/{name}", str(namespace), name)
        elif kind == "ResourceSlice":
            self.slice_(obj, f"ResourceSlice {name}")
        elif kind == "Node":
            self.node(obj, f"Node {name}", name)
        else:
            self.device_class(obj, name)

    def finish(self) -> Records:
        records = self.records
        for _, devices, findings in self._pools.values():
            records.findings.extend(findings)
            for device in devices:
                if device.id in records.devices:
                    records.findings.append(
                        Finding(
                            UNPARSABLE,
                            device.node,
                            str(device.id),
                            None,
                            None,
                            f"device {device.id}: published twice in the pool's current generation; "
                            "the first one is checked",
                        )
                    )
                    continue
                if not device.gpu and device.id.driver in self._class_drivers:
                    device = Device(
                        device.id, device.node, device.allow_multiple, device.capacity, device.uuid, True
                    )
                records.devices[device.id] = device
        return records


def load_objects(objects: Iterable[tuple[Mapping[str, Any], str]]) -> Records:
    """Records from (object, where it came from) pairs; other kinds are ignored."""
    loader = _Loader()
    with gc_paused():
        for obj, where in objects:
            loader.add(obj, where)
        return loader.finish()


# --- files ---------------------------------------------------------------------------------------------


def read_objects(path: Path) -> list[tuple[Mapping[str, Any], str]]:
    """(object, where) pairs of a `List` (`kubectl get ... -o yaml|json`) or multi-document YAML."""
    objects: list[tuple[Mapping[str, Any], str]] = []
    for d, doc in enumerate(documents(path)):
        objects.extend(flatten(doc, f"{path} document {d}"))
    return objects


def load_cluster_file(path: Path) -> Records:
    """A `List` (`kubectl get ... -o yaml|json`) or multi-document YAML of the five kinds."""
    return load_objects(read_objects(path))


_USAGE_KEYS = ("namespace", "pod", "container", "gpu_uuid")


def _usage_memory(raw: Any, file: str, index: int) -> Decimal | None:
    if raw is None:
        return None  # unknown: never compared
    if type(raw) is int and 0 <= raw <= _MAX_INT:  # the usual case, without the checks below
        return Decimal(raw)
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
            missing = next(k for k in _USAGE_KEYS if not _is_name(entry.get(k)))
            raise DraInputError(f"{where} containers[{i}]: {missing}: missing")
        if "memory_bytes" not in entry:
            raise DraInputError(f"{where} containers[{i}]: memory_bytes: missing")
        ident = (ns, pod, container, uuid)
        if ident in seen:
            raise DraInputError(f"{where} containers[{i}]: {'/'.join(ident)} listed twice")
        seen.add(ident)
        memory = _usage_memory(entry["memory_bytes"], where, i)
        usage.append(_new(ContainerUsage, (ns, pod, container, uuid, memory)))
    return usage


def load_usage_file(path: Path) -> list[ContainerUsage]:
    docs = [d for d in documents(path) if d is not None]
    if len(docs) != 1:
        raise DraInputError(f"{path}: expected one YAML mapping with a `containers` list")
    return parse_usage(docs[0], str(path))
