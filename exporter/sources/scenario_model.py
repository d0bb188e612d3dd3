"""The scenario the mock source plays (pure): one node's GPUs, allocations and process timelines.

exporter/sources/scenario.py reads and validates a scenario file into these types (docs/exporter.md).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.model import ATTRIBUTION_SOURCES, Attribution, ContainerRef

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


@dataclass(frozen=True, kw_only=True)
class DeviceSpec:
    """What a GPU and a MIG device both have: an identity, memory, processes and allocations."""

    uuid: str
    memory_total_bytes: int
    processes: tuple[ProcessSpec, ...] = ()
    allocations: tuple[ContainerRef, ...] = ()


@dataclass(frozen=True, kw_only=True)
class MigSpec(DeviceSpec):
    """A MIG device on a GPU: a device of its own with its memory, processes and allocations."""

    profile: str
    gpu_instance_id: int
    compute_instance_id: int


@dataclass(frozen=True, kw_only=True)
class GpuSpec(DeviceSpec):
    index: int
    model: str
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
