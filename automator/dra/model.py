"""Plain records the DRA checks read, and what they report. Pure: no client library.

The loader (automator/dra/load.py) turns Kubernetes objects into these records; the checks
(automator/dra/checks.py) never see raw objects, so every field they read has been parsed once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Final, NamedTuple

from automator.objects.pod import ClaimRef

# Finding kinds (the report's contract, docs/dra.md) and their severities, in one place. critical: a
# promise is broken now and a workload can fail; warning: the cluster's records are wrong, wasteful or
# unreadable.
OVERCOMMITTED: Final = "overcommitted"
INVALID_CONSUMPTION: Final = "invalid-consumption"
SHARED: Final = "shared-without-multiple-allocations"
UNKNOWN_DEVICE: Final = "unknown-device"
ORPHANED_CLAIM: Final = "orphaned-claim"
USAGE_OVER_CLAIM: Final = "usage-over-claim"
MIXED_MODE: Final = "mixed-mode"
UNPARSABLE: Final = "unparsable"

CRITICAL: Final = "critical"
WARNING: Final = "warning"

SEVERITY: Final[dict[str, str]] = {
    OVERCOMMITTED: CRITICAL,
    SHARED: CRITICAL,
    USAGE_OVER_CLAIM: CRITICAL,
    INVALID_CONSUMPTION: WARNING,
    UNKNOWN_DEVICE: WARNING,
    ORPHANED_CLAIM: WARNING,
    MIXED_MODE: WARNING,
    UNPARSABLE: WARNING,
}
KINDS: Final[tuple[str, ...]] = tuple(SEVERITY)
_SEVERITY_RANK: Final = {CRITICAL: 0, WARNING: 1}


# The records made per allocation, consumer and usage entry are NamedTuples: one or more per claim, pod and
# usage entry, and a tuple is built and hashed in C.
class DeviceId(NamedTuple):
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class Capacity:
    """One DeviceCapacity. value None: it did not parse; policy_known False: its requestPolicy did not.

    Both were reported as unparsable; the checks leave out only what is unknown."""

    value: Decimal | None
    valid_values: tuple[Decimal, ...] | None = None
    range_min: Decimal | None = None
    range_max: Decimal | None = None
    range_step: Decimal | None = None
    policy_known: bool = True


@dataclass(frozen=True, slots=True)
class Device:
    id: DeviceId
    node: str | None  # None for slices published with nodeSelector or allNodes
    allow_multiple: bool
    capacity: dict[str, Capacity]
    uuid: str | None
    gpu: bool  # published by a GPU driver (counts for mixed-mode)


class Allocation(NamedTuple):
    """One `status.allocation.devices.results[]` entry; consumed holds only the amounts that parsed."""

    request: str
    device: DeviceId
    consumed: dict[str, Decimal]
    has_consumed: bool  # consumedCapacity was given (devices that allow multiple allocations)


class PodConsumer(NamedTuple):
    """A `status.reservedFor[]` entry of resource `pods`."""

    name: str
    uid: str | None


@dataclass(slots=True)
class Claim:
    namespace: str
    name: str
    allocated: bool
    allocations: list[Allocation] = field(default_factory=list)
    pods: list[PodConsumer] = field(default_factory=list)
    other_consumers: int = 0  # reservedFor entries that are not pods: their existence cannot be checked
    key: str = field(init=False)  # namespace/name

    # Written out (dataclass keeps an __init__ the class defines): the generated one with default factories
    # and __post_init__ costs twice as much, once per claim.
    def __init__(
        self,
        namespace: str,
        name: str,
        allocated: bool,
        allocations: list[Allocation] | None = None,
        pods: list[PodConsumer] | None = None,
        other_consumers: int = 0,
    ) -> None:
        self.namespace, self.name, self.allocated = namespace, name, allocated
        self.allocations = [] if allocations is None else allocations
        self.pods = [] if pods is None else pods
        self.other_consumers = other_consumers
        self.key = f"{namespace}/{name}"


@dataclass(slots=True)
class Pod:
    namespace: str
    name: str
    uid: str | None
    node: str | None
    claim_names: Mapping[str, str]  # pod-level name (spec.resourceClaims[].name) -> ResourceClaim name
    containers: Mapping[str, tuple[ClaimRef, ...]]  # container name -> its claim references

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    device_plugin_gpus: dict[str, Decimal]  # allocatable device-plugin GPU resources above zero


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    node: str | None
    device: str | None
    claim: str | None
    pod: str | None
    message: str
    # What tells this finding apart from others of its kind on the same objects, when the message carries
    # measured numbers that change from pass to pass (usage-over-claim: the container). None: the message.
    # Event names hash it, so a finding that persists keeps one Event (automator/dra/report.py).
    key: str | None = None

    @property
    def severity(self) -> str:
        return SEVERITY[self.kind]

    def sort_key(self) -> tuple[int, str, str, str, str, str, str]:
        return (
            _SEVERITY_RANK[self.severity],
            self.kind,
            self.node or "",
            self.device or "",
            self.claim or "",
            self.pod or "",
            self.message,
        )


@dataclass(slots=True)
class Records:
    """Everything loaded from the cluster objects, with the findings loading produced (unparsable fields)."""

    devices: dict[DeviceId, Device] = field(default_factory=dict)
    claims: list[Claim] = field(default_factory=list)
    pods: dict[str, Pod] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DeviceReport:
    node: str | None
    device: DeviceId
    capacity: dict[str, Decimal]
    consumed: dict[str, Decimal]


@dataclass(frozen=True, slots=True)
class Report:
    findings: list[Finding]
    devices: list[DeviceReport]


class CheckOutcome(StrEnum):
    """How a periodic check in the service ended (the `result` label of gpu_steward_dra_checks_total)."""

    OK = "ok"  # objects read and checked (measured usage may still be unavailable: see usage_checked)
    DRA_UNAVAILABLE = "dra_unavailable"  # the API server does not serve resource.k8s.io/v1: nothing to check
    KUBERNETES_ERROR = "kubernetes_error"  # a list failed: no report from this check
    ERROR = "error"  # anything else (a bug): no report from this check


class EventOutcome(StrEnum):
    """An Event write (the `result` label of gpu_steward_dra_events_total)."""

    CREATED = "created"
    EXISTS = "exists"  # 409: an Event of that name exists already (an earlier pass, process or replica)
    ERROR = "error"
