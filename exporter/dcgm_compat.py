"""`--compat dcgm`: the same snapshot under NVIDIA dcgm-exporter's metric names and labels (pure).

Names, units and labels (exporter/metrics.py, `DCGM_METRICS`) follow dcgm-exporter (percent, MiB, watts,
millijoules; labels gpu, UUID, device, modelName, Hostname, container, namespace, pod) so that existing
dashboards and queries work unchanged. Differences, on purpose:
- On a GPU used by several containers each container gets its own share of utilization, graphics engine
  activity and framebuffer use (`UTILIZATION`, `MEMORY` below), not the whole GPU's value; device-wide
  values (`DEVICE`: temperature, power, energy, free memory, copy utilization) repeat per container as
  dcgm-exporter does.
- A GPU with no container series (none allocated and no process in a container, or readings
  incomplete) gets one series per metric with empty pod labels, as dcgm-exporter emits it.
- Graphics engine activity is derived from NVML utilization (no DCGM profiling here).
- Total energy is typed gauge: a counter would have to be renamed `_total`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from exporter import metrics as m
from exporter.families import FamilyBuilder, FamilyData
from exporter.model import GpuSample
from exporter.view import GpuView

MIB = 1024 * 1024

# The compatibility map. Per container (its share; the GPU's value on a GPU without container series):
# from the utilization ratio, and from the memory in bytes.
UTILIZATION: tuple[tuple[m.MetricSpec, Callable[[float], float]], ...] = (
    (m.DCGM_GPU_UTIL, lambda ratio: round(ratio * 100, 2)),
    (m.DCGM_GR_ENGINE_ACTIVE, lambda ratio: ratio),
)
MEMORY: tuple[tuple[m.MetricSpec, Callable[[int], float]], ...] = ((m.DCGM_FB_USED, lambda used: used / MIB),)
# Device-wide, repeated on every container's series: GPU readings -> value (None: not read).
DEVICE: tuple[tuple[m.MetricSpec, Callable[[GpuSample], float | None]], ...] = (
    (m.DCGM_MEM_COPY_UTIL, lambda g: None if g.memory_utilization is None else g.memory_utilization * 100),
    (m.DCGM_FB_FREE, lambda g: _free_mib(g)),
    (m.DCGM_GPU_TEMP, lambda g: g.temperature_celsius),
    (m.DCGM_POWER_USAGE, lambda g: g.power_watts),
    (m.DCGM_TOTAL_ENERGY, lambda g: None if g.energy_joules is None else g.energy_joules * 1000),
)


def _free_mib(gpu: GpuSample) -> float | None:
    if gpu.memory_total_bytes is None or gpu.memory_used_bytes is None:
        return None
    return (gpu.memory_total_bytes - gpu.memory_used_bytes) / MIB


def _rows(view: GpuView) -> list[tuple[dict[str, str], float | None, int | None]]:
    """(pod labels, utilization, memory) per container series; one row with empty pod labels if none."""
    gpu = view.gpu
    return [
        (
            {"container": c.ref.container, "namespace": c.ref.namespace, "pod": c.ref.pod},
            c.utilization,
            c.memory_used_bytes,
        )
        for c in view.containers
    ] or [({"container": "", "namespace": "", "pod": ""}, gpu.utilization, gpu.memory_used_bytes)]


def dcgm_families(views: Sequence[GpuView], node: str) -> list[FamilyData]:
    b = FamilyBuilder(m.DCGM_METRICS)
    for view in views:
        gpu = view.gpu
        if gpu.lost:
            continue  # dcgm-exporter stops reporting a GPU it cannot read
        device = {
            "gpu": str(gpu.index),
            "UUID": gpu.uuid,
            "device": f"nvidia{gpu.index}",
            "modelName": gpu.model,
            "Hostname": node,
        }
        shared = [(spec, value(gpu)) for spec, value in DEVICE]
        for pod, utilization, memory in _rows(view):
            labels = {**device, **pod}
            if utilization is not None:
                for spec, scale in UTILIZATION:
                    b.add(spec, labels, scale(utilization))
            if memory is not None:
                for spec, convert in MEMORY:
                    b.add(spec, labels, convert(memory))
            for spec, shared_value in shared:
                if shared_value is not None:
                    b.add(spec, labels, shared_value)
    return b.build()
