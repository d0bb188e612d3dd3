"""Scenario files for the mock source: schema, validation and lookup by time.

A scenario describes one node: its GPUs, which containers the kubelet allocated them to, and the
processes on each GPU with a timeline of phases. Validation is strict (unknown keys are errors) and
every error names the field path, e.g. ``gpus[2].processes[0].pid``. The format is documented in
docs/exporter.md.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from automator.quantity import parse_quantity
from exporter.model import ATTRIBUTION_SOURCES, Attribution, ContainerRef

# Fields a scenario may declare unsupported; they match the nvml source's error keys.
MOCK_FIELDS = frozenset({"utilization", "memory", "temperature", "power", "energy", "process_utilization"})


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
class GpuSpec:
    index: int
    uuid: str
    model: str
    memory_total_bytes: int
    processes: tuple[ProcessSpec, ...] = ()
    allocations: tuple[ContainerRef, ...] = ()
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


def _int(value: Any, path: str, minimum: int = 0) -> int:
    # bool is an int subclass; `pid: true` is a typo, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(path, f"expected an integer >= {minimum}, got {value!r}")
    return value


def _number(value: Any, path: str, minimum: float = 0.0, maximum: float | None = None) -> float:
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
        return int(quantity)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(path, f"expected bytes (an integer >= 0) or a quantity such as 80Gi, got {value!r}")
    return value


# --- the schema ---


def _owner(value: Any, path: str) -> Attribution:
    if value is None:
        return Attribution("unresolved")
    raw = _mapping(value, path, {"namespace", "pod", "container", "host", "unresolved"})
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
    raw = _mapping(value, path, {"namespace", "pod", "container"}, {"namespace", "pod", "container"})
    return ContainerRef(
        namespace=_str(raw["namespace"], f"{path}.namespace"),
        pod=_str(raw["pod"], f"{path}.pod"),
        container=_str(raw["container"], f"{path}.container"),
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
        pid=_int(raw["pid"], f"{path}.pid", 1),
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
_GPU_FIELDS = {
    *("index", "uuid", "model", "memory_total", "processes", "allocations"),
    *("fails_at", "recovers_at", "unsupported", *_THERMAL_FIELDS),
}


def _mock_field(value: Any, path: str) -> str:
    name = _str(value, path)
    if name not in MOCK_FIELDS:
        raise _fail(path, f"unknown field {name!r} (allowed: {', '.join(sorted(MOCK_FIELDS))})")
    return name


def _gpu(value: Any, path: str) -> GpuSpec:
    raw = _mapping(value, path, _GPU_FIELDS, {"index", "uuid", "model", "memory_total"})
    processes = tuple(
        _process(p, f"{path}.processes[{i}]")
        for i, p in enumerate(_list(raw.get("processes", []), f"{path}.processes"))
    )
    seen: set[int] = set()
    for i, proc in enumerate(processes):
        if proc.pid in seen:
            raise _fail(f"{path}.processes[{i}].pid", f"duplicate pid {proc.pid} on this GPU")
        seen.add(proc.pid)
    allocations = tuple(
        _container_ref(a, f"{path}.allocations[{i}]")
        for i, a in enumerate(_list(raw.get("allocations", []), f"{path}.allocations"))
    )
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
        return _number(raw[key], f"{path}.{key}") if key in raw else float(getattr(defaults, key))

    spec = GpuSpec(
        index=_int(raw["index"], f"{path}.index"),
        uuid=_str(raw["uuid"], f"{path}.uuid"),
        model=_str(raw["model"], f"{path}.model"),
        memory_total_bytes=_bytes(raw["memory_total"], f"{path}.memory_total"),
        processes=processes,
        allocations=allocations,
        fails_at=fails_at,
        recovers_at=recovers_at,
        unsupported=unsupported,
        idle_power_watts=thermal("idle_power_watts"),
        max_power_watts=thermal("max_power_watts"),
        idle_temperature_celsius=thermal("idle_temperature_celsius"),
        max_temperature_celsius=thermal("max_temperature_celsius"),
    )
    for i, proc in enumerate(processes):
        for j, phase in enumerate(proc.phases):
            if phase.memory_bytes > spec.memory_total_bytes:
                raise _fail(f"{path}.processes[{i}].phases[{j}].memory", "exceeds the GPU's memory_total")
    return spec


def parse_scenario(data: Any) -> Scenario:
    """Validate a loaded YAML document and build the Scenario; raise ScenarioError naming the field."""
    raw = _mapping(data, "", {"node", "duration", "loop", "attribution", "gpus"}, {"gpus"})
    gpus = tuple(_gpu(g, f"gpus[{i}]") for i, g in enumerate(_list(raw["gpus"], "gpus")))
    if not gpus:
        raise _fail("gpus", "at least one GPU is required")
    for field_name in ("index", "uuid"):
        seen: set[object] = set()
        for i, gpu in enumerate(gpus):
            value = getattr(gpu, field_name)
            if value in seen:
                raise _fail(f"gpus[{i}].{field_name}", f"duplicate {field_name} {value!r}")
            seen.add(value)
    owners: dict[int, tuple[Attribution, int]] = {}
    for i, gpu in enumerate(gpus):
        for j, proc in enumerate(gpu.processes):
            first = owners.setdefault(proc.pid, (proc.owner, i))
            if first[0] != proc.owner:
                raise _fail(
                    f"gpus[{i}].processes[{j}].owner", f"pid {proc.pid} has another owner on gpus[{first[1]}]"
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
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{where}: not valid YAML: {e}") from e
    try:
        return parse_scenario(data)
    except ScenarioError as e:
        raise ScenarioError(f"{where}: {e}") from e
