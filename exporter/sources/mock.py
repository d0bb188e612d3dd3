"""The mock source: plays a scenario (sources/scenario.py) against an injectable clock.

Device readings are derived from the processes' phases: utilization is the sum of the running
processes' SM utilization (capped at 1), memory used the sum of their memory, memory-controller
utilization half the utilization, power and temperature linear between the GPU's idle and max
values, and energy the integral of power between collections.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from exporter.model import ECC_SCOPES, Attribution, ContainerRef, GpuSample, MigInstance, ProcessSample
from exporter.sources.scenario import load_scenario
from exporter.sources.scenario_model import GpuSpec, MigSpec, ProcessSpec, Scenario, ScenarioError

log = logging.getLogger(__name__)

# Derived readings: clocks rise with utilization, PCIe and NVLink traffic follow it.
IDLE_SM_CLOCK_HZ = 345e6
MAX_SM_CLOCK_HZ = 1980e6
MEMORY_CLOCK_HZ = 2619e6
PCIE_BYTES_PER_SECOND = 2e9  # at utilization 1, each direction
NVLINK_BYTES_PER_SECOND = 50e9
RESERVED_BYTES = 512 * 1024 * 1024  # the driver's share, as NVML memory v2 reports it

Clock = Callable[[], float]


def _running(
    spec: GpuSpec | MigSpec | Sequence[ProcessSpec], t: float
) -> list[tuple[int, Attribution, float, int]]:
    """(pid, owner, SM utilization, memory) of the processes running at scenario time t."""
    out = []
    for proc in spec if isinstance(spec, Sequence) else spec.processes:
        phase = proc.at(t)
        if phase is not None and phase.running:
            out.append((proc.pid, proc.owner, phase.utilization, phase.memory_bytes))
    return out


def device_power(spec: GpuSpec, utilization: float) -> float:
    return spec.idle_power_watts + utilization * (spec.max_power_watts - spec.idle_power_watts)


def _all_running(spec: GpuSpec, t: float) -> list[tuple[int, Attribution, float, int]]:
    """The GPU's processes, on the GPU itself and on its MIG devices."""
    return _running([*spec.processes, *(p for m in spec.mig for p in m.processes)], t)


def power_at(spec: GpuSpec, t: float) -> float:
    return device_power(spec, min(1.0, sum(r[2] for r in _all_running(spec, t))))


def _health(spec: GpuSpec, sample: GpuSample, t: float, utilization: float, seconds: float) -> None:
    """The health signals of a scenario GPU at time t (`seconds` of traffic so far, for counters)."""
    health, unsupported = spec.health, spec.unsupported
    if "clocks" not in unsupported:
        sample.sm_clock_hertz = IDLE_SM_CLOCK_HZ + utilization * (MAX_SM_CLOCK_HZ - IDLE_SM_CLOCK_HZ)
        sample.memory_clock_hertz = MEMORY_CLOCK_HZ
    if "memory_temperature" not in unsupported and sample.temperature_celsius is not None:
        sample.memory_temperature_celsius = round(sample.temperature_celsius + 4.0, 1)
    if "encoder" not in unsupported:
        sample.encoder_utilization = health.encoder_utilization
    if "decoder" not in unsupported:
        sample.decoder_utilization = health.decoder_utilization
    if "pcie" not in unsupported:
        sample.pcie_tx_bytes_per_second = sample.pcie_rx_bytes_per_second = round(
            utilization * PCIE_BYTES_PER_SECOND
        )
        sample.pcie_replays = 0
    if health.nvlink and "nvlink" not in unsupported:
        sample.nvlink_tx_bytes = sample.nvlink_rx_bytes = int(seconds * NVLINK_BYTES_PER_SECOND)
    if "xid" not in unsupported:
        seen = [e for e in health.xid if e.at <= t]
        sample.xid_errors = {}
        for event in seen:
            sample.xid_errors[event.code] = sample.xid_errors.get(event.code, 0) + 1
        sample.last_xid = seen[-1].code if seen else 0
    if "ecc" not in unsupported:
        for scope in ECC_SCOPES:
            sample.ecc_errors[("corrected", scope)] = health.ecc_corrected
            sample.ecc_errors[("uncorrected", scope)] = health.ecc_uncorrected
    if "remapped_rows" not in unsupported:
        sample.remapped_rows = {
            "correctable": health.remapped_correctable,
            "uncorrectable": health.remapped_uncorrectable,
        }
        sample.row_remap_pending = health.remap_pending
        sample.row_remap_failure = health.remap_failure
    if "clock_events" not in unsupported:
        idle = frozenset({"gpu_idle"}) if utilization == 0 else frozenset()
        sample.clock_event_reasons = health.clock_events | idle


def _processes(
    running: list[tuple[int, Attribution, float, int]], spec: GpuSpec, resolve_owners: bool
) -> list[ProcessSample]:
    return [
        ProcessSample(
            pid=pid,
            sm_utilization=None if "process_utilization" in spec.unsupported else util,
            memory_used_bytes=memory,
            # Without /proc the real attributor cannot tell a host process from an unresolved one.
            owner=owner if resolve_owners else Attribution("unresolved"),
        )
        for pid, owner, util, memory in running
    ]


def sample_mig(parent: GpuSpec, mig: MigSpec, t: float, scenario: Scenario, resolve: bool) -> GpuSample:
    """A MIG device: memory and processes of its own; no utilization (NVML does not support it on MIG)."""
    running = _running(mig, t)
    return GpuSample(
        index=parent.index,
        uuid=mig.uuid,
        model=f"{parent.model} MIG {mig.profile}",
        memory_used_bytes=sum(r[3] for r in running),
        memory_total_bytes=mig.memory_total_bytes,
        processes=_processes(running, parent, resolve),
        pci_bus_id=parent.pci_bus_id,
        driver_version=scenario.driver_version,
        cuda_version=scenario.cuda_version,
        mig=MigInstance(parent.uuid, mig.gpu_instance_id, mig.compute_instance_id, mig.profile),
    )


def sample_gpu(
    spec: GpuSpec, t: float, scenario: Scenario, energy_joules: float, busy_seconds: float, resolve: bool
) -> GpuSample:
    """What NVML would report for this GPU at scenario time t (pure). `busy_seconds`: utilization
    integrated over time so far (for the traffic counters)."""
    if spec.lost_at(t):
        return GpuSample(
            spec.index, spec.uuid, spec.model, ok=False, lost=True, errors={"device": "GpuIsLost"}
        )
    running = _all_running(spec, t)
    utilization = round(min(1.0, sum(r[2] for r in running)), 6)  # no float noise in the demo
    unsupported = spec.unsupported
    temperature = spec.idle_temperature_celsius + utilization * (
        spec.max_temperature_celsius - spec.idle_temperature_celsius
    )
    # NVML does not report utilization on a GPU in MIG mode; its processes sit on the MIG devices.
    no_utilization = "utilization" in unsupported or bool(spec.mig)
    sample = GpuSample(
        index=spec.index,
        uuid=spec.uuid,
        model=spec.model,
        utilization=None if no_utilization else utilization,
        memory_utilization=None if no_utilization else round(utilization / 2, 6),
        memory_used_bytes=None if "memory" in unsupported else sum(r[3] for r in running),
        memory_total_bytes=None if "memory" in unsupported else spec.memory_total_bytes,
        memory_reserved_bytes=None
        if "memory" in unsupported
        else min(RESERVED_BYTES, spec.memory_total_bytes),
        temperature_celsius=None if "temperature" in unsupported else round(temperature, 1),
        power_watts=None if "power" in unsupported else round(device_power(spec, utilization), 3),
        energy_joules=None if "energy" in unsupported else energy_joules,
        processes=[] if spec.mig else _processes(running, spec, resolve),
        pci_bus_id=spec.pci_bus_id,
        driver_version=scenario.driver_version,
        cuda_version=scenario.cuda_version,
        mig_enabled=bool(spec.mig),
    )
    _health(spec, sample, t, utilization, busy_seconds)
    return sample


class ScenarioFile:
    """The scenario of a file, read again when the file changes (`--scenario-reload`).

    A change is a new modification time, size or inode (a writer replacing the file atomically). A file
    that no longer loads is logged and the previous scenario kept: the exporter never stops over it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen = self._signature()
        self._scenario = load_scenario(path)

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def current(self) -> Scenario:
        with self._lock:
            seen = self._signature()
            if seen is not None and seen != self._seen:
                self._seen = seen
                try:
                    self._scenario = load_scenario(self.path)
                    log.info("scenario %s reloaded", self.path)
                except ScenarioError as e:
                    log.warning("%s; keeping the previous scenario", e)
            return self._scenario


class MockSource:
    """Source protocol over a scenario; time starts when the source is built.

    With `follow` (e.g. ScenarioFile.current) the scenario is asked for at every collection: its
    timeline keeps the clock of the first one, so a changed file changes what happens from now on.
    """

    name = "mock"

    def __init__(
        self, scenario: Scenario, clock: Clock = time.monotonic, follow: Callable[[], Scenario] | None = None
    ) -> None:
        self.scenario = scenario
        self._follow = follow
        self._clock = clock
        self._start = clock()
        self._last_elapsed = 0.0
        self._energy = dict.fromkeys((g.uuid for g in scenario.gpus), 0.0)
        self._busy = dict.fromkeys((g.uuid for g in scenario.gpus), 0.0)

    def collect(self) -> list[GpuSample]:
        if self._follow is not None:
            self.scenario = self._follow()
            for g in self.scenario.gpus:
                self._energy.setdefault(g.uuid, 0.0)
                self._busy.setdefault(g.uuid, 0.0)
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
                self._busy[spec.uuid] += min(1.0, sum(r[2] for r in _all_running(spec, t))) * dt
            samples.append(
                sample_gpu(spec, t, self.scenario, self._energy[spec.uuid], self._busy[spec.uuid], resolve)
            )
            if not spec.lost_at(t):
                samples += [sample_mig(spec, mig, t, self.scenario, resolve) for mig in spec.mig]
        return samples

    def close(self) -> None:
        pass


class MockAttributor:
    """Attributor protocol over a scenario: owners and allocations come from the file.

    `attribution: {podresources: false}` in the scenario simulates a missing kubelet socket:
    no allocations and a degraded status, as the real attributor reports it.
    """

    def __init__(self, scenario: Scenario, follow: Callable[[], Scenario] | None = None) -> None:
        self._follow = follow
        self._load(scenario)

    def _load(self, scenario: Scenario) -> None:
        self._scenario = scenario
        self._status = dict(scenario.attribution)
        self._owners: dict[int, Attribution] = {}
        self._allocations: dict[str, list[ContainerRef]] = {}
        for gpu in scenario.gpus:
            devices: tuple[GpuSpec | MigSpec, ...] = (gpu, *gpu.mig)
            for device in devices:
                for proc in device.processes:
                    self._owners[proc.pid] = proc.owner
                if device.allocations:
                    self._allocations[device.uuid] = list(device.allocations)

    def refresh(self) -> None:
        if self._follow is not None and (scenario := self._follow()) is not self._scenario:
            self._load(scenario)

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
