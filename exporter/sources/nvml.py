"""The NVML source: reads every GPU of the node through nvidia-ml-py (module `pynvml`).

Errors are isolated per GPU and per field: NOT_SUPPORTED leaves the field out (the GPU still
counts as read fine), GPU_IS_LOST / RESET_REQUIRED marks the GPU lost under its last known
uuid/model, any other error leaves the field out, marks the GPU not ok and records the error.

The per-process reads (who runs on a GPU, each process's SM share) are in sources/nvml_processes.py,
the classified single read in sources/nvml_reads.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.model import CLOCK_EVENT_REASONS, ECC_SCOPES, ECC_TYPES, GpuSample, MigInstance
from exporter.ports import SourceError
from exporter.sources.nvml_processes import ProcessReader
from exporter.sources.nvml_reads import (
    GpuLost,
    call,
    code_of,
    error_name,
    field_values,
    ratio,
    record,
    text,
    versions,
)

log = logging.getLogger(__name__)

# Drivers without nvmlDeviceGetMemoryInfo_v2 (or with another struct version).
_NO_MEMORY_V2 = {pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH}


# nvmlClocksEventReason* bits in CLOCK_EVENT_REASONS order (NVML's own order: bit 0 is gpu_idle).
_REASON_BITS = tuple((1 << bit, name) for bit, name in enumerate(CLOCK_EVENT_REASONS))
_ECC_TYPE = dict(
    zip(
        ECC_TYPES,
        (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        strict=True,
    )
)
_ECC_SCOPE = dict(zip(ECC_SCOPES, (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC), strict=True))
_XID_EVENT = getattr(pynvml, "nvmlEventTypeXidCriticalError", 8)


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
        self._processes = ProcessReader()
        self._memory_v2 = hasattr(pynvml, "nvmlMemory_v2")
        self._driver_version, self._cuda_version = versions()
        # Xid errors arrive as NVML events; one event set for every GPU, drained at each collection.
        self._events: Any = None
        self._watched: dict[str, bool] = {}  # uuid -> registered for Xid events
        self._xid: dict[str, dict[int, int]] = {}  # uuid -> Xid code -> count since start
        self._last_xid: dict[str, int] = {}
        try:
            self._events = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as e:
            log.info("NVML events unavailable (%s): no Xid counts", error_name(e))

    def close(self) -> None:
        if self._events is not None:
            try:
                pynvml.nvmlEventSetFree(self._events)
            except pynvml.NVMLError as e:
                log.debug("nvmlEventSetFree: %s", e)
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
        self._drain_xid_events()
        samples = [s for index in range(count) for s in self._read_device(index)]
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

    def _read_device(self, index: int) -> list[GpuSample]:
        """The GPU, then its MIG devices when it is in MIG mode."""
        previous = self._by_index.get(index)
        ident = _Identity(
            index, previous.uuid if previous else "unknown", previous.model if previous else "unknown"
        )
        sample = GpuSample(ident.index, ident.uuid, ident.model)
        try:
            handle = call(sample, "device", pynvml.nvmlDeviceGetHandleByIndex, index)
            uuid = call(sample, "device", pynvml.nvmlDeviceGetUUID, handle) if handle is not None else None
            name = call(sample, "device", pynvml.nvmlDeviceGetName, handle) if handle is not None else None
            if handle is None or uuid is None:
                return [sample]  # not ok, error recorded under "device"
            ident = _Identity(index, text(uuid), text(name) if name is not None else ident.model)
            self._known[ident.uuid] = self._by_index[index] = ident
            sample.uuid, sample.model = ident.uuid, ident.model
            self._read_fields(sample, handle)
            self._read_health(sample, handle)
            self._watch_xid(sample, handle)
            return [sample, *self._read_mig(sample, handle)]
        except GpuLost as lost:
            return [
                GpuSample(
                    ident.index, ident.uuid, ident.model, ok=False, lost=True, errors={"device": str(lost)}
                )
            ]

    def _read_fields(self, sample: GpuSample, handle: object) -> None:
        rates = call(sample, "utilization", pynvml.nvmlDeviceGetUtilizationRates, handle)
        if rates is not None:
            sample.utilization = ratio(rates.gpu)
            sample.memory_utilization = ratio(rates.memory)
        memory = self._memory(sample, handle)
        if memory is not None:
            sample.memory_used_bytes = int(memory.used)
            sample.memory_total_bytes = int(memory.total)
            reserved = getattr(memory, "reserved", None)
            sample.memory_reserved_bytes = int(reserved) if reserved is not None else None
        temperature = call(
            sample, "temperature", pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU
        )
        if temperature is not None:
            sample.temperature_celsius = float(temperature)
        power = call(sample, "power", pynvml.nvmlDeviceGetPowerUsage, handle)
        if power is not None:
            sample.power_watts = power / 1000.0  # mW
        energy = call(sample, "energy", pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        if energy is not None:
            sample.energy_joules = energy / 1000.0  # mJ
        sample.processes = self._processes.read(sample, handle)

    def _read_health(self, sample: GpuSample, handle: object) -> None:
        """Identity and health signals; each read on its own (NOT_SUPPORTED leaves the field out)."""
        sample.driver_version, sample.cuda_version = self._driver_version, self._cuda_version
        pci = call(sample, "pci", pynvml.nvmlDeviceGetPciInfo, handle)
        if pci is not None:
            sample.pci_bus_id = text(pci.busId)
        sm = call(sample, "clocks", pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
        mem = call(sample, "clocks", pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM)
        sample.sm_clock_hertz = None if sm is None else float(sm) * 1e6
        sample.memory_clock_hertz = None if mem is None else float(mem) * 1e6
        enc = call(sample, "encoder", pynvml.nvmlDeviceGetEncoderUtilization, handle)
        dec = call(sample, "decoder", pynvml.nvmlDeviceGetDecoderUtilization, handle)
        sample.encoder_utilization = None if enc is None else ratio(enc[0])
        sample.decoder_utilization = None if dec is None else ratio(dec[0])
        tx = call(sample, "pcie", pynvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)
        rx = call(sample, "pcie", pynvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        sample.pcie_tx_bytes_per_second = None if tx is None else float(tx) * 1024  # KB/s
        sample.pcie_rx_bytes_per_second = None if rx is None else float(rx) * 1024
        replays = call(sample, "pcie", pynvml.nvmlDeviceGetPcieReplayCounter, handle)
        sample.pcie_replays = None if replays is None else int(replays)
        self._read_fields_api(sample, handle)
        for kind, error_type in _ECC_TYPE.items():
            for scope, counter in _ECC_SCOPE.items():
                count = call(sample, "ecc", pynvml.nvmlDeviceGetTotalEccErrors, handle, error_type, counter)
                if count is not None:
                    sample.ecc_errors[(kind, scope)] = int(count)
        rows = call(sample, "remapped_rows", pynvml.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            correctable, uncorrectable, pending, failure = rows
            sample.remapped_rows = {"correctable": int(correctable), "uncorrectable": int(uncorrectable)}
            sample.row_remap_pending, sample.row_remap_failure = bool(pending), bool(failure)
        reasons_fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        mask = call(sample, "clock_events", reasons_fn, handle)
        if mask is not None:
            sample.clock_event_reasons = frozenset(name for bit, name in _REASON_BITS if int(mask) & bit)
        if self._events is not None:
            sample.xid_errors = (
                dict(self._xid.get(sample.uuid, {})) if self._watched.get(sample.uuid) else None
            )
            sample.last_xid = self._last_xid.get(sample.uuid, 0)

    def _read_fields_api(self, sample: GpuSample, handle: object) -> None:
        """Memory temperature and NVLink throughput: NVML field values (one call, per-field status)."""
        links = field_values(
            sample, handle, [(pynvml.NVML_FI_DEV_MEMORY_TEMP, 0), (pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0)]
        )
        if links is None:
            return
        memory_temp, link_count = links
        if memory_temp is not None:
            sample.memory_temperature_celsius = float(memory_temp)
        if not link_count:
            return  # no NVLink: no series
        ids = [
            (field, link)
            for link in range(int(link_count))
            for field in (
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
            )
        ]
        values = field_values(sample, handle, ids)
        known = [v for v in values or [] if v is not None]
        if values is None or len(known) != len(values):
            return
        sample.nvlink_tx_bytes = int(sum(known[0::2])) * 1024  # KiB
        sample.nvlink_rx_bytes = int(sum(known[1::2])) * 1024

    def _watch_xid(self, sample: GpuSample, handle: object) -> None:
        if self._events is None or sample.uuid in self._watched:
            return
        try:
            pynvml.nvmlDeviceRegisterEvents(handle, _XID_EVENT, self._events)
            self._watched[sample.uuid] = True
        except pynvml.NVMLError as e:
            self._watched[sample.uuid] = False  # e.g. NOT_SUPPORTED: no Xid series rather than zeros
            log.info("GPU %s: Xid events unavailable (%s)", sample.uuid, error_name(e))
            return
        if sample.xid_errors is None:
            sample.xid_errors, sample.last_xid = {}, 0

    def _drain_xid_events(self) -> None:
        """Count the Xid events since the last collection (never waits: timeout 0)."""
        if self._events is None or not any(self._watched.values()):
            return
        for _ in range(10_000):  # a storm of events must not stall the collection
            try:
                event = pynvml.nvmlEventSetWait_v2(self._events, 0)
            except pynvml.NVMLError:  # TIMEOUT: none left (or the wait failed; next collection retries)
                return
            try:
                uuid = text(pynvml.nvmlDeviceGetUUID(event.device))
            except pynvml.NVMLError:
                continue
            code = int(event.eventData)
            counts = self._xid.setdefault(uuid, {})
            counts[code] = counts.get(code, 0) + 1
            self._last_xid[uuid] = code

    def _read_mig(self, parent: GpuSample, handle: object) -> list[GpuSample]:
        """A GPU in MIG mode: each MIG device as a device of its own (memory, processes)."""
        mode = call(parent, "mig", pynvml.nvmlDeviceGetMigMode, handle)
        if mode is None or int(mode[0]) != pynvml.NVML_DEVICE_MIG_ENABLE:
            return []
        parent.mig_enabled = True
        count = call(parent, "mig", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        out = []
        for i in range(int(count)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except pynvml.NVMLError as e:
                if code_of(e) != pynvml.NVML_ERROR_NOT_FOUND:  # NOT_FOUND: no MIG device in this slot
                    record(parent, "mig", e)
                continue
            sample = GpuSample(parent.index, "unknown", parent.model)
            uuid = call(sample, "device", pynvml.nvmlDeviceGetUUID, mig)
            if uuid is None:
                parent.ok = False
                parent.errors.update(sample.errors)
                continue
            name = call(sample, "device", pynvml.nvmlDeviceGetName, mig)
            sample.uuid = text(uuid)
            sample.model = text(name) if name is not None else parent.model
            gi = call(sample, "mig", pynvml.nvmlDeviceGetGpuInstanceId, mig)
            ci = call(sample, "mig", pynvml.nvmlDeviceGetComputeInstanceId, mig)
            profile = sample.model.rsplit(" ", 1)[-1] if " MIG " in sample.model else ""
            sample.mig = MigInstance(parent.uuid, int(gi or 0), int(ci or 0), profile)
            sample.pci_bus_id, sample.driver_version = parent.pci_bus_id, parent.driver_version
            sample.cuda_version = parent.cuda_version
            memory = self._memory(sample, mig)
            if memory is not None:
                sample.memory_used_bytes, sample.memory_total_bytes = int(memory.used), int(memory.total)
            sample.processes = self._processes.read(sample, mig)
            out.append(sample)
        return out

    def _memory(self, sample: GpuSample, handle: object) -> Any:
        # v2 does not count the driver's reserved memory as used; v1 does.
        if self._memory_v2:
            try:
                return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            except pynvml.NVMLError as e:
                if code_of(e) not in _NO_MEMORY_V2:
                    record(sample, "memory", e)
                    return None
                log.info("nvmlDeviceGetMemoryInfo_v2 unavailable (%s); using v1", error_name(e))
                self._memory_v2 = False
        return call(sample, "memory", pynvml.nvmlDeviceGetMemoryInfo, handle)
