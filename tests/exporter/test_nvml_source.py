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


class FakeNvml:
    """Installs fake pynvml functions; handles are opaque objects mapped to FakeGpus."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.handles = [object() for _ in range(8)]
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
        return len(self.gpus)

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


def test_process_utilization_failure_is_unknown_not_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    gpus[0].errors = {"nvmlDeviceGetProcessUtilization": pynvml.NVML_ERROR_UNKNOWN}
    FakeNvml(monkeypatch, gpus)
    gpu = NvmlSource().collect()[0]
    assert [p.sm_utilization for p in gpu.processes] == [None, None]
    assert gpu.errors == {"process_utilization": "Unknown"} and not gpu.ok


def test_process_utilization_not_supported_is_unknown_without_error(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    gpus[0].errors = {"nvmlDeviceGetProcessUtilization": pynvml.NVML_ERROR_NOT_SUPPORTED}
    FakeNvml(monkeypatch, gpus)
    gpu = NvmlSource().collect()[0]
    assert [p.sm_utilization for p in gpu.processes] == [None, None]
    assert gpu.ok


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
