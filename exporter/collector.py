"""Background collection, the snapshot it produces, and the Prometheus collector that serves it.

A thread reads the source every `interval` seconds, attributes processes and allocations, and turns
the result into ready-made samples (the snapshot). A scrape only wraps the last snapshot's samples
in fresh metric families and adds its age: it never calls NVML or the kubelet. The rules that turn
GPU readings into per-container series (`gpu_view`) are pure functions; docs/metrics.md describes them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar, cast

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

import exporter
from exporter.model import Attribution, Attributor, ContainerRef, GpuSample, ProcessSample, Source

log = logging.getLogger(__name__)

PREFIX = "gpu_steward_"
# Reads whose failure makes the process list incomplete: a container would look idle when it is not.
PROCESS_LIST_FIELDS = frozenset({"processes", "graphics_processes"})

Kind = Literal["gauge", "counter"]
N = TypeVar("N", int, float)


# --- per-GPU attribution (pure) ---


@dataclass(frozen=True)
class ContainerUsage:
    ref: ContainerRef
    utilization: float | None  # None: some process's utilization is unknown
    memory_used_bytes: int | None  # None: some process's memory is unknown
    processes: int


@dataclass(frozen=True)
class UnattributedUsage:
    reason: Literal["host", "unresolved"]
    utilization: float | None
    memory_used_bytes: int | None
    processes: int


@dataclass(frozen=True)
class GpuView:
    """One GPU with the containers and unattributed processes on it."""

    gpu: GpuSample
    allocations: tuple[ContainerRef, ...]
    known: bool  # readings complete enough to say what each container does on it
    containers: tuple[ContainerUsage, ...] = ()
    unattributed: tuple[UnattributedUsage, ...] = ()


def _known_sum(values: Sequence[N | None]) -> N | None:
    """The sum, or None when any value is unknown: a partial sum would understate the use."""
    if any(v is None for v in values):
        return None
    return sum(cast(Sequence[N], values))


def _sum_utilization(procs: Sequence[ProcessSample]) -> float | None:
    total = _known_sum([p.sm_utilization for p in procs])
    return None if total is None else min(1.0, total)


def _sum_memory(procs: Sequence[ProcessSample]) -> int | None:
    return _known_sum([p.memory_used_bytes for p in procs])


def gpu_known(gpu: GpuSample) -> bool:
    """Whether container series can be derived: GPU present, utilization and process list read."""
    return (
        not gpu.lost
        and gpu.utilization is not None
        and gpu.processes_known
        and not (PROCESS_LIST_FIELDS & gpu.errors.keys())
    )


def gpu_view(gpu: GpuSample, owners: Mapping[int, Attribution], allocated: Sequence[ContainerRef]) -> GpuView:
    """Split a GPU's usage over containers (see docs/metrics.md, "Per-container utilization").

    - A GPU allocated to exactly one container, with no process of another container or of the host
      on it, gives that container the device utilization (NVML's device counter is more accurate
      than summed process samples, and an upper bound when some processes are unresolved).
    - Otherwise a container gets the sum of its processes' SM utilization, capped at 1.
    - An allocated container with no process on the GPU gets 0 utilization and 0 bytes.
    - Unresolved processes on the GPU (other than in the first case) make the split unknown:
      utilization and memory are withheld for every container on it.
    - Nothing per container when the GPU is lost or its utilization or process list did not read.
    """
    allocations = tuple(dict.fromkeys(allocated))  # dedupe, keep order
    if not gpu_known(gpu):
        return GpuView(gpu, allocations, known=False)
    by_container: dict[ContainerRef, list[ProcessSample]] = {}
    by_reason: dict[Literal["host", "unresolved"], list[ProcessSample]] = {}
    for proc in gpu.processes:
        owner = proc.owner or owners.get(proc.pid) or Attribution("unresolved")
        if owner.kind == "container" and owner.ref is not None:
            by_container.setdefault(owner.ref, []).append(proc)
        else:
            by_reason.setdefault("host" if owner.kind == "host" else "unresolved", []).append(proc)
    # Unresolved processes may be any container's: the split is unknown unless one container holds
    # the GPU, whose device utilization is then an upper bound (never a false "idle").
    unresolved = "unresolved" in by_reason
    sole = (
        allocations[0]
        if len(allocations) == 1 and "host" not in by_reason and set(by_container) <= {allocations[0]}
        else None
    )
    containers = []
    for ref in sorted(set(allocations) | set(by_container)):
        procs = by_container.get(ref, [])
        if ref == sole and (procs or unresolved):
            containers.append(
                ContainerUsage(ref, gpu.utilization, None if unresolved else _sum_memory(procs), len(procs))
            )
        elif unresolved:
            containers.append(ContainerUsage(ref, None, None, len(procs)))
        elif not procs:
            containers.append(ContainerUsage(ref, 0.0, 0, 0))
        else:
            containers.append(ContainerUsage(ref, _sum_utilization(procs), _sum_memory(procs), len(procs)))
    unattributed = [
        UnattributedUsage(reason, _sum_utilization(procs), _sum_memory(procs), len(procs))
        for reason, procs in sorted(by_reason.items())
    ]
    return GpuView(gpu, allocations, True, tuple(containers), tuple(unattributed))


# --- samples (pure) ---


@dataclass(frozen=True)
class FamilyData:
    """A metric family's name, help, type and ready-made samples, kept in the snapshot."""

    name: str  # counters without `_total`
    documentation: str
    kind: Kind
    samples: tuple[Sample, ...]

    def metric(self) -> Metric:
        family: Metric = (
            GaugeMetricFamily(self.name, self.documentation)
            if self.kind == "gauge"
            else CounterMetricFamily(self.name, self.documentation)
        )
        family.samples.extend(self.samples)
        return family


class FamilyBuilder:
    """Collects samples per family name in declaration order."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, Kind, list[Sample]]] = {}

    def declare(self, name: str, documentation: str, kind: Kind = "gauge") -> None:
        self._families.setdefault(name, (documentation, kind, []))

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        _, kind, samples = self._families[name]
        samples.append(Sample(name + "_total" if kind == "counter" else name, labels, float(value)))

    def build(self) -> list[FamilyData]:
        return [
            FamilyData(name, doc, kind, tuple(samples))
            for name, (doc, kind, samples) in self._families.items()
        ]


SNAPSHOT_NOTE = " (from the last background collection)"
GPU_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("gpu_utilization_ratio", "utilization", "Share of time a kernel ran on the GPU, 0-1"),
    (
        "gpu_memory_utilization_ratio",
        "memory_utilization",
        "Share of time device memory was read or written, 0-1",
    ),
    ("gpu_memory_used_bytes", "memory_used_bytes", "GPU framebuffer memory in use, bytes"),
    ("gpu_memory_total_bytes", "memory_total_bytes", "GPU framebuffer memory size, bytes"),
    ("gpu_temperature_celsius", "temperature_celsius", "GPU core temperature, degrees Celsius"),
    ("gpu_power_watts", "power_watts", "GPU power draw, watts"),
)


def device_labels(node: str, gpu: GpuSample) -> dict[str, str]:
    return {"node": node, "gpu": str(gpu.index), "uuid": gpu.uuid, "model": gpu.model}


def container_labels(ref: ContainerRef) -> dict[str, str]:
    return {"namespace": ref.namespace, "pod": ref.pod, "container": ref.container}


def gpu_families(
    views: Sequence[GpuView], node: str, read_errors: Mapping[tuple[str, ...], int] | None = None
) -> list[FamilyData]:
    """The per-GPU, allocation and per-container families of one snapshot."""
    b = FamilyBuilder()
    for name, _, doc in GPU_GAUGES:
        b.declare(PREFIX + name, doc + SNAPSHOT_NOTE)
    b.declare(
        PREFIX + "gpu_energy_joules",
        "GPU energy used since the driver loaded, joules" + SNAPSHOT_NOTE,
        "counter",
    )
    b.declare(
        PREFIX + "gpu_collection_success", "1 if every field of this GPU read fine in the last collection"
    )
    b.declare(PREFIX + "gpu_lost", "1 if NVML reports this GPU lost or needing a reset")
    b.declare(PREFIX + "gpu_allocation", "1 for each container the kubelet allocated this GPU to")
    b.declare(
        PREFIX + "container_gpu_utilization_ratio",
        "This container's share of the GPU's time, 0-1" + SNAPSHOT_NOTE,
    )
    b.declare(
        PREFIX + "container_gpu_memory_used_bytes", "GPU memory used by this container's processes, bytes"
    )
    b.declare(PREFIX + "container_gpu_processes", "Processes of this container on the GPU")
    b.declare(
        PREFIX + "unattributed_gpu_utilization_ratio",
        "SM utilization of GPU processes not in a container, 0-1",
    )
    b.declare(
        PREFIX + "unattributed_gpu_memory_used_bytes", "GPU memory of processes not in a container, bytes"
    )
    b.declare(
        PREFIX + "unattributed_gpu_processes", "GPU processes not in a container (reason: host or unresolved)"
    )
    b.declare(PREFIX + "gpu_read_errors", "NVML reads that failed, by GPU, field and NVML error", "counter")
    for view in views:
        gpu = view.gpu
        dev = device_labels(node, gpu)
        for name, attr, _ in GPU_GAUGES:
            value = getattr(gpu, attr)
            if value is not None:
                b.add(PREFIX + name, dev, value)
        if gpu.energy_joules is not None:
            b.add(PREFIX + "gpu_energy_joules", dev, gpu.energy_joules)
        b.add(PREFIX + "gpu_collection_success", dev, 1 if gpu.ok else 0)
        b.add(PREFIX + "gpu_lost", dev, 1 if gpu.lost else 0)
        for ref in view.allocations:
            b.add(PREFIX + "gpu_allocation", {**dev, **container_labels(ref)}, 1)
        for usage in view.containers:
            labels = {**dev, **container_labels(usage.ref)}
            if usage.utilization is not None:
                b.add(PREFIX + "container_gpu_utilization_ratio", labels, usage.utilization)
            if usage.memory_used_bytes is not None:
                b.add(PREFIX + "container_gpu_memory_used_bytes", labels, usage.memory_used_bytes)
            b.add(PREFIX + "container_gpu_processes", labels, usage.processes)
        for other in view.unattributed:
            labels = {**dev, "reason": other.reason}
            if other.utilization is not None:
                b.add(PREFIX + "unattributed_gpu_utilization_ratio", labels, other.utilization)
            if other.memory_used_bytes is not None:
                b.add(PREFIX + "unattributed_gpu_memory_used_bytes", labels, other.memory_used_bytes)
            b.add(PREFIX + "unattributed_gpu_processes", labels, other.processes)
    for (n, index, uuid, model, fld, error), count in sorted((read_errors or {}).items()):
        labels = {"node": n, "gpu": index, "uuid": uuid, "model": model, "field": fld, "error": error}
        b.add(PREFIX + "gpu_read_errors", labels, count)
    return b.build()


# --- the snapshot and the background loop ---


@dataclass(frozen=True)
class Snapshot:
    families: tuple[FamilyData, ...]
    views: tuple[GpuView, ...]
    attribution: Mapping[str, bool]
    monotonic: float  # when it was taken, on the loop's clock
    timestamp: float  # when it was taken, Unix seconds
    duration_seconds: float


class FamilyExtension(Protocol):
    """Extra families built from the same views (the dcgm compatibility names)."""

    def __call__(self, views: Sequence[GpuView], node: str) -> list[FamilyData]: ...


@dataclass
class CollectionLoop:
    """Reads the source in a background thread and keeps the last snapshot."""

    source: Source
    attributor: Attributor
    node: str
    interval: float
    extensions: Sequence[FamilyExtension] = ()
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    collection_errors: int = 0
    read_errors: Counter[tuple[str, ...]] = field(default_factory=Counter)
    last_attempt: float | None = None  # loop clock; for /healthz
    _snapshot: Snapshot | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def collect_once(self) -> Snapshot | None:
        """One collection; on a source failure keep the previous snapshot (its age grows)."""
        started = self.clock()
        try:
            gpus = self.source.collect()
        except Exception:
            log.exception("collection from source %s failed", self.source.name)
            self.collection_errors += 1
            self.last_attempt = self.clock()
            return None
        owners, allocations, status = self._attribution(gpus)
        views = [gpu_view(g, owners, allocations.get(g.uuid, [])) for g in gpus]
        for g in gpus:
            for fld, error in g.errors.items():
                self.read_errors[(self.node, str(g.index), g.uuid, g.model, fld, error)] += 1
        families = gpu_families(views, self.node, self.read_errors)
        for extension in self.extensions:
            families.extend(extension(views, self.node))
        finished = self.clock()
        self._snapshot = Snapshot(
            families=tuple(families),
            views=tuple(views),
            attribution=status,
            monotonic=finished,
            timestamp=self.wall_clock(),
            duration_seconds=finished - started,
        )
        self.last_attempt = finished
        return self._snapshot

    def _attribution(
        self, gpus: Sequence[GpuSample]
    ) -> tuple[dict[int, Attribution], dict[str, list[ContainerRef]], dict[str, bool]]:
        """Owners of unowned PIDs, allocations and status; a failing attributor degrades, never raises."""
        try:
            self.attributor.refresh()
        except Exception:
            log.exception("attribution refresh failed")
        failed: dict[str, bool] = {}
        pids = sorted({p.pid for g in gpus for p in g.processes if p.owner is None})
        owners: dict[int, Attribution] = {}
        if pids:
            try:
                # pid -> GPUs it runs on: lets the attributor pick the container holding that GPU.
                devices: dict[int, set[str]] = {}
                for g in gpus:
                    for p in g.processes:
                        devices.setdefault(p.pid, set()).add(g.uuid)
                owners = self.attributor.attribute(pids, devices=devices)
            except Exception:
                log.exception("attributing %d PIDs failed", len(pids))
                failed["proc"] = False
        try:
            allocations = self.attributor.allocations()
        except Exception:
            log.exception("reading allocations failed")
            allocations, failed["podresources"] = {}, False
        try:
            status = dict(self.attributor.status())
        except Exception:
            log.exception("attribution status failed")
            status = {}
        return owners, allocations, {**status, **failed}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpu-collection", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        next_run = self.clock()
        while not self._stop.is_set():
            try:
                self.collect_once()
            except Exception:  # a bug in attribution or rendering must not end collection
                log.exception("collection failed")
                self.collection_errors += 1
            # Fixed rate; a collection that overran skips the missed slots instead of bunching up.
            next_run += self.interval
            now = self.clock()
            if next_run < now:
                next_run = now + self.interval - (now - next_run) % self.interval
            self._stop.wait(next_run - now)

    def healthy(self, now: float | None = None) -> bool:
        """Collection is making progress (a hung NVML call stops it); used by /healthz."""
        if self.last_attempt is None:
            return True  # still on the first collection
        now = self.clock() if now is None else now
        return now - self.last_attempt <= 3 * self.interval + 30


class ExporterCollector:
    """prometheus_client collector: fresh families per scrape from the loop's last snapshot."""

    def __init__(self, loop: CollectionLoop, source_name: str) -> None:
        self._loop = loop
        self._source_name = source_name

    def collect(self) -> Iterator[Metric]:
        loop, node = self._loop, self._loop.node
        snap = loop.snapshot
        info = GaugeMetricFamily(
            PREFIX + "exporter_build_info",
            "Exporter version and GPU source; always 1",
            labels=("node", "version", "source"),
        )
        info.add_metric([node, exporter.__version__, self._source_name], 1)
        yield info
        errors = CounterMetricFamily(
            PREFIX + "exporter_collection_errors", "Collections that failed as a whole", labels=("node",)
        )
        errors.add_metric([node], loop.collection_errors)
        yield errors
        if snap is None:
            return
        yield from (f.metric() for f in snap.families)
        yield from _exporter_gauges(node, snap, loop.clock())


def _node_gauge(name: str, documentation: str, node: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(PREFIX + name, documentation, labels=("node",))
    family.add_metric([node], value)
    return family


def _exporter_gauges(node: str, snap: Snapshot, now: float) -> Iterable[Metric]:
    age = _node_gauge(
        "exporter_snapshot_age_seconds",
        "Seconds since the snapshot served by this scrape was collected",
        node,
        max(0.0, now - snap.monotonic),
    )
    last = _node_gauge(
        "exporter_last_collection_timestamp_seconds",
        "Unix time of the collection served by this scrape",
        node,
        snap.timestamp,
    )
    duration = _node_gauge(
        "exporter_collection_duration_seconds",
        "How long the collection served by this scrape took",
        node,
        snap.duration_seconds,
    )
    available = GaugeMetricFamily(
        PREFIX + "exporter_attribution_available",
        "1 if the attribution source answered in the last collection; 0 = degraded (series unattributed)",
        labels=("node", "source"),
    )
    for source, ok in sorted(snap.attribution.items()):
        available.add_metric([node, source], 1 if ok else 0)
    return (age, last, duration, available)
