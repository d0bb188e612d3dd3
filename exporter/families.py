"""Snapshot views -> ready-made samples per metric family (pure).

The collection loop calls `gpu_families` once per collection, so that a scrape only wraps the samples
(exporter/exposition.py). Names, types and help come from the table in steward_common/metrics.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.samples import Sample

from exporter.model import CLOCK_EVENT_REASONS, ContainerRef, GpuSample
from exporter.view import GpuView
from steward_common import metrics as m

# Per-GPU gauges and the GpuSample field each one reports (left out when the field is None).
GPU_GAUGES: tuple[tuple[m.MetricSpec, str], ...] = (
    (m.GPU_UTILIZATION, "utilization"),
    (m.GPU_MEMORY_UTILIZATION, "memory_utilization"),
    (m.GPU_MEMORY_USED, "memory_used_bytes"),
    (m.GPU_MEMORY_TOTAL, "memory_total_bytes"),
    (m.GPU_TEMPERATURE, "temperature_celsius"),
    (m.GPU_POWER, "power_watts"),
    (m.GPU_ENERGY, "energy_joules"),
    (m.GPU_SM_CLOCK, "sm_clock_hertz"),
    (m.GPU_MEMORY_CLOCK, "memory_clock_hertz"),
    (m.GPU_MEMORY_TEMPERATURE, "memory_temperature_celsius"),
    (m.GPU_MEMORY_RESERVED, "memory_reserved_bytes"),
    (m.GPU_ENCODER_UTILIZATION, "encoder_utilization"),
    (m.GPU_DECODER_UTILIZATION, "decoder_utilization"),
    (m.GPU_PCIE_REPLAYS, "pcie_replays"),
)
# Per-GPU series with one more label: (spec, label value, GpuSample field).
GPU_DIRECTIONAL: tuple[tuple[m.MetricSpec, str, str], ...] = (
    (m.GPU_PCIE_THROUGHPUT, "tx", "pcie_tx_bytes_per_second"),
    (m.GPU_PCIE_THROUGHPUT, "rx", "pcie_rx_bytes_per_second"),
    (m.GPU_NVLINK_BYTES, "tx", "nvlink_tx_bytes"),
    (m.GPU_NVLINK_BYTES, "rx", "nvlink_rx_bytes"),
)


@dataclass(frozen=True)
class FamilyData:
    """A metric family's spec and ready-made samples, kept in the snapshot."""

    spec: m.MetricSpec
    samples: tuple[Sample, ...]


class FamilyBuilder:
    """Collects samples per family in declaration order."""

    def __init__(self, specs: Sequence[m.MetricSpec] = ()) -> None:
        # Keyed by name: a str caches its hash, a spec would hash all its fields on every sample.
        self._specs = {spec.name: spec for spec in specs}
        self._samples: dict[str, list[Sample]] = {spec.name: [] for spec in specs}

    def add(self, spec: m.MetricSpec, labels: dict[str, str], value: float) -> None:
        self._samples[spec.name].append(Sample(spec.sample_name, labels, float(value)))

    def build(self) -> list[FamilyData]:
        return [FamilyData(self._specs[name], tuple(samples)) for name, samples in self._samples.items()]


def device_labels(node: str, gpu: GpuSample) -> dict[str, str]:
    return {"node": node, "gpu": str(gpu.index), "uuid": gpu.uuid, "model": gpu.model}


def container_labels(ref: ContainerRef) -> dict[str, str]:
    return {"namespace": ref.namespace, "pod": ref.pod, "container": ref.container}


def _add_device(b: FamilyBuilder, view: GpuView, node: str) -> None:
    gpu = view.gpu
    dev = device_labels(node, gpu)
    for spec, attr in GPU_GAUGES:
        value = getattr(gpu, attr)
        if value is not None:
            b.add(spec, dev, value)
    b.add(m.GPU_COLLECTION_SUCCESS, dev, 1 if gpu.ok else 0)
    b.add(m.GPU_LOST, dev, 1 if gpu.lost else 0)
    if not gpu.lost:
        _add_health(b, gpu, dev)
    for ref in view.allocations:
        b.add(m.GPU_ALLOCATION, {**dev, **container_labels(ref)}, 1)
    for usage in view.containers:
        labels = {**dev, **container_labels(usage.ref)}
        if usage.utilization is not None:
            b.add(m.CONTAINER_UTILIZATION, labels, usage.utilization)
        if usage.memory_used_bytes is not None:
            b.add(m.CONTAINER_MEMORY_USED, labels, usage.memory_used_bytes)
        b.add(m.CONTAINER_PROCESSES, labels, usage.processes)
    for other in view.unattributed:
        labels = {**dev, "reason": other.reason}
        if other.utilization is not None:
            b.add(m.UNATTRIBUTED_UTILIZATION, labels, other.utilization)
        if other.memory_used_bytes is not None:
            b.add(m.UNATTRIBUTED_MEMORY_USED, labels, other.memory_used_bytes)
        b.add(m.UNATTRIBUTED_PROCESSES, labels, other.processes)


def _add_health(b: FamilyBuilder, gpu: GpuSample, dev: dict[str, str]) -> None:
    """Identity, MIG placement and the health signals operators page on."""
    b.add(
        m.GPU_INFO,
        {
            **dev,
            "pci_bus_id": gpu.pci_bus_id or "",
            "driver_version": gpu.driver_version or "",
            "cuda_version": gpu.cuda_version or "",
        },
        1,
    )
    if gpu.mig is not None:
        mig = gpu.mig
        b.add(
            m.MIG_INFO,
            {
                **dev,
                "parent_uuid": mig.parent_uuid,
                "gpu_instance_id": str(mig.gpu_instance_id),
                "compute_instance_id": str(mig.compute_instance_id),
                "profile": mig.profile,
            },
            1,
        )
    for spec, direction, attr in GPU_DIRECTIONAL:
        value = getattr(gpu, attr)
        if value is not None:
            b.add(spec, {**dev, "direction": direction}, value)
    for xid, count in sorted((gpu.xid_errors or {}).items()):
        b.add(m.GPU_XID_ERRORS, {**dev, "xid": str(xid)}, count)
    for (kind, scope), count in sorted(gpu.ecc_errors.items()):
        b.add(m.GPU_ECC_ERRORS, {**dev, "type": kind, "scope": scope}, count)
    for kind, rows in sorted(gpu.remapped_rows.items()):
        b.add(m.GPU_REMAPPED_ROWS, {**dev, "type": kind}, rows)
    if gpu.row_remap_pending is not None:
        b.add(m.GPU_ROW_REMAP_PENDING, dev, 1 if gpu.row_remap_pending else 0)
    if gpu.row_remap_failure is not None:
        b.add(m.GPU_ROW_REMAP_FAILURE, dev, 1 if gpu.row_remap_failure else 0)
    if gpu.clock_event_reasons is not None:
        for reason in CLOCK_EVENT_REASONS:
            b.add(m.GPU_CLOCK_EVENT, {**dev, "reason": reason}, 1 if reason in gpu.clock_event_reasons else 0)


def gpu_families(
    views: Sequence[GpuView], node: str, read_errors: Mapping[tuple[str, ...], int] | None = None
) -> list[FamilyData]:
    """The per-GPU, allocation and per-container families of one snapshot.

    `read_errors`: (node, gpu, uuid, model, field, error) -> failed reads so far.
    """
    b = FamilyBuilder(m.SNAPSHOT_METRICS)
    for view in views:
        _add_device(b, view, node)
    for key, count in sorted((read_errors or {}).items()):
        b.add(m.GPU_READ_ERRORS, dict(zip(m.GPU_READ_ERRORS.labels, key, strict=True)), count)
    return b.build()
