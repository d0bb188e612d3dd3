"""Scenario files for the mock source: schema, validation and lookup by time.

A scenario describes one node: its GPUs, which containers the kubelet allocated them to, and the
processes on each GPU with a timeline of phases. Validation is strict (unknown keys are errors) and
every error names the field path, e.g. ``gpus[2].processes[0].pid``. The format is documented in
docs/exporter.md.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from automator.quantity import parse_quantity
from exporter import strict_yaml
from exporter.model import ATTRIBUTION_SOURCES, CLOCK_EVENT_REASONS, Attribution, ContainerRef

# Fields a scenario may declare unsupported; they match the nvml source's error keys.
MOCK_FIELDS = frozenset(
    {
        *("utilization", "memory", "temperature", "power", "energy", "process_utilization"),
        *("clocks", "memory_temperature", "encoder", "decoder", "pcie", "nvlink"),
        *("ecc", "remapped_rows", "clock_events", "xid"),
    }
)


# Upper bounds: a value beyond them is a typo, and would overflow NVML-sized fields downstream.
MAX_BYTES = 2**50  # 1 PiB of GPU memory
MAX_SECONDS = 10 * 365 * 86400.0
MAX_PID = 2**22  # Linux's pid_max limit
MAX_INDEX = 1023
MAX_WATTS = 10_000.0
MAX_CELSIUS = 200.0
MAX_COUNT = 2**53  # counters stay exact as floats
DEFAULT_DRIVER_VERSION = "550.54.15"
DEFAULT_CUDA_VERSION = "12.4"


class ScenarioError(ValueError):
    """A scenario file is malformed; the message names the field path."""


@dataclass(frozen=True)
class Phase:
    """From `start` seconds on (until the next phase) the process runs at these levels."""

    start: float
    utilization: float  # SM utilization ratio 0-1
    memory_bytes: int
    running: bool = True


@dataclass(frozen=True)
class ProcessSpec:
    pid: int
    owner: Attribution
    phases: tuple[Phase, ...]
    period: float | None = None  # the timeline repeats every `period` seconds

    def at(self, t: float) -> Phase | None:
        """The phase in force at scenario time t; None before the first phase starts."""
        if self.period is not None:
            t = math.fmod(t, self.period)
        starts = [p.start for p in self.phases]
        i = bisect.bisect_right(starts, t) - 1
        return self.phases[i] if i >= 0 else None


@dataclass(frozen=True)
class XidEvent:
    at: float  # scenario seconds
    code: int


@dataclass(frozen=True)
class HealthSpec:
    """The health signals a GPU reports (docs/exporter.md, `health:`)."""

    xid: tuple[XidEvent, ...] = ()
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    clock_events: frozenset[str] = frozenset()
    nvlink: bool = False
    encoder_utilization: float = 0.0
    decoder_utilization: float = 0.0


@dataclass(frozen=True)
class MigSpec:
    """A MIG device on a GPU: a device of its own with its memory, processes and allocations."""

    uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_total_bytes: int
    processes: tuple[ProcessSpec, ...] = ()
    allocations: tuple[ContainerRef, ...] = ()


@dataclass(frozen=True)
class GpuSpec:
    index: int
    uuid: str
    model: str
    memory_total_bytes: int
    processes: tuple[ProcessSpec, ...] = ()
    allocations: tuple[ContainerRef, ...] = ()
    pci_bus_id: str = ""
    health: HealthSpec = HealthSpec()
    mig: tuple[MigSpec, ...] = ()
    fails_at: float | None = None  # lost from this time on (NVML GPU_IS_LOST)
    recovers_at: float | None = None
    unsupported: frozenset[str] = frozenset()
    idle_power_watts: float = 70.0
    max_power_watts: float = 700.0
    idle_temperature_celsius: float = 32.0
    max_temperature_celsius: float = 78.0

    def lost_at(self, t: float) -> bool:
        if self.fails_at is None or t < self.fails_at:
            return False
        return self.recovers_at is None or t < self.recovers_at


@dataclass(frozen=True)
class Scenario:
    node: str
    gpus: tuple[GpuSpec, ...]
    duration: float | None = None
    loop: bool = False
    driver_version: str = DEFAULT_DRIVER_VERSION
    cuda_version: str = DEFAULT_CUDA_VERSION
    attribution: Mapping[str, bool] = field(default_factory=lambda: dict.fromkeys(ATTRIBUTION_SOURCES, True))

    def scenario_time(self, elapsed: float) -> float:
        """Map seconds since start to timeline seconds (wrapping when the scenario loops)."""
        if self.loop and self.duration:
            return math.fmod(elapsed, self.duration)
        return elapsed


# --- validation helpers: each takes the value and its path and returns a typed value ---


def _fail(path: str, message: str) -> ScenarioError:
    return ScenarioError(f"{path}: {message}")


def _mapping(
    value: Any, path: str, allowed: Collection[str], required: Collection[str] = ()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path or "(document)", f"expected a mapping, got {type(value).__name__}")
    for key in value:
        if key not in allowed:
            raise _fail(
                f"{path}.{key}" if path else str(key),
                f"unknown field (allowed: {', '.join(sorted(allowed))})",
            )
    for key in sorted(required):
        if key not in value:
            raise _fail(f"{path}.{key}" if path else key, "required field missing")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(path, f"expected a list, got {type(value).__name__}")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, f"expected a non-empty string, got {value!r}")
    return value


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(path, f"expected true or false, got {value!r}")
    return value


def _int(value: Any, path: str, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    # bool is an int subclass; `pid: true` is a typo, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(path, f"expected an integer >= {minimum}, got {value!r}")
    if value > maximum:
        raise _fail(path, f"expected an integer between {minimum} and {maximum}, got {value!r}")
    return value


def _number(value: Any, path: str, minimum: float = 0.0, maximum: float | None = MAX_SECONDS) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(path, f"expected a number, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise _fail(path, f"expected a number {bound}, got {value!r}")
    return float(value)


def _optional_number(raw: Mapping[str, Any], key: str, path: str) -> float | None:
    """A number field that may be left out or null."""
    return None if raw.get(key) is None else _number(raw[key], f"{path}.{key}" if path else key)


def _bytes(value: Any, path: str) -> int:
    """Bytes as an integer or a Kubernetes quantity string ("80Gi", "512Mi", "80G")."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # `8.0e+10` is YAML for a whole number of bytes
    if isinstance(value, str):
        try:
            quantity = parse_quantity(value)
        except ValueError as e:
            raise _fail(path, f"not a byte quantity (bytes, or e.g. 80Gi, 512Mi, 80G): {value!r}") from e
        if quantity < 0:
            raise _fail(path, f"expected a non-negative quantity, got {value!r}")
        if quantity != quantity.to_integral_value():
            raise _fail(path, f"not a whole number of bytes: {value!r}")
        value = int(quantity)
    elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(path, f"expected bytes (an integer >= 0) or a quantity such as 80Gi, got {value!r}")
    if value > MAX_BYTES:
        raise _fail(path, f"expected at most {MAX_BYTES} bytes (1Pi), got {value!r}")
    return int(value)


# --- the schema ---


def _owner(value: Any, path: str) -> Attribution:
    if value is None:
        return Attribution("unresolved")
    raw = _mapping(value, path, {"namespace", "pod", "container", "pod_uid", "host", "unresolved"})
    if raw.get("host") is not None and _bool(raw["host"], f"{path}.host"):
        if len(raw) > 1:
            raise _fail(path, "`host: true` excludes namespace/pod/container")
        return Attribution("host")
    if raw.get("unresolved") is not None and _bool(raw["unresolved"], f"{path}.unresolved"):
        if len(raw) > 1:
            raise _fail(path, "`unresolved: true` excludes other fields")
        return Attribution("unresolved")
    return Attribution("container", _container_ref(raw, path))


def _container_ref(value: Any, path: str) -> ContainerRef:
    raw = _mapping(
        value, path, {"namespace", "pod", "container", "pod_uid"}, {"namespace", "pod", "container"}
    )
    return ContainerRef(
        namespace=_str(raw["namespace"], f"{path}.namespace"),
        pod=_str(raw["pod"], f"{path}.pod"),
        container=_str(raw["container"], f"{path}.container"),
        pod_uid=_str(raw["pod_uid"], f"{path}.pod_uid") if "pod_uid" in raw else "",
    )


def _phase(value: Any, path: str) -> Phase:
    raw = _mapping(value, path, {"from", "utilization", "memory", "running"}, {"from"})
    running = _bool(raw.get("running", True), f"{path}.running")
    if running and "utilization" not in raw:
        raise _fail(f"{path}.utilization", "required field missing (or set `running: false`)")
    return Phase(
        start=_number(raw["from"], f"{path}.from"),
        utilization=_number(raw.get("utilization", 0), f"{path}.utilization", 0.0, 1.0),
        memory_bytes=_bytes(raw.get("memory", 0), f"{path}.memory"),
        running=running,
    )


def _process(value: Any, path: str) -> ProcessSpec:
    raw = _mapping(value, path, {"pid", "owner", "phases", "period"}, {"pid", "phases"})
    phases = tuple(
        _phase(p, f"{path}.phases[{i}]") for i, p in enumerate(_list(raw["phases"], f"{path}.phases"))
    )
    if not phases:
        raise _fail(f"{path}.phases", "at least one phase is required")
    for i in range(1, len(phases)):
        if phases[i].start <= phases[i - 1].start:
            raise _fail(f"{path}.phases[{i}].from", "phases must start in increasing order")
    period = _optional_number(raw, "period", path)
    if period is not None and period <= phases[-1].start:
        raise _fail(f"{path}.period", "must be longer than the last phase's `from`")
    return ProcessSpec(
        pid=_int(raw["pid"], f"{path}.pid", 1, MAX_PID),
        owner=_owner(raw.get("owner"), f"{path}.owner"),
        phases=phases,
        period=period,
    )


_THERMAL_FIELDS = (
    "idle_power_watts",
    "max_power_watts",
    "idle_temperature_celsius",
    "max_temperature_celsius",
)
_THERMAL_LIMITS = {
    "idle_power_watts": MAX_WATTS,
    "max_power_watts": MAX_WATTS,
    "idle_temperature_celsius": MAX_CELSIUS,
    "max_temperature_celsius": MAX_CELSIUS,
}
_GPU_FIELDS = {
    *("index", "uuid", "model", "memory_total", "processes", "allocations"),
    *("fails_at", "recovers_at", "unsupported", *_THERMAL_FIELDS),
    *("pci_bus_id", "health", "mig"),
}
_HEALTH_FIELDS = {
    *("xid", "ecc", "remapped_rows", "clock_events", "nvlink"),
    *("encoder_utilization", "decoder_utilization"),
}


def _health(value: Any, path: str) -> HealthSpec:
    if value is None:
        return HealthSpec()
    raw = _mapping(value, path, _HEALTH_FIELDS)
    xid = []
    for i, event in enumerate(_list(raw.get("xid", []), f"{path}.xid")):
        where = f"{path}.xid[{i}]"
        e = _mapping(event, where, {"at", "code"}, {"at", "code"})
        xid.append(XidEvent(_number(e["at"], f"{where}.at"), _int(e["code"], f"{where}.code", 1, 65535)))
    ecc = _mapping(raw.get("ecc") or {}, f"{path}.ecc", {"corrected", "uncorrected"})
    rows = _mapping(
        raw.get("remapped_rows") or {},
        f"{path}.remapped_rows",
        {"correctable", "uncorrectable", "pending", "failure"},
    )
    reasons = []
    for i, reason in enumerate(_list(raw.get("clock_events", []), f"{path}.clock_events")):
        name = _str(reason, f"{path}.clock_events[{i}]")
        if name not in CLOCK_EVENT_REASONS:
            allowed = ", ".join(CLOCK_EVENT_REASONS)
            raise _fail(f"{path}.clock_events[{i}]", f"unknown reason {name!r} (allowed: {allowed})")
        reasons.append(name)

    def ratio(key: str) -> float:
        return _number(raw.get(key, 0), f"{path}.{key}", 0.0, 1.0)

    return HealthSpec(
        xid=tuple(sorted(xid, key=lambda e: e.at)),
        ecc_corrected=_int(ecc.get("corrected", 0), f"{path}.ecc.corrected"),
        ecc_uncorrected=_int(ecc.get("uncorrected", 0), f"{path}.ecc.uncorrected"),
        remapped_correctable=_int(rows.get("correctable", 0), f"{path}.remapped_rows.correctable"),
        remapped_uncorrectable=_int(rows.get("uncorrectable", 0), f"{path}.remapped_rows.uncorrectable"),
        remap_pending=_bool(rows.get("pending", False), f"{path}.remapped_rows.pending"),
        remap_failure=_bool(rows.get("failure", False), f"{path}.remapped_rows.failure"),
        clock_events=frozenset(reasons),
        nvlink=_bool(raw.get("nvlink", False), f"{path}.nvlink"),
        encoder_utilization=ratio("encoder_utilization"),
        decoder_utilization=ratio("decoder_utilization"),
    )


def _processes(raw: Mapping[str, Any], path: str, memory_total: int) -> tuple[ProcessSpec, ...]:
    processes = tuple(
        _process(p, f"{path}.processes[{i}]")
        for i, p in enumerate(_list(raw.get("processes", []), f"{path}.processes"))
    )
    seen: set[int] = set()
    for i, proc in enumerate(processes):
        if proc.pid in seen:
            raise _fail(f"{path}.processes[{i}].pid", f"duplicate pid {proc.pid} on this GPU")
        seen.add(proc.pid)
        for j, phase in enumerate(proc.phases):
            if phase.memory_bytes > memory_total:
                raise _fail(f"{path}.processes[{i}].phases[{j}].memory", "exceeds the GPU's memory_total")
    return processes


def _allocations(raw: Mapping[str, Any], path: str) -> tuple[ContainerRef, ...]:
    return tuple(
        _container_ref(a, f"{path}.allocations[{i}]")
        for i, a in enumerate(_list(raw.get("allocations", []), f"{path}.allocations"))
    )


_MIG_FIELDS = {
    *("uuid", "profile", "gpu_instance_id", "compute_instance_id", "memory_total"),
    *("processes", "allocations"),
}


def _mig(value: Any, path: str) -> MigSpec:
    raw = _mapping(value, path, _MIG_FIELDS, {"uuid", "profile", "gpu_instance_id", "memory_total"})
    memory_total = _bytes(raw["memory_total"], f"{path}.memory_total")
    return MigSpec(
        uuid=_str(raw["uuid"], f"{path}.uuid"),
        profile=_str(raw["profile"], f"{path}.profile"),
        gpu_instance_id=_int(raw["gpu_instance_id"], f"{path}.gpu_instance_id", 0, 255),
        compute_instance_id=_int(raw.get("compute_instance_id", 0), f"{path}.compute_instance_id", 0, 255),
        memory_total_bytes=memory_total,
        processes=_processes(raw, path, memory_total),
        allocations=_allocations(raw, path),
    )


def _mock_field(value: Any, path: str) -> str:
    name = _str(value, path)
    if name not in MOCK_FIELDS:
        raise _fail(path, f"unknown field {name!r} (allowed: {', '.join(sorted(MOCK_FIELDS))})")
    return name


def _gpu(value: Any, path: str) -> GpuSpec:
    raw = _mapping(value, path, _GPU_FIELDS, {"index", "uuid", "model", "memory_total"})
    memory_total = _bytes(raw["memory_total"], f"{path}.memory_total")
    unsupported = frozenset(
        _mock_field(u, f"{path}.unsupported[{i}]")
        for i, u in enumerate(_list(raw.get("unsupported", []), f"{path}.unsupported"))
    )
    fails_at = _optional_number(raw, "fails_at", path)
    recovers_at = _optional_number(raw, "recovers_at", path)
    if recovers_at is not None and (fails_at is None or recovers_at <= fails_at):
        raise _fail(f"{path}.recovers_at", "needs `fails_at` and must be later than it")
    defaults = GpuSpec(index=0, uuid="", model="", memory_total_bytes=0)

    def thermal(key: str) -> float:
        if key not in raw:
            return float(getattr(defaults, key))
        return _number(raw[key], f"{path}.{key}", 0.0, _THERMAL_LIMITS[key])

    index = _int(raw["index"], f"{path}.index", 0, MAX_INDEX)
    mig = tuple(_mig(m, f"{path}.mig[{i}]") for i, m in enumerate(_list(raw.get("mig", []), f"{path}.mig")))
    processes = _processes(raw, path, memory_total)
    if mig and processes:
        raise _fail(f"{path}.processes", "a GPU in MIG mode runs processes on its `mig` devices only")
    if sum(m.memory_total_bytes for m in mig) > memory_total:
        raise _fail(f"{path}.mig", "the MIG devices' memory_total exceeds the GPU's")
    return GpuSpec(
        index=index,
        uuid=_str(raw["uuid"], f"{path}.uuid"),
        model=_str(raw["model"], f"{path}.model"),
        memory_total_bytes=memory_total,
        processes=processes,
        allocations=_allocations(raw, path),
        pci_bus_id=_str(raw["pci_bus_id"], f"{path}.pci_bus_id")
        if "pci_bus_id" in raw
        else f"00000000:{index + 0x18:02X}:00.0",
        health=_health(raw.get("health"), f"{path}.health"),
        mig=mig,
        fails_at=fails_at,
        recovers_at=recovers_at,
        unsupported=unsupported,
        idle_power_watts=thermal("idle_power_watts"),
        max_power_watts=thermal("max_power_watts"),
        idle_temperature_celsius=thermal("idle_temperature_celsius"),
        max_temperature_celsius=thermal("max_temperature_celsius"),
    )


def _mig_uuids(gpu: GpuSpec, i: int) -> list[tuple[str, str]]:
    return [(f"gpus[{i}].mig[{k}].uuid", m.uuid) for k, m in enumerate(gpu.mig)]


def _all_processes(gpus: Sequence[GpuSpec]) -> list[tuple[str, ProcessSpec]]:
    """(field path, process) of every process, on GPUs and on their MIG devices."""
    out = []
    for i, gpu in enumerate(gpus):
        out += [(f"gpus[{i}].processes[{j}]", p) for j, p in enumerate(gpu.processes)]
        for k, mig in enumerate(gpu.mig):
            out += [(f"gpus[{i}].mig[{k}].processes[{j}]", p) for j, p in enumerate(mig.processes)]
    return out


def parse_scenario(data: Any) -> Scenario:
    """Validate a loaded YAML document and build the Scenario; raise ScenarioError naming the field."""
    raw = _mapping(
        data,
        "",
        {"node", "duration", "loop", "attribution", "gpus", "driver_version", "cuda_version"},
        {"gpus"},
    )
    gpus = tuple(_gpu(g, f"gpus[{i}]") for i, g in enumerate(_list(raw["gpus"], "gpus")))
    if not gpus:
        raise _fail("gpus", "at least one GPU is required")
    seen_index: set[int] = set()
    seen_uuid: set[str] = set()
    for i, gpu in enumerate(gpus):
        if gpu.index in seen_index:
            raise _fail(f"gpus[{i}].index", f"duplicate index {gpu.index!r}")
        seen_index.add(gpu.index)
        for where, uuid in ((f"gpus[{i}].uuid", gpu.uuid), *_mig_uuids(gpu, i)):
            if uuid in seen_uuid:
                raise _fail(where, f"duplicate uuid {uuid!r}")
            seen_uuid.add(uuid)
    owners: dict[int, tuple[Attribution, str]] = {}
    for where, proc in _all_processes(gpus):
        first = owners.setdefault(proc.pid, (proc.owner, where))
        if first[0] != proc.owner:
            raise _fail(
                f"{where}.owner", f"pid {proc.pid} has another owner on {first[1].split('.processes')[0]}"
            )
    duration = _optional_number(raw, "duration", "")
    loop = _bool(raw.get("loop", False), "loop")
    if loop and not duration:
        raise _fail("duration", "required (> 0) when `loop: true`")
    attribution = dict.fromkeys(ATTRIBUTION_SOURCES, True)
    if raw.get("attribution") is not None:
        given = _mapping(raw["attribution"], "attribution", set(ATTRIBUTION_SOURCES))
        attribution.update({k: _bool(v, f"attribution.{k}") for k, v in given.items()})
    return Scenario(
        driver_version=_str(raw.get("driver_version", DEFAULT_DRIVER_VERSION), "driver_version"),
        cuda_version=_str(raw.get("cuda_version", DEFAULT_CUDA_VERSION), "cuda_version"),
        node=_str(raw.get("node", "mock-node"), "node"),
        gpus=gpus,
        duration=duration,
        loop=loop,
        attribution=attribution,
    )


def load_scenario(path: Path | None) -> Scenario:
    """Read a scenario file, or the built-in demo when path is None."""
    if path is None:
        text = resources.files("exporter").joinpath("scenarios/demo.yaml").read_text(encoding="utf-8")
        where = "built-in demo scenario"
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise ScenarioError(f"scenario {path}: cannot read: {e.strerror}") from e
        except UnicodeDecodeError as e:
            raise ScenarioError(f"scenario {path}: not UTF-8 text (byte {e.start})") from e
        where = f"scenario {path}"
    try:
        data = strict_yaml.load(text)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{where}: not valid YAML: {e}") from e
    except strict_yaml.DuplicateKeyError as e:
        raise ScenarioError(f"{where}: {e}") from e
    try:
        return parse_scenario(data)
    except ScenarioError as e:
        raise ScenarioError(f"{where}: {e}") from e
