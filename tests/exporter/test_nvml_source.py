"""The NVML source against pynvml functions faked per GPU, errors included."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from exporter.ports import SourceError
from exporter.sources.nvml import NvmlSource

GiB = 1024**3


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class FakeGpu:
    uuid: str
    name: bytes | str = b"NVIDIA H100 80GB HBM3"
    util: tuple[int, int] = (75, 30)
    memory: tuple[int, int] = (10 * GiB, 80 * GiB)  # used, total
    temperature: int = 61
    power_mw: int = 312_500
    energy_mj: int = 9_000_500
    compute: list[tuple[int, int | None]] = field(default_factory=list)  # pid, used memory
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    samples: list[tuple[int, int, int]] = field(default_factory=list)  # pid, timestamp us, smUtil %
    errors: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code
    # health signals
    bus_id: str = "00000000:3B:00.0"
    clocks: tuple[int, int] = (1980, 2619)  # SM, memory MHz
    enc_dec: tuple[int, int] = (5, 10)  # percent
    pcie_kb: tuple[int, int] = (2048, 1024)  # tx, rx KB/s
    replays: int = 3
    memory_temp: int | None = 70  # None: no sensor (per-field NOT_SUPPORTED)
    nvlink_links: int = 0
    nvlink_kib: tuple[int, int] = (100, 50)  # per link, tx and rx
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)  # (type, counter) -> count
    rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    reasons: int = 0
    mig: list[FakeGpu] = field(default_factory=list)  # MIG devices (MIG mode when non-empty)
    gi_ci: tuple[int, int] = (0, 0)


class FakeNvml:
    """Installs fake pynvml functions; handles are opaque objects mapped to FakeGpus."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus + [m for g in gpus for m in g.mig]  # MIG devices get handles after the GPUs
        self.count = len(gpus)
        self.handles = [object() for _ in range(len(self.gpus))]
        self.events: list[tuple[int, int]] = []  # (gpu index, xid) waiting in the event set
        self.registered: list[int] = []
        self.event_error: int | None = None
        self.init_error: int | None = None
        self.count_error: int | None = None
        self.util_calls: list[tuple[int, int]] = []  # (gpu index, last seen timestamp)
        self.memory_versions: list[Any] = []
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))

    def _gpu(self, handle: object, fn: str) -> FakeGpu:
        gpu = self.gpus[self.handles.index(handle)]
        if fn in gpu.errors:
            raise nvml_error(gpu.errors[fn])
        return gpu

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise nvml_error(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        if self.count_error is not None:
            raise nvml_error(self.count_error)
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        self._gpu(self.handles[index], "nvmlDeviceGetHandleByIndex")
        return self.handles[index]

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: object) -> bytes | str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=gpu.util[0], memory=gpu.util[1])

    def nvmlDeviceGetMemoryInfo(self, handle: object, version: Any = None) -> Any:
        self.memory_versions.append(version)
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo" + ("_v2" if version else ""))
        return SimpleNamespace(used=gpu.memory[0], total=gpu.memory[1], free=gpu.memory[1] - gpu.memory[0])

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(handle, "nvmlDeviceGetTemperature").temperature

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:
        return self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[Any]:
        gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in gpu.compute]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: object) -> list[Any]:
        gpu = self._gpu(handle, "nvmlDeviceGetGraphicsRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in gpu.graphics]

    def nvmlDeviceGetProcessUtilization(self, handle: object, last_seen: int) -> list[Any]:
        self.util_calls.append((self.handles.index(handle), last_seen))
        gpu = self._gpu(handle, "nvmlDeviceGetProcessUtilization")
        fresh = [s for s in gpu.samples if s[1] > last_seen]
        if not fresh:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return [SimpleNamespace(pid=p, timeStamp=ts, smUtil=sm, memUtil=0) for p, ts, sm in fresh]

    # --- identity and health ---

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetPciInfo(self, handle: object) -> Any:
        return SimpleNamespace(busId=self._gpu(handle, "nvmlDeviceGetPciInfo").bus_id.encode())

    def nvmlDeviceGetClockInfo(self, handle: object, kind: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        return gpu.clocks[0] if kind == pynvml.NVML_CLOCK_SM else gpu.clocks[1]

    def nvmlDeviceGetEncoderUtilization(self, handle: object) -> list[int]:
        return [self._gpu(handle, "nvmlDeviceGetEncoderUtilization").enc_dec[0], 167000]

    def nvmlDeviceGetDecoderUtilization(self, handle: object) -> list[int]:
        return [self._gpu(handle, "nvmlDeviceGetDecoderUtilization").enc_dec[1], 167000]

    def nvmlDeviceGetPcieThroughput(self, handle: object, counter: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetPcieThroughput").pcie_kb[counter]

    def nvmlDeviceGetPcieReplayCounter(self, handle: object) -> int:
        return self._gpu(handle, "nvmlDeviceGetPcieReplayCounter").replays

    def nvmlDeviceGetFieldValues(self, handle: object, ids: list[tuple[int, int]]) -> list[Any]:
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues")
        known = {
            pynvml.NVML_FI_DEV_MEMORY_TEMP: gpu.memory_temp,
            pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT: gpu.nvlink_links,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: gpu.nvlink_kib[0],
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: gpu.nvlink_kib[1],
        }
        out = []
        for field_id, _ in ids:
            value = known.get(field_id)
            status = pynvml.NVML_SUCCESS if value is not None else pynvml.NVML_ERROR_NOT_SUPPORTED
            out.append(
                SimpleNamespace(nvmlReturn=status, valueType=3, value=SimpleNamespace(ullVal=value or 0))
            )
        return out

    def nvmlDeviceGetTotalEccErrors(self, handle: object, error_type: int, counter: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetTotalEccErrors").ecc.get((error_type, counter), 0)

    def nvmlDeviceGetRemappedRows(self, handle: object) -> tuple[int, int, int, int]:
        return self._gpu(handle, "nvmlDeviceGetRemappedRows").rows

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").reasons

    def nvmlDeviceGetMigMode(self, handle: object) -> list[int]:
        gpu = self._gpu(handle, "nvmlDeviceGetMigMode")
        return [1, 1] if gpu.mig else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: object) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: object, index: int) -> object:
        gpu = self._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if index >= len(gpu.mig):
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return self.handles[self.gpus.index(gpu.mig[index])]

    def nvmlDeviceGetGpuInstanceId(self, handle: object) -> int:
        return self._gpu(handle, "nvmlDeviceGetGpuInstanceId").gi_ci[0]

    def nvmlDeviceGetComputeInstanceId(self, handle: object) -> int:
        return self._gpu(handle, "nvmlDeviceGetComputeInstanceId").gi_ci[1]

    def nvmlEventSetCreate(self) -> object:
        if self.event_error is not None:
            raise nvml_error(self.event_error)
        return "event-set"

    def nvmlEventSetFree(self, event_set: object) -> None:
        pass

    def nvmlDeviceRegisterEvents(self, handle: object, types: int, event_set: object) -> None:
        assert types == pynvml.nvmlEventTypeXidCriticalError
        self._gpu(handle, "nvmlDeviceRegisterEvents")
        self.registered.append(self.handles.index(handle))

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> Any:
        assert timeout_ms == 0  # a collection never waits for events
        if not self.events:
            raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.events.pop(0)
        return SimpleNamespace(device=self.handles[index], eventData=xid, eventType=8)


def two_gpus() -> list[FakeGpu]:
    return [
        FakeGpu("GPU-aaa", compute=[(100, 4 * GiB), (101, 2 * GiB)], samples=[(100, 10, 40), (100, 20, 55)]),
        FakeGpu("GPU-bbb", name="NVIDIA A100-SXM4-40GB"),
    ]


def test_reads_every_field_in_base_units(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(monkeypatch, two_gpus())
    first, second = NvmlSource().collect()
    assert (first.index, first.uuid, first.model) == (0, "GPU-aaa", "NVIDIA H100 80GB HBM3")
    assert (second.index, second.uuid, second.model) == (1, "GPU-bbb", "NVIDIA A100-SXM4-40GB")
    assert first.ok and first.errors == {} and not first.lost
    assert first.utilization == pytest.approx(0.75)
    assert first.memory_utilization == pytest.approx(0.30)
    assert (first.memory_used_bytes, first.memory_total_bytes) == (10 * GiB, 80 * GiB)
    assert first.temperature_celsius == 61
    assert first.power_watts == pytest.approx(312.5)
    assert first.energy_joules == pytest.approx(9000.5)
    assert pynvml.nvmlMemory_v2 in fake.memory_versions  # v2: reserved memory is not "used"
    # newest sample per pid; on the first query a pid without a sample is unknown, not idle
    assert [(p.pid, p.sm_utilization, p.memory_used_bytes) for p in first.processes] == [
        (100, pytest.approx(0.55), 4 * GiB),
        (101, None, 2 * GiB),
    ]
    assert second.processes == []


def test_process_utilization_asks_only_for_newer_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(monkeypatch, two_gpus())
    source = NvmlSource()
    source.collect()
    fake.gpus[0].samples.append((101, 30, 90))
    gpu = source.collect()[0]
    assert fake.util_calls == [(0, 0), (0, 20)]  # GPU 1 has no process: not asked
    assert {p.pid: p.sm_utilization for p in gpu.processes} == {100: 0.0, 101: pytest.approx(0.9)}
    source.collect()  # NOT_FOUND: no samples since 30 -> every process idle, not an error
    gpu = source.collect()[0]
    assert {p.pid: p.sm_utilization for p in gpu.processes} == {100: 0.0, 101: 0.0}
    assert gpu.ok


def test_not_supported_leaves_the_field_out(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    gpus[0].errors = {
        "nvmlDeviceGetTemperature": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetTotalEnergyConsumption": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetGraphicsRunningProcesses": pynvml.NVML_ERROR_NOT_SUPPORTED,
    }
    FakeNvml(monkeypatch, gpus)
    gpu = NvmlSource().collect()[0]
    assert gpu.temperature_celsius is None and gpu.energy_joules is None
    assert gpu.power_watts == pytest.approx(312.5)
    assert gpu.ok and gpu.errors == {}
    assert len(gpu.processes) == 2


def test_other_errors_are_recorded_per_field_and_per_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    gpus[1].errors = {
        "nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NO_PERMISSION,
        "nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_UNKNOWN,
    }
    FakeNvml(monkeypatch, gpus)
    first, second = NvmlSource().collect()
    assert first.ok and first.power_watts is not None
    assert not second.ok and not second.lost
    assert second.errors == {"power": "NoPermission", "utilization": "Unknown"}
    assert second.power_watts is None and second.utilization is None
    assert second.temperature_celsius == 61  # the other fields still read


def test_lost_gpu_keeps_its_identity_and_the_others_report(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(monkeypatch, two_gpus())
    source = NvmlSource()
    source.collect()
    fake.gpus[0].errors = {"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_GPU_IS_LOST}
    first, second = source.collect()
    assert first.lost and not first.ok
    assert (first.uuid, first.model) == ("GPU-aaa", "NVIDIA H100 80GB HBM3")  # from the last good read
    assert first.utilization is None and first.processes == []
    assert second.ok and second.utilization == pytest.approx(0.75)


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED])
def test_lost_in_the_middle_of_a_read_drops_partial_values(
    monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    gpus = two_gpus()
    gpus[0].errors = {"nvmlDeviceGetPowerUsage": code}
    FakeNvml(monkeypatch, gpus)
    first, second = NvmlSource().collect()
    assert first.lost and first.uuid == "GPU-aaa"
    assert first.utilization is None and first.memory_used_bytes is None
    assert second.ok


def test_gpu_lost_before_first_read_is_still_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    gpus[1].errors = {"nvmlDeviceGetUUID": pynvml.NVML_ERROR_GPU_IS_LOST}
    FakeNvml(monkeypatch, gpus)
    first, second = NvmlSource().collect()
    assert first.ok
    assert second.lost and second.index == 1 and second.uuid == "unknown"


def test_vanished_gpu_is_reported_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(monkeypatch, two_gpus())
    source = NvmlSource()
    source.collect()
    fake.gpus.pop(1)
    fake.count = 1
    samples = source.collect()
    assert [(s.uuid, s.lost) for s in samples] == [("GPU-aaa", False), ("GPU-bbb", True)]


def test_count_failure_marks_known_gpus_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(monkeypatch, two_gpus())
    source = NvmlSource()
    source.collect()
    fake.count_error = pynvml.NVML_ERROR_UNKNOWN
    samples = source.collect()
    assert [(s.uuid, s.ok, s.errors) for s in samples] == [
        ("GPU-aaa", False, {"device": "Unknown"}),
        ("GPU-bbb", False, {"device": "Unknown"}),
    ]


@pytest.mark.parametrize(
    ("code", "errors"),
    [(pynvml.NVML_ERROR_UNKNOWN, {"process_utilization": "Unknown"}), (pynvml.NVML_ERROR_NOT_SUPPORTED, {})],
)
def test_unreadable_process_utilization_is_unknown_not_idle(
    monkeypatch: pytest.MonkeyPatch, code: int, errors: dict[str, str]
) -> None:
    """A failed call is an error of the GPU, NOT_SUPPORTED is not; either way no process reads idle."""
    gpus = two_gpus()
    gpus[0].errors = {"nvmlDeviceGetProcessUtilization": code}
    FakeNvml(monkeypatch, gpus)
    gpu = NvmlSource().collect()[0]
    assert [p.sm_utilization for p in gpu.processes] == [None, None]
    assert gpu.errors == errors and gpu.ok == (not errors)


def test_process_list_failure_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    gpus[0].errors = {"nvmlDeviceGetComputeRunningProcesses": pynvml.NVML_ERROR_NO_PERMISSION}
    FakeNvml(monkeypatch, gpus)
    gpu = NvmlSource().collect()[0]
    assert gpu.errors == {"processes": "NoPermission"} and gpu.processes == []


def test_graphics_processes_are_merged_by_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    gpus[0].compute = [(100, None)]
    gpus[0].graphics = [(100, 3 * GiB), (200, GiB)]
    FakeNvml(monkeypatch, gpus)
    gpu = NvmlSource().collect()[0]
    assert [(p.pid, p.memory_used_bytes) for p in gpu.processes] == [(100, 3 * GiB), (200, GiB)]


def test_memory_falls_back_to_v1(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    for g in gpus:
        g.errors = {"nvmlDeviceGetMemoryInfo_v2": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
    fake = FakeNvml(monkeypatch, gpus)
    first, second = NvmlSource().collect()
    assert first.memory_total_bytes == 80 * GiB and first.ok
    assert second.memory_total_bytes == 80 * GiB
    assert fake.memory_versions == [pynvml.nvmlMemory_v2, None, None]  # v2 tried once


def test_init_failure_is_a_source_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(monkeypatch, [])
    fake.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    with pytest.raises(SourceError, match="NVML initialisation failed"):
        NvmlSource()


def test_first_query_without_samples_is_unknown_then_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A just-started exporter has no window for "no sample": unknown first, idle from then on."""
    gpus = [FakeGpu("GPU-aaa", compute=[(100, GiB), (101, GiB)])]  # NOT_FOUND: no samples at all
    fake = FakeNvml(monkeypatch, gpus)
    source = NvmlSource()
    assert [p.sm_utilization for p in source.collect()[0].processes] == [None, None]
    fake.gpus[0].samples.append((100, 50, 30))
    assert {p.pid: p.sm_utilization for p in source.collect()[0].processes} == {
        100: pytest.approx(0.3),
        101: 0.0,
    }


def test_first_snapshot_of_a_shared_gpu_has_no_false_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    from exporter.model import Attribution, ContainerRef
    from exporter.view import gpu_view

    a, b = ContainerRef("ns", "a", "main"), ContainerRef("ns", "b", "main")
    FakeNvml(monkeypatch, [FakeGpu("GPU-aaa", compute=[(100, GiB), (101, GiB)])])
    source = NvmlSource()
    owners = {100: Attribution("container", a), 101: Attribution("container", b)}
    first = gpu_view(source.collect()[0], owners, [a, b])
    assert [c.utilization for c in first.containers] == [None, None]
    second = gpu_view(source.collect()[0], owners, [a, b])
    assert [c.utilization for c in second.containers] == [0.0, 0.0]


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION])
def test_unreadable_process_list_never_reads_idle(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    from exporter.model import ContainerRef
    from exporter.view import gpu_view

    gpus = two_gpus()
    gpus[0].errors = {"nvmlDeviceGetComputeRunningProcesses": code}
    FakeNvml(monkeypatch, gpus)
    first, second = NvmlSource().collect()
    assert not first.processes_known and second.processes_known
    assert first.utilization == pytest.approx(0.75)  # the device reading itself is fine
    view = gpu_view(first, {}, [ContainerRef("ns", "a", "main")])
    assert not view.known and view.containers == ()  # no container series, not 0


def test_reads_health_signals_in_base_units(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    gpus[0].nvlink_links = 2
    gpus[0].ecc = {(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC): 4}
    gpus[0].rows = (1, 2, 1, 0)
    gpus[0].reasons = (
        pynvml.nvmlClocksThrottleReasonHwThermalSlowdown | pynvml.nvmlClocksThrottleReasonSwPowerCap
    )
    gpus[1].memory_temp = None  # no memory sensor
    FakeNvml(monkeypatch, gpus)
    first, second = NvmlSource().collect()
    assert first.ok, first.errors
    assert (first.pci_bus_id, first.driver_version, first.cuda_version) == (
        "00000000:3B:00.0",
        "550.54.15",
        "12.4",
    )
    assert (first.sm_clock_hertz, first.memory_clock_hertz) == (1980e6, 2619e6)
    assert (first.encoder_utilization, first.decoder_utilization) == (
        pytest.approx(0.05),
        pytest.approx(0.10),
    )
    assert (first.pcie_tx_bytes_per_second, first.pcie_rx_bytes_per_second) == (2048 * 1024, 1024 * 1024)
    assert first.pcie_replays == 3 and first.memory_temperature_celsius == 70
    assert (first.nvlink_tx_bytes, first.nvlink_rx_bytes) == (200 * 1024, 100 * 1024)
    assert (
        first.ecc_errors[("uncorrected", "aggregate")] == 4
        and first.ecc_errors[("corrected", "volatile")] == 0
    )
    assert first.remapped_rows == {"correctable": 1, "uncorrectable": 2}
    assert (first.row_remap_pending, first.row_remap_failure) == (True, False)
    assert first.clock_event_reasons == frozenset({"hw_thermal_slowdown", "sw_power_cap"})
    assert second.memory_temperature_celsius is None and second.nvlink_tx_bytes is None and second.ok


def test_xid_events_are_counted_per_gpu_and_code(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(monkeypatch, two_gpus())
    source = NvmlSource()
    first, _ = source.collect()
    assert first.xid_errors == {} and first.last_xid == 0  # watched, none yet: zero, not absent
    fake.events = [(0, 79), (0, 79), (1, 48)]
    first, second = source.collect()
    assert (first.xid_errors, first.last_xid) == ({79: 2}, 79)
    assert (second.xid_errors, second.last_xid) == ({48: 1}, 48)
    assert sorted(fake.registered) == [0, 1]  # registered once per GPU


def test_gpu_without_xid_events_has_no_xid_series(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    gpus[1].errors["nvmlDeviceRegisterEvents"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    FakeNvml(monkeypatch, gpus)
    first, second = NvmlSource().collect()
    assert first.xid_errors == {} and second.xid_errors is None


def test_unsupported_health_fields_are_absent_not_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    for fn in ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetEncoderUtilization"):
        gpus[0].errors[fn] = pynvml.NVML_ERROR_NOT_SUPPORTED
    gpus[0].errors["nvmlDeviceGetClockInfo"] = pynvml.NVML_ERROR_NO_PERMISSION
    FakeNvml(monkeypatch, gpus)
    first, _ = NvmlSource().collect()
    assert first.remapped_rows == {} and first.ecc_errors == {} and first.encoder_utilization is None
    assert first.sm_clock_hertz is None and first.errors == {"clocks": "NoPermission"} and not first.ok


def test_mig_devices_are_devices_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    slices = [
        FakeGpu(
            "MIG-1",
            name="NVIDIA A100-SXM4-80GB MIG 3g.40gb",
            memory=(GiB, 40 * GiB),
            compute=[(7, GiB)],
            gi_ci=(1, 0),
        ),
        FakeGpu("MIG-2", name="NVIDIA A100-SXM4-80GB MIG 3g.40gb", memory=(0, 40 * GiB), gi_ci=(2, 0)),
    ]
    parent = FakeGpu("GPU-mig", name="NVIDIA A100-SXM4-80GB", mig=slices)
    parent.errors["nvmlDeviceGetUtilizationRates"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    FakeNvml(monkeypatch, [parent])
    gpu, one, two = NvmlSource().collect()
    assert gpu.mig_enabled and gpu.mig is None and gpu.uuid == "GPU-mig"
    assert one.mig is not None and (one.mig.parent_uuid, one.mig.gpu_instance_id, one.mig.profile) == (
        "GPU-mig",
        1,
        "3g.40gb",
    )
    assert (one.index, one.uuid, one.memory_total_bytes, [p.pid for p in one.processes]) == (
        0,
        "MIG-1",
        40 * GiB,
        [7],
    )
    assert two.mig is not None and two.mig.gpu_instance_id == 2 and two.processes == []
