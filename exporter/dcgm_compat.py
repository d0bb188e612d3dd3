"""`--compat dcgm`: the same snapshot under NVIDIA dcgm-exporter's names, types and labels (pure).

A drop-in for dashboards built on dcgm-exporter (its own Grafana dashboard, 12239, and queries users
wrote against it). As dcgm-exporter's default mode emits them:
- Every device-wide field is **one series per GPU** (per MIG device for the fields a MIG device has),
  carrying the `pod`/`namespace`/`container` of the GPU's holder when exactly one container holds it
  (empty otherwise), so a sum of the power series is the node's power and per-GPU panels show
  each GPU once.
- On a GPU shared by several containers, GPU utilization and framebuffer use are also
  emitted per container with `pod_uid` (as upstream's `--kubernetes-virtual-gpus` mode does), next to
  the device series, never instead of it: sum the device series with `{pod_uid=""}`.
- Labels gpu, UUID, pci_bus_id, device, modelName, Hostname, the driver version (GPU_I_PROFILE and
  GPU_I_ID on MIG devices, whose UUID is the parent's as upstream reports it).
- Every field of upstream's default-counters.csv NVML can give, with upstream's type: counters keep
  their names without `_total` (total energy, remapped rows). Profiling fields NVML cannot
  give are left out (steward_common/metrics.py, DCGM_NOT_AVAILABLE), never derived from other readings.
- A device reading is never hidden by attribution: an unattributable process only withholds the
  per-container split, not the device's utilization or memory.
- A lost GPU is not reported under these names (dcgm-exporter stops reporting a GPU it cannot read).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from exporter.families import FamilyBuilder, FamilyData
from exporter.model import ContainerRef, GpuSample
from exporter.view import GpuView
from steward_common import metrics as m

MIB = 1024 * 1024


def _scaled(attr: str, factor: float) -> Callable[[GpuSample], float | None]:
    def value(gpu: GpuSample) -> float | None:
        raw = getattr(gpu, attr)
        return None if raw is None else raw * factor

    return value


def _free_mib(gpu: GpuSample) -> float | None:
    if gpu.memory_total_bytes is None or gpu.memory_used_bytes is None:
        return None
    reserved = gpu.memory_reserved_bytes or 0
    return max(0, gpu.memory_total_bytes - gpu.memory_used_bytes - reserved) / MIB


def _nvlink_kib(gpu: GpuSample) -> float | None:
    if gpu.nvlink_tx_bytes is None or gpu.nvlink_rx_bytes is None:
        return None
    return (gpu.nvlink_tx_bytes + gpu.nvlink_rx_bytes) / 1024


def _last_xid(gpu: GpuSample) -> float | None:
    return None if gpu.xid_errors is None else float(gpu.last_xid or 0)


def _remap_failure(gpu: GpuSample) -> float | None:
    return None if gpu.row_remap_failure is None else float(gpu.row_remap_failure)


def _rows(kind: str) -> Callable[[GpuSample], float | None]:
    return lambda gpu: None if kind not in gpu.remapped_rows else float(gpu.remapped_rows[kind])


# Framebuffer fields: a MIG-enabled parent leaves them to its MIG devices (no double counting).
FRAMEBUFFER: tuple[tuple[m.MetricSpec, Callable[[GpuSample], float | None]], ...] = (
    (m.DCGM_FB_USED, _scaled("memory_used_bytes", 1 / MIB)),
    (m.DCGM_FB_FREE, _free_mib),
    (m.DCGM_FB_RESERVED, _scaled("memory_reserved_bytes", 1 / MIB)),
)
# Every other field, one series per GPU: GPU readings -> value in upstream's unit (None: not read).
DEVICE: tuple[tuple[m.MetricSpec, Callable[[GpuSample], float | None]], ...] = (
    (m.DCGM_SM_CLOCK, _scaled("sm_clock_hertz", 1e-6)),
    (m.DCGM_MEM_CLOCK, _scaled("memory_clock_hertz", 1e-6)),
    (m.DCGM_MEMORY_TEMP, _scaled("memory_temperature_celsius", 1)),
    (m.DCGM_GPU_TEMP, _scaled("temperature_celsius", 1)),
    (m.DCGM_POWER_USAGE, _scaled("power_watts", 1)),
    (m.DCGM_TOTAL_ENERGY, _scaled("energy_joules", 1000)),
    (m.DCGM_PCIE_REPLAY, _scaled("pcie_replays", 1)),
    (m.DCGM_GPU_UTIL, _scaled("utilization", 100)),
    (m.DCGM_MEM_COPY_UTIL, _scaled("memory_utilization", 100)),
    (m.DCGM_ENC_UTIL, _scaled("encoder_utilization", 100)),
    (m.DCGM_DEC_UTIL, _scaled("decoder_utilization", 100)),
    (m.DCGM_XID_ERRORS, _last_xid),
    (m.DCGM_NVLINK_BANDWIDTH, _nvlink_kib),
    (m.DCGM_UNCORRECTABLE_REMAPPED_ROWS, _rows("uncorrectable")),
    (m.DCGM_CORRECTABLE_REMAPPED_ROWS, _rows("correctable")),
    (m.DCGM_ROW_REMAP_FAILURE, _remap_failure),
    (m.DCGM_PCIE_TX_BYTES, _scaled("pcie_tx_bytes_per_second", 1)),
    (m.DCGM_PCIE_RX_BYTES, _scaled("pcie_rx_bytes_per_second", 1)),
)
# Per container on a shared GPU (upstream's per-process fields): the container's share.
PER_CONTAINER: tuple[tuple[m.MetricSpec, Callable[[float | None, int | None], float | None]], ...] = (
    (m.DCGM_GPU_UTIL, lambda util, _mem: None if util is None else round(util * 100, 2)),
    (m.DCGM_FB_USED, lambda _util, mem: None if mem is None else mem / MIB),
)
_NO_POD = {"container": "", "namespace": "", "pod": "", "pod_uid": ""}


def holder(view: GpuView) -> ContainerRef | None:
    """The one container holding the GPU: its only allocation, or without allocation data the only
    container running on it. None when shared or free."""
    if view.allocations:
        return view.allocations[0] if len(view.allocations) == 1 else None
    refs = {c.ref for c in view.containers}
    return next(iter(refs)) if len(refs) == 1 else None


def device_labels(gpu: GpuSample, node: str, parents: dict[str, GpuSample]) -> dict[str, str]:
    """Values of m.DCGM_DEVICE_LABELS, in that order."""
    mig = gpu.mig
    parent = parents.get(mig.parent_uuid) if mig is not None else None
    values = (
        str(gpu.index),
        mig.parent_uuid if mig is not None else gpu.uuid,
        gpu.pci_bus_id or (parent.pci_bus_id if parent and parent.pci_bus_id else ""),
        f"nvidia{gpu.index}",
        parent.model if parent is not None else gpu.model,
        node,
        gpu.driver_version or "",
        mig.profile if mig is not None else "",
        str(mig.gpu_instance_id) if mig is not None else "",
    )
    return dict(zip(m.DCGM_DEVICE_LABELS, values, strict=True))


def _pod(ref: ContainerRef, with_uid: bool) -> dict[str, str]:
    return {
        "container": ref.container,
        "namespace": ref.namespace,
        "pod": ref.pod,
        "pod_uid": ref.pod_uid if with_uid else "",
    }


def dcgm_families(views: Sequence[GpuView], node: str) -> list[FamilyData]:
    b = FamilyBuilder(m.DCGM_METRICS)
    parents = {v.gpu.uuid: v.gpu for v in views if v.gpu.mig is None}
    for view in views:
        gpu = view.gpu
        if gpu.lost:
            continue
        base = device_labels(gpu, node, parents)
        sole = holder(view)
        labels = {**base, **(_pod(sole, False) if sole is not None else _NO_POD)}
        fields = DEVICE if gpu.mig_enabled else DEVICE + FRAMEBUFFER
        for spec, value in fields:
            reading = value(gpu)
            if reading is not None:
                b.add(spec, labels, reading)
        if sole is None and view.known and len(view.containers) > 1:
            for usage in view.containers:
                per_container = {**base, **_pod(usage.ref, True)}
                if not usage.ref.pod_uid:
                    # Without a UID the series would collide with the device series' labels
                    # in a sum; mark it as per container all the same.
                    per_container["pod_uid"] = f"{usage.ref.namespace}/{usage.ref.pod}"
                for spec, share in PER_CONTAINER:
                    shared_value = share(usage.utilization, usage.memory_used_bytes)
                    if shared_value is not None:
                        b.add(spec, per_container, shared_value)
    return b.build()
