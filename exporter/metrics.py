"""Every metric the exporter serves: name, type, unit, labels and help, written once (pure).

The collector builds its families from these specs (exporter/families.py, exporter/exposition.py), the
dcgm compatibility names come from `DCGM_METRICS` (exporter/dcgm_compat.py), and tests check that
docs/metrics.md lists exactly these names with the same type, unit and labels. Rules, alerts, dashboards
and the automator read the names, so renaming one here is a breaking change.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

Kind = Literal["gauge", "counter"]

PREFIX = "gpu_steward_"
# Appended to the help of the series whose value is a reading of the last background collection.
SNAPSHOT_NOTE = " (from the last background collection)"

DEVICE_LABELS = ("node", "gpu", "uuid", "model")
CONTAINER_LABELS = ("namespace", "pod", "container")
DCGM_DEVICE_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname")
DCGM_CONTAINER_LABELS = ("container", "namespace", "pod")


@dataclass(frozen=True)
class MetricSpec:
    name: str  # the family name: counters without `_total`
    kind: Kind
    unit: str  # as docs/metrics.md shows it; the name's suffix where Prometheus conventions want one
    labels: tuple[str, ...]  # in the order the samples carry them
    help: str

    @cached_property
    def sample_name(self) -> str:
        """The name in the exposition (counters get `_total`)."""
        return self.name + "_total" if self.kind == "counter" else self.name


def _gauge(name: str, unit: str, labels: tuple[str, ...], help: str) -> MetricSpec:
    return MetricSpec(PREFIX + name, "gauge", unit, labels, help)


# --- per GPU, allocations, per container, outside Kubernetes: from the snapshot ----------------------

GPU_UTILIZATION = _gauge(
    "gpu_utilization_ratio",
    "ratio",
    DEVICE_LABELS,
    "Share of time a kernel ran on the GPU, 0-1" + SNAPSHOT_NOTE,
)
GPU_MEMORY_UTILIZATION = _gauge(
    "gpu_memory_utilization_ratio",
    "ratio",
    DEVICE_LABELS,
    "Share of time device memory was read or written, 0-1" + SNAPSHOT_NOTE,
)
GPU_MEMORY_USED = _gauge(
    "gpu_memory_used_bytes", "bytes", DEVICE_LABELS, "GPU framebuffer memory in use, bytes" + SNAPSHOT_NOTE
)
GPU_MEMORY_TOTAL = _gauge(
    "gpu_memory_total_bytes", "bytes", DEVICE_LABELS, "GPU framebuffer memory size, bytes" + SNAPSHOT_NOTE
)
GPU_TEMPERATURE = _gauge(
    "gpu_temperature_celsius",
    "celsius",
    DEVICE_LABELS,
    "GPU core temperature, degrees Celsius" + SNAPSHOT_NOTE,
)
GPU_POWER = _gauge("gpu_power_watts", "watts", DEVICE_LABELS, "GPU power draw, watts" + SNAPSHOT_NOTE)
GPU_ENERGY = MetricSpec(
    PREFIX + "gpu_energy_joules",
    "counter",
    "joules",
    DEVICE_LABELS,
    "GPU energy used since the driver loaded, joules" + SNAPSHOT_NOTE,
)
GPU_COLLECTION_SUCCESS = _gauge(
    "gpu_collection_success",
    "0/1",
    DEVICE_LABELS,
    "1 if every field of this GPU read fine in the last collection",
)
GPU_LOST = _gauge("gpu_lost", "0/1", DEVICE_LABELS, "1 if NVML reports this GPU lost or needing a reset")
GPU_ALLOCATION = _gauge(
    "gpu_allocation",
    "1",
    DEVICE_LABELS + CONTAINER_LABELS,
    "1 for each container the kubelet allocated this GPU to",
)
CONTAINER_UTILIZATION = _gauge(
    "container_gpu_utilization_ratio",
    "ratio",
    DEVICE_LABELS + CONTAINER_LABELS,
    "This container's share of the GPU's time, 0-1" + SNAPSHOT_NOTE,
)
CONTAINER_MEMORY_USED = _gauge(
    "container_gpu_memory_used_bytes",
    "bytes",
    DEVICE_LABELS + CONTAINER_LABELS,
    "GPU memory used by this container's processes, bytes",
)
CONTAINER_PROCESSES = _gauge(
    "container_gpu_processes",
    "processes",
    DEVICE_LABELS + CONTAINER_LABELS,
    "Processes of this container on the GPU",
)
UNATTRIBUTED_UTILIZATION = _gauge(
    "unattributed_gpu_utilization_ratio",
    "ratio",
    (*DEVICE_LABELS, "reason"),
    "SM utilization of GPU processes not in a container, 0-1",
)
UNATTRIBUTED_MEMORY_USED = _gauge(
    "unattributed_gpu_memory_used_bytes",
    "bytes",
    (*DEVICE_LABELS, "reason"),
    "GPU memory of processes not in a container, bytes",
)
UNATTRIBUTED_PROCESSES = _gauge(
    "unattributed_gpu_processes",
    "processes",
    (*DEVICE_LABELS, "reason"),
    "GPU processes not in a container (reason: host or unresolved)",
)
GPU_READ_ERRORS = MetricSpec(
    PREFIX + "gpu_read_errors",
    "counter",
    "reads",
    (*DEVICE_LABELS, "field", "error"),
    "NVML reads that failed, by GPU, field and NVML error",
)

# --- the exporter itself: computed at scrape time -------------------------------------------------------

EXPORTER_BUILD_INFO = _gauge(
    "exporter_build_info", "1", ("node", "version", "source"), "Exporter version and GPU source; always 1"
)
EXPORTER_COLLECTION_ERRORS = MetricSpec(
    PREFIX + "exporter_collection_errors",
    "counter",
    "collections",
    ("node",),
    "Collections that failed as a whole",
)
EXPORTER_SNAPSHOT_AGE = _gauge(
    "exporter_snapshot_age_seconds",
    "seconds",
    ("node",),
    "Seconds since the snapshot served by this scrape was collected",
)
EXPORTER_LAST_COLLECTION = _gauge(
    "exporter_last_collection_timestamp_seconds",
    "seconds",
    ("node",),
    "Unix time of the collection served by this scrape",
)
EXPORTER_COLLECTION_DURATION = _gauge(
    "exporter_collection_duration_seconds",
    "seconds",
    ("node",),
    "How long the collection served by this scrape took",
)
EXPORTER_ATTRIBUTION_AVAILABLE = _gauge(
    "exporter_attribution_available",
    "0/1",
    ("node", "source"),
    "1 if the attribution source answered in the last collection; 0 = degraded (series unattributed)",
)

# Families of a snapshot, in the order a scrape serves them.
SNAPSHOT_METRICS: tuple[MetricSpec, ...] = (
    GPU_UTILIZATION,
    GPU_MEMORY_UTILIZATION,
    GPU_MEMORY_USED,
    GPU_MEMORY_TOTAL,
    GPU_TEMPERATURE,
    GPU_POWER,
    GPU_ENERGY,
    GPU_COLLECTION_SUCCESS,
    GPU_LOST,
    GPU_ALLOCATION,
    CONTAINER_UTILIZATION,
    CONTAINER_MEMORY_USED,
    CONTAINER_PROCESSES,
    UNATTRIBUTED_UTILIZATION,
    UNATTRIBUTED_MEMORY_USED,
    UNATTRIBUTED_PROCESSES,
    GPU_READ_ERRORS,
)
EXPORTER_METRICS: tuple[MetricSpec, ...] = (
    EXPORTER_BUILD_INFO,
    EXPORTER_COLLECTION_ERRORS,
    EXPORTER_SNAPSHOT_AGE,
    EXPORTER_LAST_COLLECTION,
    EXPORTER_COLLECTION_DURATION,
    EXPORTER_ATTRIBUTION_AVAILABLE,
)

# --- `--compat dcgm`: NVIDIA dcgm-exporter's names, units and labels (see exporter/dcgm_compat.py) ----


def _dcgm(name: str, unit: str, help: str) -> MetricSpec:
    return MetricSpec(name, "gauge", unit, DCGM_DEVICE_LABELS + DCGM_CONTAINER_LABELS, help)


DCGM_GPU_UTIL = _dcgm(
    "DCGM_FI_DEV_GPU_UTIL",
    "%",
    "GPU utilization in percent (per container on shared GPUs; gpu-steward compat)",
)
DCGM_MEM_COPY_UTIL = _dcgm(
    "DCGM_FI_DEV_MEM_COPY_UTIL", "%", "Memory utilization in percent (gpu-steward compat)"
)
DCGM_FB_USED = _dcgm(
    "DCGM_FI_DEV_FB_USED", "MiB", "Framebuffer memory used in MiB (per container; gpu-steward compat)"
)
DCGM_FB_FREE = _dcgm("DCGM_FI_DEV_FB_FREE", "MiB", "Framebuffer memory free in MiB (gpu-steward compat)")
DCGM_GPU_TEMP = _dcgm("DCGM_FI_DEV_GPU_TEMP", "celsius", "GPU temperature in C (gpu-steward compat)")
DCGM_POWER_USAGE = _dcgm("DCGM_FI_DEV_POWER_USAGE", "watts", "Power draw in W (gpu-steward compat)")
DCGM_TOTAL_ENERGY = _dcgm(
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "millijoules",
    "Total energy consumption since boot in mJ (gpu-steward compat)",
)
DCGM_GR_ENGINE_ACTIVE = _dcgm(
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "ratio",
    "Graphics engine active ratio 0-1 (per container; gpu-steward compat)",
)
DCGM_METRICS: tuple[MetricSpec, ...] = (
    DCGM_GPU_UTIL,
    DCGM_MEM_COPY_UTIL,
    DCGM_FB_USED,
    DCGM_FB_FREE,
    DCGM_GPU_TEMP,
    DCGM_POWER_USAGE,
    DCGM_TOTAL_ENERGY,
    DCGM_GR_ENGINE_ACTIVE,
)

ALL_METRICS: tuple[MetricSpec, ...] = SNAPSHOT_METRICS + EXPORTER_METRICS + DCGM_METRICS
