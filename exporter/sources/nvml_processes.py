"""Who runs on a GPU and how much of it each process used: the NVML source's per-process reads.

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

import pynvml

from exporter.model import GpuSample, ProcessSample
from exporter.sources.nvml_reads import call, code_of, ratio, record

# nvmlDeviceGetProcessUtilization answers "no samples" as NOT_FOUND, or as SUCCESS on its sizing call.
_NO_SAMPLES = {pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_SUCCESS}


class ProcessReader:
    """Reads a GPU's (or MIG device's) processes; remembers per device the newest utilization sample."""

    def __init__(self) -> None:
        self._last_seen_us: dict[str, int] = {}  # uuid -> newest process-utilization sample seen

    def read(self, sample: GpuSample, handle: object) -> list[ProcessSample]:
        memory: dict[int, int | None] = {}
        for field, fn in (
            ("processes", pynvml.nvmlDeviceGetComputeRunningProcesses),
            ("graphics_processes", pynvml.nvmlDeviceGetGraphicsRunningProcesses),
        ):
            procs = call(sample, field, fn, handle)
            if procs is None and field == "processes":
                sample.processes_known = False  # unsupported or failed: who runs here is unknown
            for proc in procs or []:
                used = proc.usedGpuMemory
                if memory.get(proc.pid) is None:  # dedupe by pid, keep a known value
                    memory[int(proc.pid)] = int(used) if used is not None else None
        if not memory:
            return []
        utilization, without_sample = self._utilization(sample, handle)
        return [
            ProcessSample(
                pid=pid,
                sm_utilization=None if utilization is None else utilization.get(pid, without_sample),
                memory_used_bytes=used,
            )
            for pid, used in sorted(memory.items())
        ]

    def _utilization(self, sample: GpuSample, handle: object) -> tuple[dict[int, float] | None, float | None]:
        """pid -> SM utilization of its newest sample since the last call (None: the call failed),
        and the value of a listed pid without a sample: 0 (idle) once a previous query of this GPU
        bounds the window, None (unknown) on the first query."""
        first = sample.uuid not in self._last_seen_us
        without_sample = None if first else 0.0
        last_seen = self._last_seen_us.get(sample.uuid, 0)
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(handle, last_seen)
        except pynvml.NVMLError as e:
            if code_of(e) in _NO_SAMPLES:
                self._last_seen_us[sample.uuid] = last_seen
                return {}, without_sample
            record(sample, "process_utilization", e)
            return None, None
        newest: dict[int, tuple[int, float]] = {}
        for s in samples:
            ts = int(s.timeStamp)
            if s.pid not in newest or ts > newest[s.pid][0]:
                newest[int(s.pid)] = (ts, ratio(s.smUtil))
            last_seen = max(last_seen, ts)
        self._last_seen_us[sample.uuid] = last_seen
        return {pid: util for pid, (_, util) in newest.items()}, without_sample
