"""Scenario files for the mock source: the schema, validation and loading.

A scenario describes one node: its GPUs, which containers the kubelet allocated them to, and the
processes on each GPU with a timeline of phases (the types: exporter/sources/scenario_model.py).
Validation is strict (unknown keys are errors) and every error names the field path, e.g.
``gpus[2].processes[0].pid``. The format is documented in docs/exporter.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from exporter import strict_yaml
from exporter.model import ATTRIBUTION_SOURCES, CLOCK_EVENT_REASONS, Attribution, ContainerRef
from exporter.sources import scenario_fields as f
from exporter.sources.scenario_model import (
    DEFAULT_CUDA_VERSION,
    DEFAULT_DRIVER_VERSION,
    MAX_CELSIUS,
    MAX_INDEX,
    MAX_PID,
    MAX_WATTS,
    MOCK_FIELDS,
    GpuSpec,
    HealthSpec,
    MigSpec,
    Phase,
    ProcessSpec,
    Scenario,
    ScenarioError,
    XidEvent,
)

__all__ = ["ScenarioError", "load_scenario", "parse_scenario"]


# --- the schema ---


def _owner(value: Any, path: str) -> Attribution:
    if value is None:
        return Attribution("unresolved")
    raw = f.mapping(value, path, {"namespace", "pod", "container", "pod_uid", "host", "unresolved"})
    if raw.get("host") is not None and f.flag(raw["host"], f"{path}.host"):
        if len(raw) > 1:
            raise f.fail(path, "`host: true` excludes namespace/pod/container")
        return Attribution("host")
    if raw.get("unresolved") is not None and f.flag(raw["unresolved"], f"{path}.unresolved"):
        if len(raw) > 1:
            raise f.fail(path, "`unresolved: true` excludes other fields")
        return Attribution("unresolved")
    return Attribution("container", _container_ref(raw, path))


def _container_ref(value: Any, path: str) -> ContainerRef:
    raw = f.mapping(
        value, path, {"namespace", "pod", "container", "pod_uid"}, {"namespace", "pod", "container"}
    )
    return ContainerRef(
        namespace=f.text(raw["namespace"], f"{path}.namespace"),
        pod=f.text(raw["pod"], f"{path}.pod"),
        container=f.text(raw["container"], f"{path}.container"),
        pod_uid=f.text(raw["pod_uid"], f"{path}.pod_uid") if "pod_uid" in raw else "",
    )


def _phase(value: Any, path: str) -> Phase:
    raw = f.mapping(value, path, {"from", "utilization", "memory", "running"}, {"from"})
    running = f.flag(raw.get("running", True), f"{path}.running")
    if running and "utilization" not in raw:
        raise f.fail(f"{path}.utilization", "required field missing (or set `running: false`)")
    return Phase(
        start=f.number(raw["from"], f"{path}.from"),
        utilization=f.number(raw.get("utilization", 0), f"{path}.utilization", 0.0, 1.0),
        memory_bytes=f.byte_count(raw.get("memory", 0), f"{path}.memory"),
        running=running,
    )


def _process(value: Any, path: str) -> ProcessSpec:
    raw = f.mapping(value, path, {"pid", "owner", "phases", "period"}, {"pid", "phases"})
    phases = tuple(
        _phase(p, f"{path}.phases[{i}]") for i, p in enumerate(f.items(raw["phases"], f"{path}.phases"))
    )
    if not phases:
        raise f.fail(f"{path}.phases", "at least one phase is required")
    for i in range(1, len(phases)):
        if phases[i].start <= phases[i - 1].start:
            raise f.fail(f"{path}.phases[{i}].from", "phases must start in increasing order")
    period = f.optional_number(raw, "period", path)
    if period is not None and period <= phases[-1].start:
        raise f.fail(f"{path}.period", "must be longer than the last phase's `from`")
    return ProcessSpec(
        pid=f.integer(raw["pid"], f"{path}.pid", 1, MAX_PID),
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
    raw = f.mapping(value, path, _HEALTH_FIELDS)
    xid = []
    for i, event in enumerate(f.items(raw.get("xid", []), f"{path}.xid")):
        where = f"{path}.xid[{i}]"
        e = f.mapping(event, where, {"at", "code"}, {"at", "code"})
        xid.append(
            XidEvent(f.number(e["at"], f"{where}.at"), f.integer(e["code"], f"{where}.code", 1, 65535))
        )
    ecc = f.mapping(raw.get("ecc") or {}, f"{path}.ecc", {"corrected", "uncorrected"})
    rows = f.mapping(
        raw.get("remapped_rows") or {},
        f"{path}.remapped_rows",
        {"correctable", "uncorrectable", "pending", "failure"},
    )
    reasons = []
    for i, reason in enumerate(f.items(raw.get("clock_events", []), f"{path}.clock_events")):
        name = f.text(reason, f"{path}.clock_events[{i}]")
        if name not in CLOCK_EVENT_REASONS:
            allowed = ", ".join(CLOCK_EVENT_REASONS)
            raise f.fail(f"{path}.clock_events[{i}]", f"unknown reason {name!r} (allowed: {allowed})")
        reasons.append(name)

    def ratio(key: str) -> float:
        return f.number(raw.get(key, 0), f"{path}.{key}", 0.0, 1.0)

    return HealthSpec(
        xid=tuple(sorted(xid, key=lambda e: e.at)),
        ecc_corrected=f.integer(ecc.get("corrected", 0), f"{path}.ecc.corrected"),
        ecc_uncorrected=f.integer(ecc.get("uncorrected", 0), f"{path}.ecc.uncorrected"),
        remapped_correctable=f.integer(rows.get("correctable", 0), f"{path}.remapped_rows.correctable"),
        remapped_uncorrectable=f.integer(rows.get("uncorrectable", 0), f"{path}.remapped_rows.uncorrectable"),
        remap_pending=f.flag(rows.get("pending", False), f"{path}.remapped_rows.pending"),
        remap_failure=f.flag(rows.get("failure", False), f"{path}.remapped_rows.failure"),
        clock_events=frozenset(reasons),
        nvlink=f.flag(raw.get("nvlink", False), f"{path}.nvlink"),
        encoder_utilization=ratio("encoder_utilization"),
        decoder_utilization=ratio("decoder_utilization"),
    )


def _processes(raw: Mapping[str, Any], path: str, memory_total: int) -> tuple[ProcessSpec, ...]:
    processes = tuple(
        _process(p, f"{path}.processes[{i}]")
        for i, p in enumerate(f.items(raw.get("processes", []), f"{path}.processes"))
    )
    seen: set[int] = set()
    for i, proc in enumerate(processes):
        if proc.pid in seen:
            raise f.fail(f"{path}.processes[{i}].pid", f"duplicate pid {proc.pid} on this GPU")
        seen.add(proc.pid)
        for j, phase in enumerate(proc.phases):
            if phase.memory_bytes > memory_total:
                raise f.fail(f"{path}.processes[{i}].phases[{j}].memory", "exceeds the GPU's memory_total")
    return processes


def _allocations(raw: Mapping[str, Any], path: str) -> tuple[ContainerRef, ...]:
    return tuple(
        _container_ref(a, f"{path}.allocations[{i}]")
        for i, a in enumerate(f.items(raw.get("allocations", []), f"{path}.allocations"))
    )


_MIG_FIELDS = {
    *("uuid", "profile", "gpu_instance_id", "compute_instance_id", "memory_total"),
    *("processes", "allocations"),
}


def _mig(value: Any, path: str) -> MigSpec:
    raw = f.mapping(value, path, _MIG_FIELDS, {"uuid", "profile", "gpu_instance_id", "memory_total"})
    memory_total = f.byte_count(raw["memory_total"], f"{path}.memory_total")
    return MigSpec(
        uuid=f.text(raw["uuid"], f"{path}.uuid"),
        profile=f.text(raw["profile"], f"{path}.profile"),
        gpu_instance_id=f.integer(raw["gpu_instance_id"], f"{path}.gpu_instance_id", 0, 255),
        compute_instance_id=f.integer(
            raw.get("compute_instance_id", 0), f"{path}.compute_instance_id", 0, 255
        ),
        memory_total_bytes=memory_total,
        processes=_processes(raw, path, memory_total),
        allocations=_allocations(raw, path),
    )


def _mock_field(value: Any, path: str) -> str:
    name = f.text(value, path)
    if name not in MOCK_FIELDS:
        raise f.fail(path, f"unknown field {name!r} (allowed: {', '.join(sorted(MOCK_FIELDS))})")
    return name


def _gpu(value: Any, path: str) -> GpuSpec:
    raw = f.mapping(value, path, _GPU_FIELDS, {"index", "uuid", "model", "memory_total"})
    memory_total = f.byte_count(raw["memory_total"], f"{path}.memory_total")
    unsupported = frozenset(
        _mock_field(u, f"{path}.unsupported[{i}]")
        for i, u in enumerate(f.items(raw.get("unsupported", []), f"{path}.unsupported"))
    )
    fails_at = f.optional_number(raw, "fails_at", path)
    recovers_at = f.optional_number(raw, "recovers_at", path)
    if recovers_at is not None and (fails_at is None or recovers_at <= fails_at):
        raise f.fail(f"{path}.recovers_at", "needs `fails_at` and must be later than it")
    defaults = GpuSpec(index=0, uuid="", model="", memory_total_bytes=0)

    def thermal(key: str) -> float:
        if key not in raw:
            return float(getattr(defaults, key))
        return f.number(raw[key], f"{path}.{key}", 0.0, _THERMAL_LIMITS[key])

    index = f.integer(raw["index"], f"{path}.index", 0, MAX_INDEX)
    mig = tuple(_mig(m, f"{path}.mig[{i}]") for i, m in enumerate(f.items(raw.get("mig", []), f"{path}.mig")))
    processes = _processes(raw, path, memory_total)
    if mig and processes:
        raise f.fail(f"{path}.processes", "a GPU in MIG mode runs processes on its `mig` devices only")
    if sum(m.memory_total_bytes for m in mig) > memory_total:
        raise f.fail(f"{path}.mig", "the MIG devices' memory_total exceeds the GPU's")
    return GpuSpec(
        index=index,
        uuid=f.text(raw["uuid"], f"{path}.uuid"),
        model=f.text(raw["model"], f"{path}.model"),
        memory_total_bytes=memory_total,
        processes=processes,
        allocations=_allocations(raw, path),
        pci_bus_id=f.text(raw["pci_bus_id"], f"{path}.pci_bus_id")
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
    raw = f.mapping(
        data,
        "",
        {"node", "duration", "loop", "attribution", "gpus", "driver_version", "cuda_version"},
        {"gpus"},
    )
    gpus = tuple(_gpu(g, f"gpus[{i}]") for i, g in enumerate(f.items(raw["gpus"], "gpus")))
    if not gpus:
        raise f.fail("gpus", "at least one GPU is required")
    seen_index: set[int] = set()
    seen_uuid: set[str] = set()
    for i, gpu in enumerate(gpus):
        if gpu.index in seen_index:
            raise f.fail(f"gpus[{i}].index", f"duplicate index {gpu.index!r}")
        seen_index.add(gpu.index)
        for where, uuid in ((f"gpus[{i}].uuid", gpu.uuid), *_mig_uuids(gpu, i)):
            if uuid in seen_uuid:
                raise f.fail(where, f"duplicate uuid {uuid!r}")
            seen_uuid.add(uuid)
    owners: dict[int, tuple[Attribution, str]] = {}
    for where, proc in _all_processes(gpus):
        first = owners.setdefault(proc.pid, (proc.owner, where))
        if first[0] != proc.owner:
            raise f.fail(
                f"{where}.owner", f"pid {proc.pid} has another owner on {first[1].split('.processes')[0]}"
            )
    duration = f.optional_number(raw, "duration", "")
    loop = f.flag(raw.get("loop", False), "loop")
    if loop and not duration:
        raise f.fail("duration", "required (> 0) when `loop: true`")
    attribution = dict.fromkeys(ATTRIBUTION_SOURCES, True)
    if raw.get("attribution") is not None:
        given = f.mapping(raw["attribution"], "attribution", set(ATTRIBUTION_SOURCES))
        attribution.update({k: f.flag(v, f"attribution.{k}") for k, v in given.items()})
    return Scenario(
        driver_version=f.text(raw.get("driver_version", DEFAULT_DRIVER_VERSION), "driver_version"),
        cuda_version=f.text(raw.get("cuda_version", DEFAULT_CUDA_VERSION), "cuda_version"),
        node=f.text(raw.get("node", "mock-node"), "node"),
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
    except (strict_yaml.DuplicateKeyError, strict_yaml.UnreadableError) as e:
        raise ScenarioError(f"{where}: {e}") from e
    try:
        return parse_scenario(data)
    except ScenarioError as e:
        raise ScenarioError(f"{where}: {e}") from e
