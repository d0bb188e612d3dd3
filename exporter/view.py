"""A pure view of one GPU in a snapshot: its usage split over containers and unattributed processes.

The rules are documented in docs/metrics.md ("Per-container utilization"); exporter/families.py turns
views into samples and exporter/dcgm_compat.py into dcgm-exporter's names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar, cast

from exporter.model import Attribution, ContainerRef, GpuSample, ProcessSample

# Reads whose failure makes the process list incomplete: a container would look idle when it is not.
PROCESS_LIST_FIELDS = frozenset({"processes", "graphics_processes"})

N = TypeVar("N", int, float)


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
        # NVML has no utilization on a MIG device: its memory and processes still split by container.
        and (gpu.utilization is not None or gpu.mig is not None)
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
    # A process's ref may know the pod's UID where the allocation's does not: keep the richer one.
    with_uid = {ref: ref for ref in (*allocations, *by_container) if ref.pod_uid}
    containers = []
    for key in sorted(set(allocations) | set(by_container)):
        ref = with_uid.get(key, key)
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
