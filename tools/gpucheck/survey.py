"""Every NVML read the exporter makes, and a few identity reads, each with its raw outcome.

The NVML source (exporter/sources/nvml.py) leaves a NOT_SUPPORTED field out without a trace; this survey
keeps the outcome of each read (a value, NOT_SUPPORTED, no data yet, or another error by NVML's name), so
the report says what this GPU supports and the mock scenarios can be made to match it. Each probe names
the scenario `unsupported` field it stands for (exporter/sources/scenario_model.py, MOCK_FIELDS).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Literal

import pynvml

from exporter.sources.nvml_reads import error_name, text
from exporter.sources.scenario_model import MAX_CELSIUS, MAX_WATTS

Kind = Literal["value", "not_supported", "no_data", "error"]
# NVML's "nothing to report yet" (no process-utilization samples): not a failure, not unsupported.
_NO_DATA = {pynvml.NVML_ERROR_NOT_FOUND}
# nvmlValueType_t -> the member of the field value union holding it
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    value: Any = None  # JSON-ready (see `plain`) when kind == "value"
    error: str | None = None  # NVML's error name otherwise


@dataclass(frozen=True)
class Probe:
    key: str
    field: str | None  # the scenario `unsupported` field this read belongs to; None: identity, always read
    read: Callable[[Any], Any]


def plain(value: Any) -> Any:
    """A pynvml result (or a probe's own composite of them) as JSON data: structures and mappings as
    objects, bytes as text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return text(value)
    if isinstance(value, ctypes.Structure | ctypes.Union):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, list | tuple | ctypes.Array):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if hasattr(value, "__dict__"):
        return {k: plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)


def _nvml(name: str, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """A read of pynvml.<name>(handle, *args), looked up at call time (tests install fakes)."""
    return lambda handle: getattr(pynvml, name)(handle, *args, **kwargs)


def _field(field_id: int, scope: int = 0) -> Callable[[Any], Any]:
    """One NVML field value (`scope`: the link of a per-link field, as the exporter asks); a per-field
    failure raises as the call's own error would."""

    def read(handle: Any) -> Any:
        (v,) = pynvml.nvmlDeviceGetFieldValues(handle, [(field_id, scope)])
        if int(v.nvmlReturn) != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(int(v.nvmlReturn))
        return getattr(v.value, _VALUE_MEMBERS.get(int(v.valueType), "ullVal"))

    return read


def _nvlink_throughput(handle: Any) -> list[dict[str, Any]]:
    links = int(_field(pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT)(handle))
    return [
        {
            "link": link,
            "tx_kib": _field(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link)(handle),
            "rx_kib": _field(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link)(handle),
        }
        for link in range(links)
    ]


def _xid_events(handle: Any) -> str:
    events = pynvml.nvmlEventSetCreate()
    try:
        pynvml.nvmlDeviceRegisterEvents(handle, getattr(pynvml, "nvmlEventTypeXidCriticalError", 8), events)
        return "registered"
    finally:
        pynvml.nvmlEventSetFree(events)


def _memory_v2(handle: Any) -> Any:
    return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)


def _clock_events(handle: Any) -> Any:
    fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    return (fn or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)(handle)


_CORRECTED, _UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
_VOLATILE, _AGGREGATE = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC

PROBES: tuple[Probe, ...] = (
    # identity and limits (what a scenario needs to look like this GPU)
    Probe("name", None, _nvml("nvmlDeviceGetName")),
    Probe("uuid", None, _nvml("nvmlDeviceGetUUID")),
    Probe("pci_info", None, _nvml("nvmlDeviceGetPciInfo")),
    Probe("serial", None, _nvml("nvmlDeviceGetSerial")),
    Probe("board_part_number", None, _nvml("nvmlDeviceGetBoardPartNumber")),
    Probe("vbios_version", None, _nvml("nvmlDeviceGetVbiosVersion")),
    Probe("architecture", None, _nvml("nvmlDeviceGetArchitecture")),
    Probe("cuda_compute_capability", None, _nvml("nvmlDeviceGetCudaComputeCapability")),
    Probe("brand", None, _nvml("nvmlDeviceGetBrand")),
    Probe("persistence_mode", None, _nvml("nvmlDeviceGetPersistenceMode")),
    Probe("compute_mode", None, _nvml("nvmlDeviceGetComputeMode")),
    Probe("performance_state", None, _nvml("nvmlDeviceGetPerformanceState")),
    Probe("enforced_power_limit_mw", None, _nvml("nvmlDeviceGetEnforcedPowerLimit")),
    Probe("default_power_limit_mw", None, _nvml("nvmlDeviceGetPowerManagementDefaultLimit")),
    Probe("power_limit_constraints_mw", None, _nvml("nvmlDeviceGetPowerManagementLimitConstraints")),
    Probe("max_sm_clock_mhz", None, _nvml("nvmlDeviceGetMaxClockInfo", pynvml.NVML_CLOCK_SM)),
    Probe("max_memory_clock_mhz", None, _nvml("nvmlDeviceGetMaxClockInfo", pynvml.NVML_CLOCK_MEM)),
    Probe("mig_mode", None, _nvml("nvmlDeviceGetMigMode")),
    Probe("compute_processes", None, _nvml("nvmlDeviceGetComputeRunningProcesses")),
    Probe("graphics_processes", None, _nvml("nvmlDeviceGetGraphicsRunningProcesses")),
    # the exporter's reads, in exporter/sources/nvml.py's order, by the scenario field they stand for
    # (every MOCK_FIELDS member has one: tests/tools/gpucheck/test_gpu_check.py)
    Probe("utilization", "utilization", _nvml("nvmlDeviceGetUtilizationRates")),
    Probe("memory_v2", "memory", _memory_v2),
    Probe("memory", "memory", _nvml("nvmlDeviceGetMemoryInfo")),
    Probe(
        "temperature_celsius", "temperature", _nvml("nvmlDeviceGetTemperature", pynvml.NVML_TEMPERATURE_GPU)
    ),
    Probe("power_mw", "power", _nvml("nvmlDeviceGetPowerUsage")),
    Probe("energy_mj", "energy", _nvml("nvmlDeviceGetTotalEnergyConsumption")),
    Probe("process_utilization", "process_utilization", _nvml("nvmlDeviceGetProcessUtilization", 0)),
    Probe("sm_clock_mhz", "clocks", _nvml("nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_SM)),
    Probe("memory_clock_mhz", "clocks", _nvml("nvmlDeviceGetClockInfo", pynvml.NVML_CLOCK_MEM)),
    Probe("encoder_utilization", "encoder", _nvml("nvmlDeviceGetEncoderUtilization")),
    Probe("decoder_utilization", "decoder", _nvml("nvmlDeviceGetDecoderUtilization")),
    Probe("pcie_tx_kb_s", "pcie", _nvml("nvmlDeviceGetPcieThroughput", pynvml.NVML_PCIE_UTIL_TX_BYTES)),
    Probe("pcie_rx_kb_s", "pcie", _nvml("nvmlDeviceGetPcieThroughput", pynvml.NVML_PCIE_UTIL_RX_BYTES)),
    Probe("pcie_replays", "pcie", _nvml("nvmlDeviceGetPcieReplayCounter")),
    Probe("memory_temperature_celsius", "memory_temperature", _field(pynvml.NVML_FI_DEV_MEMORY_TEMP)),
    Probe("nvlink_link_count", "nvlink", _field(pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT)),
    Probe("nvlink_throughput", "nvlink", _nvlink_throughput),
    Probe("ecc_corrected_volatile", "ecc", _nvml("nvmlDeviceGetTotalEccErrors", _CORRECTED, _VOLATILE)),
    Probe("ecc_corrected_aggregate", "ecc", _nvml("nvmlDeviceGetTotalEccErrors", _CORRECTED, _AGGREGATE)),
    Probe("ecc_uncorrected_volatile", "ecc", _nvml("nvmlDeviceGetTotalEccErrors", _UNCORRECTED, _VOLATILE)),
    Probe("ecc_uncorrected_aggregate", "ecc", _nvml("nvmlDeviceGetTotalEccErrors", _UNCORRECTED, _AGGREGATE)),
    Probe("remapped_rows", "remapped_rows", _nvml("nvmlDeviceGetRemappedRows")),
    Probe("clock_event_reasons", "clock_events", _clock_events),
    Probe("xid_events", "xid", _xid_events),
)


def outcome(read: Callable[[Any], Any], handle: Any) -> Outcome:
    try:
        return Outcome("value", plain(read(handle)))
    except pynvml.NVMLError as e:
        code = getattr(e, "value", None)
        if code == pynvml.NVML_ERROR_NOT_SUPPORTED:
            return Outcome("not_supported", error=error_name(e))
        return Outcome("no_data" if code in _NO_DATA else "error", error=error_name(e))
    except Exception as e:  # a binding without the function, a malformed answer: recorded, never fatal
        return Outcome("error", error=f"{type(e).__name__}: {e}")


@dataclass
class GpuSurvey:
    """One GPU's outcomes, keyed by probe."""

    index: int
    outcomes: dict[str, Outcome]

    def value(self, key: str) -> Any:
        found = self.outcomes.get(key)
        return found.value if found is not None and found.kind == "value" else None

    def keys(self, kind: Kind) -> list[str]:
        return [k for k, o in self.outcomes.items() if o.kind == kind]

    def unsupported_fields(self) -> list[str]:
        """Scenario fields all of whose reads answered NOT_SUPPORTED (v1 memory answering, v2 not, is
        supported: the exporter falls back to v1)."""
        by_field: dict[str, list[Kind]] = {}
        for probe in PROBES:
            if probe.field is not None and probe.key in self.outcomes:
                by_field.setdefault(probe.field, []).append(self.outcomes[probe.key].kind)
        return sorted(f for f, kinds in by_field.items() if all(k == "not_supported" for k in kinds))

    def memory_total_bytes(self) -> int | None:
        memory = self.value("memory_v2") or self.value("memory")
        return int(memory["total"]) if isinstance(memory, dict) and "total" in memory else None

    def pci_bus_id(self) -> str | None:
        pci = self.value("pci_info")
        return str(pci["busId"]) if isinstance(pci, dict) and "busId" in pci else None

    def power_watts(self) -> float | None:
        mw = self.value("power_mw")
        return None if mw is None else float(mw) / 1000.0

    def mig_enabled(self) -> bool:
        mode = self.value("mig_mode")
        return isinstance(mode, list) and bool(mode) and mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.value("uuid"),
            "name": self.value("name"),
            "fields": {k: o.value for k, o in self.outcomes.items() if o.kind == "value"},
            "not_supported": self.keys("not_supported"),
            "no_data": {k: o.error for k, o in self.outcomes.items() if o.kind == "no_data"},
            "errors": {k: o.error for k, o in self.outcomes.items() if o.kind == "error"},
            "scenario_unsupported": self.unsupported_fields(),
        }


def survey_gpu(index: int) -> GpuSurvey:
    """Every probe on GPU `index` (NVML initialised by the caller)."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    return GpuSurvey(index, {p.key: outcome(p.read, handle) for p in PROBES})


def _system_read(name: str) -> Callable[[Any], Any]:
    return lambda _handle: getattr(pynvml, name)()


def system() -> dict[str, Any]:
    """Driver, CUDA driver and NVML versions, the binding's version and the GPU count."""
    out: dict[str, Any] = {}
    for key, name in (
        ("driver_version", "nvmlSystemGetDriverVersion"),
        ("cuda_driver_version", "nvmlSystemGetCudaDriverVersion"),
        ("nvml_version", "nvmlSystemGetNVMLVersion"),
        ("gpu_count", "nvmlDeviceGetCount"),
    ):
        result = outcome(_system_read(name), None)
        out[key] = result.value if result.kind == "value" else {"error": result.error}
    try:
        out["nvidia_ml_py"] = metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        out["nvidia_ml_py"] = None
    return out


def cuda_version_text(value: Any) -> str | None:
    """nvmlSystemGetCudaDriverVersion's 12040 as "12.4" (as the exporter labels it)."""
    return f"{value // 1000}.{value % 1000 // 10}" if isinstance(value, int) else None


def scenario_gpu(idle: GpuSurvey, loaded: GpuSurvey | None = None) -> dict[str, Any]:
    """This GPU as a mock scenario's `gpus` entry (docs/exporter.md, "Mock scenarios"): identity, memory,
    the fields it does not support, idle power and temperature (read before the load) and its power limit."""
    seen = loaded or idle
    gpu: dict[str, Any] = {
        "index": idle.index,
        "uuid": str(seen.value("uuid") or f"GPU-unknown-{idle.index}"),
        "model": str(seen.value("name") or "unknown"),
        "memory_total": seen.memory_total_bytes() or 0,
    }
    if seen.pci_bus_id():
        gpu["pci_bus_id"] = seen.pci_bus_id()
    gpu["unsupported"] = seen.unsupported_fields()
    watts, limit = idle.power_watts(), seen.value("enforced_power_limit_mw")
    idle_celsius = idle.value("temperature_celsius")
    if watts is not None and 0 <= watts <= MAX_WATTS:
        gpu["idle_power_watts"] = round(watts, 1)
    if isinstance(limit, int | float) and 0 <= limit / 1000.0 <= MAX_WATTS:
        gpu["max_power_watts"] = round(limit / 1000.0, 1)
    if isinstance(idle_celsius, int | float) and 0 <= idle_celsius <= MAX_CELSIUS:
        gpu["idle_temperature_celsius"] = float(idle_celsius)
    links = seen.value("nvlink_link_count")
    if isinstance(links, int | float):
        gpu["health"] = {"nvlink": links > 0}
    return gpu


def scenario(idle: list[GpuSurvey], loaded: list[GpuSurvey], versions: dict[str, Any]) -> dict[str, Any]:
    """A scenario file (JSON is valid input for `--source mock --scenario`) with this node's GPUs, idle."""
    by_index = {s.index: s for s in loaded}
    out: dict[str, Any] = {}
    if isinstance(versions.get("driver_version"), str):
        out["driver_version"] = versions["driver_version"]
    cuda = cuda_version_text(versions.get("cuda_driver_version"))
    if cuda:
        out["cuda_version"] = cuda
    out["gpus"] = [scenario_gpu(s, by_index.get(s.index)) for s in idle]
    return out
