"""Plain data shared by the sources, the attribution layer and the collection loop (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True, order=True)
class ContainerRef:
    """A Kubernetes container, the unit per-container series are labelled with."""

    namespace: str
    pod: str
    container: str


AttributionKind = Literal["container", "host", "unresolved"]
# The sources an attributor reports in `status()` (label `source` of the attribution-available gauge).
ATTRIBUTION_SOURCES = ("proc", "podresources", "kubernetes_api")


@dataclass(frozen=True)
class Attribution:
    """Who owns a host PID: a container, a process outside Kubernetes, or unknown."""

    kind: AttributionKind
    ref: ContainerRef | None = None


@dataclass(frozen=True)
class ProcessSample:
    """One GPU process as NVML (or the mock) reports it; host PID namespace."""

    pid: int
    sm_utilization: float | None  # ratio 0-1, None when NVML has no sample
    memory_used_bytes: int | None  # None when NVML does not report it (e.g. MIG, WDDM)
    # The mock source names the owner directly; the nvml source leaves it None.
    owner: Attribution | None = None


@dataclass
class GpuSample:
    """One GPU's readings in one collection. A None field was not readable."""

    index: int
    uuid: str
    model: str
    ok: bool = True  # every attempted field read without a hard error
    lost: bool = False  # NVML says GPU_IS_LOST / RESET_REQUIRED
    utilization: float | None = None  # ratio 0-1
    memory_utilization: float | None = None  # ratio 0-1 (memory controller busy)
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    energy_joules: float | None = None  # since driver load (counter)
    processes: list[ProcessSample] = field(default_factory=list)
    # False when the compute process list could not be read (e.g. NOT_SUPPORTED): an empty list
    # would then read as "nobody uses this GPU".
    processes_known: bool = True
    errors: dict[str, str] = field(default_factory=dict)  # field -> NVML error name
