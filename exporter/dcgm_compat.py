"""`--compat dcgm`: the same snapshot under NVIDIA dcgm-exporter's metric names and labels.

Names, units and labels follow dcgm-exporter (percent, MiB, watts, millijoules; labels gpu, UUID,
device, modelName, Hostname, container, namespace, pod) so that existing dashboards and queries
work unchanged. Differences, on purpose:
- On a GPU used by several containers each container gets its own share (DCGM_FI_DEV_GPU_UTIL,
  DCGM_FI_PROF_GR_ENGINE_ACTIVE, DCGM_FI_DEV_FB_USED), not the whole GPU's value; device-wide
  values (temperature, power, energy, free memory, copy utilization) repeat per container as
  dcgm-exporter does.
- A GPU with no container series (none allocated and no process in a container, or readings
  incomplete) gets one series per metric with empty pod labels, as dcgm-exporter emits it.
- DCGM_FI_PROF_GR_ENGINE_ACTIVE is derived from NVML utilization (no DCGM profiling here).
- DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION is typed gauge: a counter would have to be renamed `_total`.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.collector import FamilyBuilder, FamilyData, GpuView

MIB = 1024 * 1024

DOCS = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization in percent (per container on shared GPUs; gpu-steward compat)",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "Memory utilization in percent (gpu-steward compat)",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used in MiB (per container; gpu-steward compat)",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free in MiB (gpu-steward compat)",
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature in C (gpu-steward compat)",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw in W (gpu-steward compat)",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "Total energy consumption since boot in mJ (gpu-steward compat)",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Graphics engine active ratio 0-1 (per container; gpu-steward compat)",
}


def dcgm_families(views: Sequence[GpuView], node: str) -> list[FamilyData]:
    b = FamilyBuilder()
    for name, doc in DOCS.items():
        b.declare(name, doc)
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
        free = None
        if gpu.memory_total_bytes is not None and gpu.memory_used_bytes is not None:
            free = (gpu.memory_total_bytes - gpu.memory_used_bytes) / MIB
        shared = {
            "DCGM_FI_DEV_MEM_COPY_UTIL": None
            if gpu.memory_utilization is None
            else gpu.memory_utilization * 100,
            "DCGM_FI_DEV_FB_FREE": free,
            "DCGM_FI_DEV_GPU_TEMP": gpu.temperature_celsius,
            "DCGM_FI_DEV_POWER_USAGE": gpu.power_watts,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": None
            if gpu.energy_joules is None
            else gpu.energy_joules * 1000,
        }
        rows = [
            (
                {"container": c.ref.container, "namespace": c.ref.namespace, "pod": c.ref.pod},
                c.utilization,
                c.memory_used_bytes,
            )
            for c in view.containers
        ] or [({"container": "", "namespace": "", "pod": ""}, gpu.utilization, gpu.memory_used_bytes)]
        for pod, utilization, memory in rows:
            labels = {**device, **pod}
            if utilization is not None:
                b.add("DCGM_FI_DEV_GPU_UTIL", labels, round(utilization * 100, 2))
                b.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, utilization)
            if memory is not None:
                b.add("DCGM_FI_DEV_FB_USED", labels, memory / MIB)
            for name, value in shared.items():
                if value is not None:
                    b.add(name, labels, value)
    return b.build()
