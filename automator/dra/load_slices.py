"""ResourceSlices and DeviceClasses -> the published devices (automator/dra/load.py's first stage). Pure.

Only the current generation of each pool counts, as for the scheduler. A device field that does not parse
is an `unparsable` finding naming the device, and only that field is left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from automator.dra.fields import quantity, unparsable_finding
from automator.dra.model import UNPARSABLE, Capacity, Device, DeviceId, Finding
from automator.objects.fields import item, list_field, map_field, str_field
from automator.objects.resources import FieldError, FieldProblem

# A driver counts as a GPU driver (for mixed-mode) when its name says so, as the NVIDIA and HAMi drivers'
# do ("gpu.nvidia.com", "hami-core-gpu.project-hami.io"), or when a DeviceClass named like a GPU class
# selects it by `device.driver == "..."`.
GPU_WORD = re.compile(r"gpu", re.IGNORECASE)
_DRIVER_IN_CEL = re.compile(r'device\.driver\s*==\s*"([^"]+)"')
# Device-plugin GPU resources on a node: nvidia.com/gpu, HAMi's nvidia.com/gpumem, gpucores,
# gpumem-percentage, time-sliced nvidia.com/gpu.shared, MIG profiles, amd.com/gpu.
DEVICE_PLUGIN_GPU = re.compile(r"(?:nvidia\.com|amd\.com)/(?:gpu[a-z.-]*|mig-[a-z0-9.-]+)")
# The attribute the checks match measured usage by (unqualified or qualified with the driver's domain).
UUID_ATTRIBUTE = "uuid"

# Parsed capacities by their text: a driver publishes the same capacity on every device of a model, so one
# Capacity object serves them all (and the checks can remember what its policy allows; checks.py).
_CAPACITIES: dict[tuple[str, ...], Capacity] = {}
# And the devices' capacity maps by their texts: the devices of one model share one map (never changed),
# against which the checks judge each distinct consumption once.
_CAPACITY_MAPS: dict[tuple[tuple[str, tuple[str, ...]], ...], dict[str, Capacity]] = {}
_MAX_CAPACITIES = 4096


def _capacity_key(raw: Any) -> tuple[str, ...] | None:
    """The texts of a DeviceCapacity without validValues, when all are strings (the usual shape)."""
    if type(raw) is not dict:
        return None
    value, policy = raw.get("value"), raw.get("requestPolicy")
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


def _capacity(raw: Any, problems: list[FieldProblem]) -> Capacity:
    """One DeviceCapacity, shared with every identical one (an invalid one is never shared)."""
    key = _capacity_key(raw)
    if key is not None:
        cached = _CAPACITIES.get(key)
        if cached is not None:
            return cached
    own: list[FieldProblem] = []
    capacity = _parse_capacity(raw, own)
    problems.extend(own)
    if key is not None and not own and len(_CAPACITIES) < _MAX_CAPACITIES:
        _CAPACITIES[key] = capacity
    return capacity


def _parse_capacity(raw: Any, problems: list[FieldProblem]) -> Capacity:
    """One DeviceCapacity. A value that does not parse raises FieldError (relative path); a requestPolicy
    that does not parse is appended to `problems` and leaves the value usable."""
    fields = item(raw)
    value = quantity(fields.get("value"), "value")
    try:
        policy = map_field(fields, "requestPolicy")
        valid = policy.get("validValues")
        if valid is not None:
            if not isinstance(valid, list):
                raise FieldError("requestPolicy.validValues", "expected a list")
            values = tuple(quantity(v, f"requestPolicy.validValues[{i}]") for i, v in enumerate(valid))
            return Capacity(value, valid_values=values)
        rng = map_field(policy, "validRange", "requestPolicy.")
        if not rng:
            return Capacity(value)
        low = quantity(rng.get("min"), "requestPolicy.validRange.min")
        high = None if rng.get("max") is None else quantity(rng["max"], "requestPolicy.validRange.max")
        step = None if rng.get("step") is None else quantity(rng["step"], "requestPolicy.validRange.step")
        if step is not None and step <= 0:
            raise FieldError("requestPolicy.validRange.step", f"{rng['step']!r} is not > 0")
        return Capacity(value, range_min=low, range_max=high, range_step=step)
    except FieldError as exc:
        problems.append(exc.found)
        return Capacity(value, policy_known=False)


def _capacities_key(raw_capacity: Mapping[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    parts = []
    for name, raw in raw_capacity.items():
        key = _capacity_key(raw)
        if key is None or type(name) is not str:
            return None
        parts.append((name, key))
    return tuple(parts)


def _capacities(item_: Mapping[str, Any], problems: list[FieldProblem]) -> dict[str, Capacity]:
    """A device's capacity map; identical maps (by their texts, every capacity parsed) are one object."""
    try:
        raw_capacity = map_field(item_, "capacity")
    except FieldError as exc:
        problems.append(exc.found)
        return {}
    key = _capacities_key(raw_capacity)
    if key is not None:
        shared = _CAPACITY_MAPS.get(key)
        if shared is not None:
            return shared
    capacity: dict[str, Capacity] = {}
    parsed = True
    for cap_name, raw in raw_capacity.items():
        own: list[FieldProblem] = []
        try:
            capacity[str(cap_name)] = _capacity(raw, own)
        except FieldError as exc:
            own.append(exc.found)
            capacity[str(cap_name)] = Capacity(None)
        if own:
            parsed = False
            problems.extend(problem.under(f"capacity.{cap_name}.") for problem in own)
    if key is not None and parsed and len(_CAPACITY_MAPS) < _MAX_CAPACITIES:
        _CAPACITY_MAPS[key] = capacity
    return capacity


def _uuid(item_: Mapping[str, Any], driver: str) -> str | None:
    attributes = map_field(item_, "attributes")
    for name in (UUID_ATTRIBUTE, f"{driver}/{UUID_ATTRIBUTE}"):
        if name in attributes:
            try:
                return str_field(item(attributes[name]), "string", ".")
            except FieldError as exc:
                raise exc.found.under(f"attributes.{name}").error() from None
    return None


def _device(
    item_: Mapping[str, Any], device_id: DeviceId, node: str | None, problems: list[FieldProblem]
) -> Device:
    """One published device; fields that do not parse go to `problems` (paths relative to the device)."""
    allow = item_.get("allowMultipleAllocations", False)
    if allow is None:
        allow = False
    if not isinstance(allow, bool):
        problems.append(FieldProblem("allowMultipleAllocations", f"{allow!r} is not true or false"))
        allow = False  # treated as exclusive: the safer reading for the sharing check
    uuid: str | None = None
    try:
        uuid = _uuid(item_, device_id.driver)
    except FieldError as exc:
        problems.append(exc.found)
    capacity = _capacities(item_, problems)
    return Device(device_id, node, allow, capacity, uuid, bool(GPU_WORD.search(device_id.driver)))


# A ResourceSlice read on its own (from the object alone, so it can be kept across passes):
# its pool (driver, pool name), the pool generation, its devices and their findings; or, when the slice's
# own fields do not parse, the one finding that says so.
ParsedSlice = tuple[tuple[str, str], int, list[Device], list[Finding]] | Finding


def parse_slice(obj: Mapping[str, Any], label: str) -> ParsedSlice:
    node: str | None = None
    try:
        spec = map_field(obj, "spec")
        node = str_field(spec, "nodeName", "spec.", required=False)
        driver = str_field(spec, "driver", "spec.")
        pool = map_field(spec, "pool", "spec.")
        pool_name = str_field(pool, "name", "spec.pool.")
        generation = pool.get("generation", 0)
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise FieldError("spec.pool.generation", f"{generation!r} is not an integer >= 0")
        devices = list_field(spec, "devices", "spec.")
    except FieldError as exc:
        return unparsable_finding(exc.found, label, node=node)
    assert driver is not None and pool_name is not None
    published: list[Device] = []
    found: list[Finding] = []
    pool_id = DeviceId(driver, pool_name, "")
    for i, raw in enumerate(devices):
        _add_device(raw, i, label, node, pool_id, published, found)
    return (driver, pool_name), generation, published, found


def _add_device(
    raw: Any,
    index: int,
    label: str,
    node: str | None,
    pool_id: DeviceId,
    published: list[Device],
    found: list[Finding],
) -> None:
    try:
        name = str_field(item(raw), "name")
    except FieldError as exc:
        found.append(unparsable_finding(exc.found.under(f"spec.devices[{index}]."), label, node=node))
        return
    assert name is not None
    device_id = pool_id._replace(device=name)
    problems: list[FieldProblem] = []
    published.append(_device(raw, device_id, node, problems))
    for problem in problems:
        found.append(
            unparsable_finding(
                problem.under(f"spec.devices[{index}]."),
                f"{label} device {name}",
                node=node,
                device=str(device_id),
            )
        )


class SliceLoader:
    """The devices of every pool's current generation, and the drivers GPU DeviceClasses select."""

    def __init__(self) -> None:
        # (driver, pool) -> highest generation seen, and the devices of that generation and their findings
        self._pools: dict[tuple[str, str], tuple[int, list[Device], list[Finding]]] = {}
        self._class_drivers: set[str] = set()

    def add_parsed(self, parsed: ParsedSlice, findings: list[Finding]) -> None:
        """One slice as parse_slice read it (never changed here: it may be kept for the next pass)."""
        if isinstance(parsed, Finding):
            findings.append(parsed)
            return
        key, generation, devices, found = parsed
        current = self._pools.get(key)
        if current is not None and current[0] > generation:
            return  # an older generation of the pool: superseded, as the scheduler ignores it
        if current is None or current[0] < generation:
            current = (generation, [], [])
            self._pools[key] = current
        current[1].extend(devices)
        current[2].extend(found)

    def add_device_class(self, obj: Mapping[str, Any], name: str) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            return
        extended = spec.get("extendedResourceName")
        gpu_class = bool(GPU_WORD.search(name)) or (
            isinstance(extended, str) and DEVICE_PLUGIN_GPU.fullmatch(extended) is not None
        )
        if not gpu_class:
            return
        for selector in spec.get("selectors") or []:
            cel = selector.get("cel") if isinstance(selector, Mapping) else None
            expression = cel.get("expression") if isinstance(cel, Mapping) else None
            if isinstance(expression, str):
                self._class_drivers.update(_DRIVER_IN_CEL.findall(expression))

    def finish(self, devices: dict[DeviceId, Device], findings: list[Finding]) -> None:
        """The current generations' devices into `devices` (the first of a name), their findings after."""
        for _, published, found in self._pools.values():
            findings.extend(found)
            for device in published:
                if device.id in devices:
                    findings.append(
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
                devices[device.id] = device
