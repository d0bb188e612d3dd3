"""The mock source: plays a scenario (sources/scenario.py) against an injectable clock.

Device readings are derived from the processes' phases: utilization is the sum of the running
processes' SM utilization (capped at 1), memory used the sum of their memory, memory-controller
utilization half the utilization, power and temperature linear between the GPU's idle and max
values, and energy the integral of power between collections.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence

from exporter.model import Attribution, ContainerRef, GpuSample, ProcessSample
from exporter.sources.scenario import GpuSpec, Scenario

Clock = Callable[[], float]


def _running(spec: GpuSpec, t: float) -> list[tuple[int, Attribution, float, int]]:
    """(pid, owner, SM utilization, memory) of the processes running at scenario time t."""
    out = []
    for proc in spec.processes:
        phase = proc.at(t)
        if phase is not None and phase.running:
            out.append((proc.pid, proc.owner, phase.utilization, phase.memory_bytes))
    return out


def device_power(spec: GpuSpec, utilization: float) -> float:
    return spec.idle_power_watts + utilization * (spec.max_power_watts - spec.idle_power_watts)


def power_at(spec: GpuSpec, t: float) -> float:
    return device_power(spec, min(1.0, sum(r[2] for r in _running(spec, t))))


def sample_gpu(spec: GpuSpec, t: float, energy_joules: float, resolve_owners: bool = True) -> GpuSample:
    """What NVML would report for this GPU at scenario time t (pure)."""
    if spec.lost_at(t):
        return GpuSample(
            spec.index, spec.uuid, spec.model, ok=False, lost=True, errors={"device": "GpuIsLost"}
        )
    running = _running(spec, t)
    utilization = round(min(1.0, sum(r[2] for r in running)), 6)  # no float noise in the demo
    unsupported = spec.unsupported
    temperature = spec.idle_temperature_celsius + utilization * (
        spec.max_temperature_celsius - spec.idle_temperature_celsius
    )
    processes = [
        ProcessSample(
            pid=pid,
            sm_utilization=None if "process_utilization" in unsupported else util,
            memory_used_bytes=memory,
            # Without /proc the real attributor cannot tell a host process from an unresolved one.
            owner=owner if resolve_owners else Attribution("unresolved"),
        )
        for pid, owner, util, memory in running
    ]
    return GpuSample(
        index=spec.index,
        uuid=spec.uuid,
        model=spec.model,
        utilization=None if "utilization" in unsupported else utilization,
        memory_utilization=None if "utilization" in unsupported else round(utilization / 2, 6),
        memory_used_bytes=None if "memory" in unsupported else sum(r[3] for r in running),
        memory_total_bytes=None if "memory" in unsupported else spec.memory_total_bytes,
        temperature_celsius=None if "temperature" in unsupported else round(temperature, 1),
        power_watts=None if "power" in unsupported else round(device_power(spec, utilization), 3),
        energy_joules=None if "energy" in unsupported else energy_joules,
        processes=processes,
    )


class MockSource:
    """Source protocol over a scenario; time starts when the source is built."""

    name = "mock"

    def __init__(self, scenario: Scenario, clock: Clock = time.monotonic) -> None:
        self.scenario = scenario
        self._clock = clock
        self._start = clock()
        self._last_elapsed = 0.0
        self._energy = dict.fromkeys((g.uuid for g in scenario.gpus), 0.0)

    def collect(self) -> list[GpuSample]:
        elapsed = max(0.0, self._clock() - self._start)
        t = self.scenario.scenario_time(elapsed)
        dt = max(0.0, elapsed - self._last_elapsed)
        self._last_elapsed = elapsed
        resolve = self.scenario.attribution.get("proc", True)
        samples = []
        for spec in self.scenario.gpus:
            if not spec.lost_at(t):
                # The power of the phase now, held over the interval since the last collection.
                self._energy[spec.uuid] += power_at(spec, t) * dt
            samples.append(sample_gpu(spec, t, self._energy[spec.uuid], resolve_owners=resolve))
        return samples

    def close(self) -> None:
        pass


class MockAttributor:
    """Attributor protocol over a scenario: owners and allocations come from the file.

    `attribution: {podresources: false}` in the scenario simulates a missing kubelet socket:
    no allocations and a degraded status, as the real attributor reports it.
    """

    def __init__(self, scenario: Scenario) -> None:
        self._status = dict(scenario.attribution)
        self._owners: dict[int, Attribution] = {}
        self._allocations: dict[str, list[ContainerRef]] = {}
        for gpu in scenario.gpus:
            for proc in gpu.processes:
                self._owners[proc.pid] = proc.owner
            if gpu.allocations:
                self._allocations[gpu.uuid] = list(gpu.allocations)

    def refresh(self) -> None:
        pass

    def attribute(
        self, pids: Sequence[int], devices: Mapping[int, Collection[str]] | None = None
    ) -> dict[int, Attribution]:
        if not self._status.get("proc", True):
            return {pid: Attribution("unresolved") for pid in pids}
        return {pid: self._owners.get(pid, Attribution("unresolved")) for pid in pids}

    def allocations(self) -> dict[str, list[ContainerRef]]:
        if not self._status.get("podresources", True):
            return {}
        return {uuid: list(refs) for uuid, refs in self._allocations.items()}

    def status(self) -> dict[str, bool]:
        return dict(self._status)
