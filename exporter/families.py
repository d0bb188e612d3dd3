"""Snapshot views -> ready-made samples per metric family (pure).

The collection loop calls `gpu_families` once per collection, so that a scrape only wraps the samples
(exporter/exposition.py). Names, types and help come from the table in exporter/metrics.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.samples import Sample

from exporter import metrics as m
from exporter.model import ContainerRef, GpuSample
from exporter.view import GpuView

# Per-GPU gauges and the GpuSample field each one reports (left out when the field is None).
GPU_GAUGES: tuple[tuple[m.MetricSpec, str], ...] = (
    (m.GPU_UTILIZATION, "utilization"),
    (m.GPU_MEMORY_UTILIZATION, "memory_utilization"),
    (m.GPU_MEMORY_USED, "memory_used_bytes"),
    (m.GPU_MEMORY_TOTAL, "memory_total_bytes"),
    (m.GPU_TEMPERATURE, "temperature_celsius"),
    (m.GPU_POWER, "power_watts"),
    (m.GPU_ENERGY, "energy_joules"),
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
