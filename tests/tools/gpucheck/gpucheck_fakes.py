"""The exporter's NVML fakes (tests/exporter/test_nvml_source.py) completed with the identity reads the
gpu-check survey makes, and helpers shared by the gpu-check tests."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from exporter.cli import build_source, extensions
from exporter.exposition import Exposition
from exporter.loop import CollectionLoop
from exporter.settings import parse_config
from tests.exporter.test_nvml_source import FakeGpu, FakeNvml, GiB
from tools.gpucheck import run

__all__ = ["FakeGpu", "FullNvml", "GiB", "alive", "exporter_scrape"]


class FullNvml(FakeNvml):
    """FakeNvml plus the survey's identity reads; NVLink throughput per link (link L reads (L+1) times
    the GPU's per-link figures) and per-process utilization samples fresh on every call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu]) -> None:
        self.field_calls: list[list[tuple[int, int]]] = []
        self.live_util: dict[int, int] = {}  # pid -> smUtil % reported on every call (fresh timestamps)
        self._clock = 0
        super().__init__(monkeypatch, gpus)

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "12.550.54.15"

    def nvmlDeviceGetSerial(self, handle: object) -> str:
        return "serial-" + self._gpu(handle, "nvmlDeviceGetSerial").uuid

    def nvmlDeviceGetBoardPartNumber(self, handle: object) -> str:
        self._gpu(handle, "nvmlDeviceGetBoardPartNumber")
        return "692-2G520-0200-000"

    def nvmlDeviceGetVbiosVersion(self, handle: object) -> str:
        self._gpu(handle, "nvmlDeviceGetVbiosVersion")
        return "96.00.99.00.01"

    def nvmlDeviceGetArchitecture(self, handle: object) -> int:
        self._gpu(handle, "nvmlDeviceGetArchitecture")
        return 9  # Hopper

    def nvmlDeviceGetCudaComputeCapability(self, handle: object) -> tuple[int, int]:
        self._gpu(handle, "nvmlDeviceGetCudaComputeCapability")
        return (9, 0)

    def nvmlDeviceGetBrand(self, handle: object) -> int:
        self._gpu(handle, "nvmlDeviceGetBrand")
        return 2

    def nvmlDeviceGetPersistenceMode(self, handle: object) -> int:
        self._gpu(handle, "nvmlDeviceGetPersistenceMode")
        return 1

    def nvmlDeviceGetComputeMode(self, handle: object) -> int:
        self._gpu(handle, "nvmlDeviceGetComputeMode")
        return 0

    def nvmlDeviceGetPerformanceState(self, handle: object) -> int:
        self._gpu(handle, "nvmlDeviceGetPerformanceState")
        return 0

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:
        self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit")
        return 700_000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: object) -> int:
        self._gpu(handle, "nvmlDeviceGetPowerManagementDefaultLimit")
        return 700_000

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: object) -> list[int]:
        self._gpu(handle, "nvmlDeviceGetPowerManagementLimitConstraints")
        return [200_000, 700_000]

    def nvmlDeviceGetMaxClockInfo(self, handle: object, kind: int) -> int:
        self._gpu(handle, "nvmlDeviceGetMaxClockInfo")
        return 1980 if kind == pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetFieldValues(self, handle: object, ids: list[tuple[int, int]]) -> list[Any]:
        self.field_calls.append(list(ids))
        values = super().nvmlDeviceGetFieldValues(handle, ids)
        per_link = (
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        )
        for (field_id, scope), v in zip(ids, values, strict=True):
            if field_id in per_link and v.nvmlReturn == pynvml.NVML_SUCCESS:
                v.value = SimpleNamespace(ullVal=v.value.ullVal * (scope + 1))
        return values

    def nvmlDeviceGetProcessUtilization(self, handle: object, last_seen: int) -> list[Any]:
        gpu = self._gpu(handle, "nvmlDeviceGetProcessUtilization")
        if not self.live_util:
            return super().nvmlDeviceGetProcessUtilization(handle, last_seen)
        self._clock += 1000
        pids = {pid for pid, _ in gpu.compute}
        fresh = [(p, u) for p, u in self.live_util.items() if p in pids]
        if not fresh:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return [
            SimpleNamespace(pid=p, timeStamp=max(last_seen + 1, self._clock), smUtil=u, memUtil=0)
            for p, u in fresh
        ]


def exporter_scrape() -> tuple[CollectionLoop, Exposition]:
    """The exporter as gpu-check starts it (run.py's flags), in this process, over whatever NVML is
    installed (the fakes): the loop and its exposition."""
    argv = [
        *("--source", "nvml", "--no-kube-api", "--podresources-socket", run.NO_KUBELET),
        *("--interval", "1", "--compat", "dcgm", "--node-name", run.PROG),
    ]
    config = parse_config(argv, {})
    source, attributor, node = build_source(config)
    loop = CollectionLoop(source, attributor, node, config.interval, extensions(config))
    return loop, Exposition(loop, source.name, process_metrics=False)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, killed but not yet reaped by whoever adopted it, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in {"Z", "X"}
