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
    # The pod's UID where the attribution knows it; not part of the identity (PodResources does not
    # give it, cgroups and the pod list do), so refs from either source compare equal.
    pod_uid: str = field(default="", compare=False)


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


@dataclass(frozen=True)
class MigInstance:
    """Where a MIG device sits: its parent GPU, GPU/compute instance ids and profile (e.g. `1g.10gb`)."""

    parent_uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: str


# Clock-event (throttle) reasons the exporter names, in NVML's bit order (nvmlClocksEventReason*).
CLOCK_EVENT_REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
)
ECC_TYPES = ("corrected", "uncorrected")
ECC_SCOPES = ("volatile", "aggregate")


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
    # --- identity and health signals; None (or empty) = not read / not supported ---
    pci_bus_id: str | None = None  # e.g. 00000000:3B:00.0
    driver_version: str | None = None  # node-wide (NVML system), repeated per GPU
    cuda_version: str | None = None  # e.g. 12.4
    mig: MigInstance | None = None  # set on a MIG device; its `index` is the parent's index
    mig_enabled: bool = False  # a parent GPU in MIG mode (its instances are reported as devices)
    memory_reserved_bytes: int | None = None
    memory_temperature_celsius: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    encoder_utilization: float | None = None  # ratio 0-1
    decoder_utilization: float | None = None  # ratio 0-1
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    pcie_replays: int | None = None  # counter since driver load
    nvlink_tx_bytes: int | None = None  # counters over every link; None without NVLink
    nvlink_rx_bytes: int | None = None
    # Xid errors seen since the exporter started, by Xid code; None when events cannot be watched.
    xid_errors: dict[int, int] | None = None
    last_xid: int | None = None  # the newest Xid code seen (0: none yet)
    ecc_errors: dict[tuple[str, str], int] = field(default_factory=dict)  # (type, scope) -> count
    remapped_rows: dict[str, int] = field(default_factory=dict)  # correctable/uncorrectable -> rows
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    clock_event_reasons: frozenset[str] | None = None  # active reasons (CLOCK_EVENT_REASONS)
