"""The NVML source: reads every GPU of the node through nvidia-ml-py (module `pynvml`).

Errors are isolated per GPU and per field: NOT_SUPPORTED leaves the field out (the GPU still
counts as read fine), GPU_IS_LOST / RESET_REQUIRED marks the GPU lost under its last known
uuid/model, any other error leaves the field out, marks the GPU not ok and records the error.

Per-process SM utilization comes from nvmlDeviceGetProcessUtilization, asked for the samples newer
than the last one seen on that GPU. NVML only keeps samples for processes that used the GPU, so a
listed process without a newer sample (or NOT_FOUND: no samples at all) gets 0 -- but only from the
second query of that GPU on: the first one has no known window (the driver's sample buffer may have
just started), so there a missing sample is unknown (None), not idle. When the call itself fails or
is not supported, every process's utilization stays unknown (None), never 0. A compute process list
that cannot be read (even NOT_SUPPORTED) marks the GPU's processes unknown, so no container on it
reads idle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from exporter.model import GpuSample, ProcessSample
from exporter.ports import SourceError

log = logging.getLogger(__name__)

T = TypeVar("T")

_LOST = {pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED}
# nvmlDeviceGetProcessUtilization answers "no samples" as NOT_FOUND, or as SUCCESS on its sizing call.
_NO_SAMPLES = {pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_SUCCESS}
# Drivers without nvmlDeviceGetMemoryInfo_v2 (or with another struct version).
_NO_MEMORY_V2 = {pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH}


class _GpuLost(Exception):
    pass


def error_name(e: pynvml.NVMLError) -> str:
    """A short stable name for an NVML error, used as a label value (e.g. `NoPermission`)."""
    name = type(e).__name__
    if name.startswith("NVMLError_"):
        return name.removeprefix("NVMLError_")
    return f"code_{getattr(e, 'value', 'unknown')}"


def _code(e: pynvml.NVMLError) -> int | None:
    value = getattr(e, "value", None)
    return value if isinstance(value, int) else None


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _record(sample: GpuSample, field: str, e: pynvml.NVMLError) -> None:
    """Classify a failed read: _GpuLost when the GPU is gone, nothing for NOT_SUPPORTED (the field is
    just absent), else the GPU is not ok and the error is kept under `field`."""
    code = _code(e)
    if code in _LOST:
        raise _GpuLost(error_name(e)) from e
    if code != pynvml.NVML_ERROR_NOT_SUPPORTED:
        sample.ok = False
        sample.errors[field] = error_name(e)


def _call(sample: GpuSample, field: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """One NVML read; None when it failed (see `_record`)."""
    try:
        return fn(*args, **kwargs)
    except pynvml.NVMLError as e:
        _record(sample, field, e)
        return None


@dataclass
class _Identity:
    index: int
    uuid: str
    model: str


class NvmlSource:
    """Source protocol over NVML. Builds fail with SourceError when NVML cannot start."""

    name = "nvml"

    def __init__(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise SourceError(f"NVML initialisation failed: {e} (is the NVIDIA driver installed?)") from e
        self._known: dict[str, _Identity] = {}  # uuid -> identity, to name GPUs that get lost
        self._by_index: dict[int, _Identity] = {}
        self._last_seen_us: dict[str, int] = {}  # uuid -> newest process-utilization sample seen
        self._memory_v2 = hasattr(pynvml, "nvmlMemory_v2")

    def close(self) -> None:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as e:
            log.debug("nvmlShutdown: %s", e)

    def collect(self) -> list[GpuSample]:
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as e:
            # Without a count no GPU can be read: every known GPU reports the failure.
            return [
                GpuSample(i.index, i.uuid, i.model, ok=False, errors={"device": error_name(e)})
                for i in self._known.values()
            ]
        samples = [self._read_device(index) for index in range(count)]
        seen = {s.uuid for s in samples}
        # A GPU that fell off the bus may vanish from the count: keep reporting it as lost.
        for ident in self._known.values():
            if ident.uuid not in seen:
                samples.append(
                    GpuSample(
                        ident.index,
                        ident.uuid,
                        ident.model,
                        ok=False,
                        lost=True,
                        errors={"device": "vanished"},
                    )
                )
        return samples

    def _read_device(self, index: int) -> GpuSample:
        previous = self._by_index.get(index)
        ident = _Identity(
            index, previous.uuid if previous else "unknown", previous.model if previous else "unknown"
        )
        sample = GpuSample(ident.index, ident.uuid, ident.model)
        try:
            handle = _call(sample, "device", pynvml.nvmlDeviceGetHandleByIndex, index)
            uuid = _call(sample, "device", pynvml.nvmlDeviceGetUUID, handle) if handle is not None else None
            name = _call(sample, "device", pynvml.nvmlDeviceGetName, handle) if handle is not None else None
            if handle is None or uuid is None:
                return sample  # not ok, error recorded under "device"
            ident = _Identity(index, _text(uuid), _text(name) if name is not None else ident.model)
            self._known[ident.uuid] = self._by_index[index] = ident
            sample.uuid, sample.model = ident.uuid, ident.model
            self._read_fields(sample, handle)
        except _GpuLost as lost:
            return GpuSample(
                ident.index, ident.uuid, ident.model, ok=False, lost=True, errors={"device": str(lost)}
            )
        return sample

    def _read_fields(self, sample: GpuSample, handle: object) -> None:
        rates = _call(sample, "utilization", pynvml.nvmlDeviceGetUtilizationRates, handle)
        if rates is not None:
            sample.utilization = _ratio(rates.gpu)
            sample.memory_utilization = _ratio(rates.memory)
        memory = self._memory(sample, handle)
        if memory is not None:
            sample.memory_used_bytes = int(memory.used)
            sample.memory_total_bytes = int(memory.total)
        temperature = _call(
            sample, "temperature", pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU
        )
        if temperature is not None:
            sample.temperature_celsius = float(temperature)
        power = _call(sample, "power", pynvml.nvmlDeviceGetPowerUsage, handle)
        if power is not None:
            sample.power_watts = power / 1000.0  # mW
        energy = _call(sample, "energy", pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        if energy is not None:
            sample.energy_joules = energy / 1000.0  # mJ
        sample.processes = self._processes(sample, handle)

    def _memory(self, sample: GpuSample, handle: object) -> Any:
        # v2 does not count the driver's reserved memory as used; v1 does.
        if self._memory_v2:
            try:
                return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            except pynvml.NVMLError as e:
                if _code(e) not in _NO_MEMORY_V2:
                    _record(sample, "memory", e)
                    return None
                log.info("nvmlDeviceGetMemoryInfo_v2 unavailable (%s); using v1", error_name(e))
                self._memory_v2 = False
        return _call(sample, "memory", pynvml.nvmlDeviceGetMemoryInfo, handle)

    def _processes(self, sample: GpuSample, handle: object) -> list[ProcessSample]:
        memory: dict[int, int | None] = {}
        for field, fn in (
            ("processes", pynvml.nvmlDeviceGetComputeRunningProcesses),
            ("graphics_processes", pynvml.nvmlDeviceGetGraphicsRunningProcesses),
        ):
            procs = _call(sample, field, fn, handle)
            if procs is None and field == "processes":
                sample.processes_known = False  # unsupported or failed: who runs here is unknown
            for proc in procs or []:
                used = proc.usedGpuMemory
                if memory.get(proc.pid) is None:  # dedupe by pid, keep a known value
                    memory[int(proc.pid)] = int(used) if used is not None else None
        if not memory:
            return []
        utilization, without_sample = self._process_utilization(sample, handle)
        return [
            ProcessSample(
                pid=pid,
                sm_utilization=None if utilization is None else utilization.get(pid, without_sample),
                memory_used_bytes=used,
            )
            for pid, used in sorted(memory.items())
        ]

    def _process_utilization(
        self, sample: GpuSample, handle: object
    ) -> tuple[dict[int, float] | None, float | None]:
        """pid -> SM utilization of its newest sample since the last call (None: the call failed),
        and the value of a listed pid without a sample: 0 (idle) once a previous query of this GPU
        bounds the window, None (unknown) on the first query."""
        first = sample.uuid not in self._last_seen_us
        without_sample = None if first else 0.0
        last_seen = self._last_seen_us.get(sample.uuid, 0)
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(handle, last_seen)
        except pynvml.NVMLError as e:
            if _code(e) in _NO_SAMPLES:
                self._last_seen_us[sample.uuid] = last_seen
                return {}, without_sample
            _record(sample, "process_utilization", e)
            return None, None
        newest: dict[int, tuple[int, float]] = {}
        for s in samples:
            ts = int(s.timeStamp)
            if s.pid not in newest or ts > newest[s.pid][0]:
                newest[int(s.pid)] = (ts, _ratio(s.smUtil))
            last_seen = max(last_seen, ts)
        self._last_seen_us[sample.uuid] = last_seen
        return {pid: util for pid, (_, util) in newest.items()}, without_sample


def _ratio(percent: float) -> float:
    return min(1.0, max(0.0, float(percent) / 100.0))
