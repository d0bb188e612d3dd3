"""Every metric the exporter serves: name, type, unit, labels and help, written once (pure). `MetricSpec`
also declares the automator's own metrics (automator/metrics.py).

The collector builds its families from these specs (exporter/families.py, exporter/exposition.py), the
dcgm compatibility names come from `DCGM_METRICS` (exporter/dcgm_compat.py), and tests check that
docs/metrics.md lists exactly these names with the same type, unit and labels. Rules, alerts, dashboards
and the automator read the names, so renaming one here is a breaking change.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

Kind = Literal["gauge", "counter", "histogram"]  # the exporter's are gauges and counters

PREFIX = "gpu_steward_"
# Appended to the help of the series whose value is a reading of the last background collection.
SNAPSHOT_NOTE = " (from the last background collection)"

DEVICE_LABELS = ("node", "gpu", "uuid", "model")
CONTAINER_LABELS = ("namespace", "pod", "container")
# dcgm-exporter's labels in its order; GPU_I_PROFILE / GPU_I_ID are set on MIG devices only.
DCGM_DEVICE_LABELS = (
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "GPU_I_PROFILE",
    "GPU_I_ID",
)
# `pod_uid` only on the per-container series of a shared GPU (as upstream's --kubernetes-virtual-gpus).
DCGM_CONTAINER_LABELS = ("container", "namespace", "pod", "pod_uid")


@dataclass(frozen=True)
class MetricSpec:
    name: str  # the family name: counters without `_total`
    kind: Kind
    unit: str  # as docs/metrics.md shows it (automator's: ""); the name's suffix where Prometheus wants one
    labels: tuple[str, ...]  # in the order the samples carry them
    help: str
    # False for dcgm-exporter's counters, whose names have no `_total` (kept as upstream spells them).
    total_suffix: bool = True
    buckets: tuple[float, ...] = ()  # a histogram's upper bounds

    @cached_property
    def sample_name(self) -> str:
        """The name in the exposition (counters get `_total`)."""
        return self.name + "_total" if self.kind == "counter" and self.total_suffix else self.name


def _gauge(name: str, unit: str, help: str, labels: tuple[str, ...] = DEVICE_LABELS) -> MetricSpec:
    return MetricSpec(PREFIX + name, "gauge", unit, labels, help)


def _reading(name: str, unit: str, help: str, labels: tuple[str, ...] = DEVICE_LABELS) -> MetricSpec:
    """A gauge whose value is a reading of the last background collection."""
    return _gauge(name, unit, help + SNAPSHOT_NOTE, labels)


def _counter(name: str, unit: str, help: str, labels: tuple[str, ...] = DEVICE_LABELS) -> MetricSpec:
    return MetricSpec(PREFIX + name, "counter", unit, labels, help)


_GPU = DEVICE_LABELS
_CONTAINER = DEVICE_LABELS + CONTAINER_LABELS
_BY_REASON = (*DEVICE_LABELS, "reason")
_DIRECTION = (*DEVICE_LABELS, "direction")

# --- per GPU, allocations, per container, outside Kubernetes: from the snapshot ----------------------

GPU_UTILIZATION = _reading("gpu_utilization_ratio", "ratio", "Share of time a kernel ran on the GPU, 0-1")
GPU_MEMORY_UTILIZATION = _reading(
    "gpu_memory_utilization_ratio", "ratio", "Share of time device memory was read or written, 0-1"
)
GPU_MEMORY_USED = _reading("gpu_memory_used_bytes", "bytes", "GPU framebuffer memory in use, bytes")
GPU_MEMORY_TOTAL = _reading("gpu_memory_total_bytes", "bytes", "GPU framebuffer memory size, bytes")
GPU_TEMPERATURE = _reading("gpu_temperature_celsius", "celsius", "GPU core temperature, degrees Celsius")
GPU_POWER = _reading("gpu_power_watts", "watts", "GPU power draw, watts")
GPU_ENERGY = _counter(
    "gpu_energy_joules", "joules", "GPU energy used since the driver loaded, joules" + SNAPSHOT_NOTE
)
GPU_COLLECTION_SUCCESS = _gauge(
    "gpu_collection_success", "0/1", "1 if every field of this GPU read fine in the last collection"
)
GPU_LOST = _gauge("gpu_lost", "0/1", "1 if NVML reports this GPU lost or needing a reset")
GPU_ALLOCATION = _gauge(
    "gpu_allocation", "1", "1 for each container the kubelet allocated this GPU to", _CONTAINER
)
CONTAINER_UTILIZATION = _reading(
    "container_gpu_utilization_ratio", "ratio", "This container's share of the GPU's time, 0-1", _CONTAINER
)
CONTAINER_MEMORY_USED = _gauge(
    "container_gpu_memory_used_bytes",
    "bytes",
    "GPU memory used by this container's processes, bytes",
    _CONTAINER,
)
CONTAINER_PROCESSES = _gauge(
    "container_gpu_processes", "processes", "Processes of this container on the GPU", _CONTAINER
)
UNATTRIBUTED_UTILIZATION = _gauge(
    "unattributed_gpu_utilization_ratio",
    "ratio",
    "SM utilization of GPU processes not in a container, 0-1",
    _BY_REASON,
)
UNATTRIBUTED_MEMORY_USED = _gauge(
    "unattributed_gpu_memory_used_bytes",
    "bytes",
    "GPU memory of processes not in a container, bytes",
    _BY_REASON,
)
UNATTRIBUTED_PROCESSES = _gauge(
    "unattributed_gpu_processes",
    "processes",
    "GPU processes not in a container (reason: host or unresolved)",
    _BY_REASON,
)
GPU_READ_ERRORS = _counter(
    "gpu_read_errors",
    "reads",
    "NVML reads that failed, by GPU, field and NVML error",
    (*_GPU, "field", "error"),
)

# --- per GPU: identity, health signals, MIG -------------------------------------------------------------

GPU_INFO = _gauge(
    "gpu_info",
    "1",
    "Always 1: the GPU's PCI bus id, the driver and CUDA versions (empty when unknown)",
    (*_GPU, "pci_bus_id", "driver_version", "cuda_version"),
)
MIG_INFO = _gauge(
    "gpu_mig_info",
    "1",
    "Always 1 for a MIG device: its parent GPU, GPU and compute instance ids and profile",
    (*_GPU, "parent_uuid", "gpu_instance_id", "compute_instance_id", "profile"),
)
GPU_SM_CLOCK = _reading("gpu_sm_clock_hertz", "hertz", "SM clock, hertz")
GPU_MEMORY_CLOCK = _reading("gpu_memory_clock_hertz", "hertz", "Memory clock, hertz")
GPU_MEMORY_TEMPERATURE = _reading(
    "gpu_memory_temperature_celsius", "celsius", "GPU memory (HBM) temperature, degrees Celsius"
)
GPU_MEMORY_RESERVED = _reading("gpu_memory_reserved_bytes", "bytes", "GPU memory the driver reserves, bytes")
GPU_ENCODER_UTILIZATION = _reading("gpu_encoder_utilization_ratio", "ratio", "Video encoder busy share, 0-1")
GPU_DECODER_UTILIZATION = _reading("gpu_decoder_utilization_ratio", "ratio", "Video decoder busy share, 0-1")
GPU_PCIE_THROUGHPUT = _reading(
    "gpu_pcie_throughput_bytes_per_second",
    "bytes/s",
    "PCIe traffic (direction tx or rx), bytes per second over NVML's 20 ms sample",
    _DIRECTION,
)
GPU_PCIE_REPLAYS = _counter("gpu_pcie_replays", "replays", "PCIe replays (retries) since the driver loaded")
GPU_NVLINK_BYTES = _counter(
    "gpu_nvlink_bytes",
    "bytes",
    "NVLink data bytes over all links (direction tx or rx); GPUs without NVLink have none",
    _DIRECTION,
)
GPU_XID_ERRORS = _counter(
    "gpu_xid_errors",
    "errors",
    "Xid errors NVML reported since the exporter started, by Xid code",
    (*_GPU, "xid"),
)
GPU_ECC_ERRORS = _counter(
    "gpu_ecc_errors",
    "errors",
    "ECC memory errors by type (corrected, uncorrected) and scope (volatile: since the driver "
    "loaded; aggregate: over the GPU's life)",
    (*_GPU, "type", "scope"),
)
GPU_REMAPPED_ROWS = _counter(
    "gpu_remapped_rows",
    "rows",
    "Memory rows remapped over the GPU's life, by the error that caused it (correctable, uncorrectable)",
    (*_GPU, "type"),
)
GPU_ROW_REMAP_PENDING = _gauge("gpu_row_remap_pending", "0/1", "1 if a row remap waits for a GPU reset")
GPU_ROW_REMAP_FAILURE = _gauge(
    "gpu_row_remap_failure", "0/1", "1 if a row remap failed (the GPU needs service)"
)
GPU_CLOCK_EVENT = _gauge(
    "gpu_clock_event_reason_active",
    "0/1",
    "1 while this reason holds the clocks down (throttling), per NVML clock-event reason",
    _BY_REASON,
)

# --- the exporter itself: computed at scrape time -------------------------------------------------------

_NODE = ("node",)
EXPORTER_BUILD_INFO = _gauge(
    "exporter_build_info", "1", "Exporter version and GPU source; always 1", ("node", "version", "source")
)
EXPORTER_COLLECTION_ERRORS = _counter(
    "exporter_collection_errors", "collections", "Collections that failed as a whole", _NODE
)
EXPORTER_SNAPSHOT_AGE = _gauge(
    "exporter_snapshot_age_seconds",
    "seconds",
    "Seconds since the snapshot served by this scrape was collected",
    _NODE,
)
EXPORTER_LAST_COLLECTION = _gauge(
    "exporter_last_collection_timestamp_seconds",
    "seconds",
    "Unix time of the collection served by this scrape",
    _NODE,
)
EXPORTER_COLLECTION_DURATION = _gauge(
    "exporter_collection_duration_seconds",
    "seconds",
    "How long the collection served by this scrape took",
    _NODE,
)
EXPORTER_ATTRIBUTION_AVAILABLE = _gauge(
    "exporter_attribution_available",
    "0/1",
    "1 if the attribution source answered in the last collection; 0 = degraded (series unattributed)",
    ("node", "source"),
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
    GPU_INFO,
    MIG_INFO,
    GPU_SM_CLOCK,
    GPU_MEMORY_CLOCK,
    GPU_MEMORY_TEMPERATURE,
    GPU_MEMORY_RESERVED,
    GPU_ENCODER_UTILIZATION,
    GPU_DECODER_UTILIZATION,
    GPU_PCIE_THROUGHPUT,
    GPU_PCIE_REPLAYS,
    GPU_NVLINK_BYTES,
    GPU_XID_ERRORS,
    GPU_ECC_ERRORS,
    GPU_REMAPPED_ROWS,
    GPU_ROW_REMAP_PENDING,
    GPU_ROW_REMAP_FAILURE,
    GPU_CLOCK_EVENT,
)
EXPORTER_METRICS: tuple[MetricSpec, ...] = (
    EXPORTER_BUILD_INFO,
    EXPORTER_COLLECTION_ERRORS,
    EXPORTER_SNAPSHOT_AGE,
    EXPORTER_LAST_COLLECTION,
    EXPORTER_COLLECTION_DURATION,
    EXPORTER_ATTRIBUTION_AVAILABLE,
)

# --- `--compat dcgm`: NVIDIA dcgm-exporter's names, types, units and labels (exporter/dcgm_compat.py) ---
# Upstream's etc/default-counters.csv, field by field: what NVML can give is emitted with upstream's type
# and help; what it cannot is listed in DCGM_NOT_AVAILABLE with the reason (docs/exporter.md shows both).

_DCGM_LABELS = DCGM_DEVICE_LABELS + DCGM_CONTAINER_LABELS


def _dcgm_gauge(name: str, unit: str, help: str) -> MetricSpec:
    return MetricSpec(name, "gauge", unit, _DCGM_LABELS, help, total_suffix=False)


def _dcgm_counter(name: str, unit: str, help: str) -> MetricSpec:
    return MetricSpec(name, "counter", unit, _DCGM_LABELS, help, total_suffix=False)


DCGM_SM_CLOCK = _dcgm_gauge("DCGM_FI_DEV_SM_CLOCK", "MHz", "SM clock frequency (in MHz).")
DCGM_MEM_CLOCK = _dcgm_gauge("DCGM_FI_DEV_MEM_CLOCK", "MHz", "Memory clock frequency (in MHz).")
DCGM_MEMORY_TEMP = _dcgm_gauge("DCGM_FI_DEV_MEMORY_TEMP", "celsius", "Memory temperature (in C).")
DCGM_GPU_TEMP = _dcgm_gauge("DCGM_FI_DEV_GPU_TEMP", "celsius", "GPU temperature (in C).")
DCGM_POWER_USAGE = _dcgm_gauge("DCGM_FI_DEV_POWER_USAGE", "watts", "Power draw (in W).")
DCGM_TOTAL_ENERGY = _dcgm_counter(
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "millijoules", "Total energy consumption since boot (in mJ)."
)
DCGM_PCIE_REPLAY = _dcgm_counter(
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "retries", "Total number of PCIe retries."
)
DCGM_GPU_UTIL = _dcgm_gauge("DCGM_FI_DEV_GPU_UTIL", "%", "GPU utilization (in %).")
DCGM_MEM_COPY_UTIL = _dcgm_gauge("DCGM_FI_DEV_MEM_COPY_UTIL", "%", "Memory utilization (in %).")
DCGM_ENC_UTIL = _dcgm_gauge("DCGM_FI_DEV_ENC_UTIL", "%", "Encoder utilization (in %).")
DCGM_DEC_UTIL = _dcgm_gauge("DCGM_FI_DEV_DEC_UTIL", "%", "Decoder utilization (in %).")
DCGM_XID_ERRORS = _dcgm_gauge("DCGM_FI_DEV_XID_ERRORS", "xid", "Value of the last XID error encountered.")
DCGM_FB_FREE = _dcgm_gauge("DCGM_FI_DEV_FB_FREE", "MiB", "Framebuffer memory free (in MiB).")
DCGM_FB_USED = _dcgm_gauge("DCGM_FI_DEV_FB_USED", "MiB", "Framebuffer memory used (in MiB).")
DCGM_FB_RESERVED = _dcgm_gauge("DCGM_FI_DEV_FB_RESERVED", "MiB", "Framebuffer memory reserved (in MiB).")
DCGM_NVLINK_BANDWIDTH = _dcgm_counter(
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "KiB", "Total number of NVLink bandwidth counters for all lanes."
)
DCGM_UNCORRECTABLE_REMAPPED_ROWS = _dcgm_counter(
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "rows", "Number of remapped rows for uncorrectable errors"
)
DCGM_CORRECTABLE_REMAPPED_ROWS = _dcgm_counter(
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "rows", "Number of remapped rows for correctable errors"
)
DCGM_ROW_REMAP_FAILURE = _dcgm_gauge(
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "0/1", "Whether remapping of rows has failed"
)
DCGM_PCIE_TX_BYTES = _dcgm_gauge(
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "bytes/s",
    "The rate of data transmitted over the PCIe bus - including both protocol headers and data "
    "payloads - in bytes per second.",
)
DCGM_PCIE_RX_BYTES = _dcgm_gauge(
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "bytes/s",
    "The rate of data received over the PCIe bus - including both protocol headers and data "
    "payloads - in bytes per second.",
)
DCGM_METRICS: tuple[MetricSpec, ...] = (
    DCGM_SM_CLOCK,
    DCGM_MEM_CLOCK,
    DCGM_MEMORY_TEMP,
    DCGM_GPU_TEMP,
    DCGM_POWER_USAGE,
    DCGM_TOTAL_ENERGY,
    DCGM_PCIE_REPLAY,
    DCGM_GPU_UTIL,
    DCGM_MEM_COPY_UTIL,
    DCGM_ENC_UTIL,
    DCGM_DEC_UTIL,
    DCGM_XID_ERRORS,
    DCGM_FB_FREE,
    DCGM_FB_USED,
    DCGM_FB_RESERVED,
    DCGM_NVLINK_BANDWIDTH,
    DCGM_UNCORRECTABLE_REMAPPED_ROWS,
    DCGM_CORRECTABLE_REMAPPED_ROWS,
    DCGM_ROW_REMAP_FAILURE,
    DCGM_PCIE_TX_BYTES,
    DCGM_PCIE_RX_BYTES,
)
# Fields of upstream's default-counters.csv left out, and why: never faked from another reading.
DCGM_NOT_AVAILABLE: dict[str, str] = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "a DCGM profiling (DCP) counter read from the GPU's performance "
    "monitors; NVML has no equivalent (its utilization is a different, coarser measure)",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "a DCGM profiling (DCP) counter; NVML does not expose tensor "
    "pipe activity",
    "DCGM_FI_PROF_DRAM_ACTIVE": "a DCGM profiling (DCP) counter; NVML's memory utilization is a "
    "different measure (DCGM_FI_DEV_MEM_COPY_UTIL carries it)",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "vGPU licensing exists only inside vGPU guest VMs; on a "
    "Kubernetes node with physical GPUs NVML answers NOT_SUPPORTED",
}
ALL_METRICS: tuple[MetricSpec, ...] = SNAPSHOT_METRICS + EXPORTER_METRICS + DCGM_METRICS
