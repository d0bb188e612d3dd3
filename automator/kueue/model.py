"""The Kueue decisions' vocabulary: the modes, the settings and what a pass decides. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from automator.objects.keys import ObjectKey

# Kueue's reference booster writes -100000: far below any priority class a cluster uses, inside int32.
DEFAULT_BOOST = -100_000
MIN_BOOST = -(2**31)


class KueueMode(StrEnum):
    OFF = "off"  # Kueue is not read, nothing is written
    BOOST = "boost"  # a negative kueue.x-k8s.io/priority-boost on idle candidates: Kueue preempts them
    DEACTIVATE = "deactivate"  # spec.active: false on the idle set that covers a waiting Workload's shortfall


@dataclass(frozen=True)
class KueueSettings:
    mode: KueueMode = KueueMode.OFF
    boost: int = DEFAULT_BOOST  # --kueue-boost: a negative 32-bit integer

    @property
    def on(self) -> bool:
        return self.mode is not KueueMode.OFF


@dataclass(frozen=True)
class Target:
    """A Workload to write, as listed: its key, uid (the write's precondition) and API version."""

    key: ObjectKey
    uid: str
    api_version: str


@dataclass(frozen=True)
class Boost:
    target: Target
    waiting: ObjectKey  # the waiting Workload it yields to
    value: int
    gpus: int  # the GPU quota it holds
    pods: int  # its pods: what the write counts against the eviction budgets


@dataclass(frozen=True)
class Unboost:
    target: Target
    reason: str


@dataclass(frozen=True)
class Deactivation:
    target: Target
    waiting: ObjectKey
    gpus: int
    pods: int
    activity: str  # the measured activity, for the Event
    need: int  # the waiting Workload's GPU need
    cluster_queue: str


@dataclass(frozen=True)
class Note:
    """A Workload not served (unresolved) or left alone, and why (the reason starts with its word)."""

    workload: ObjectKey
    reason: str


@dataclass(frozen=True)
class Waiting:
    key: ObjectKey
    gpus: int
    cluster_queue: str


@dataclass
class KueuePlan:
    mode: KueueMode
    boost: list[Boost] = field(default_factory=list)
    unboost: list[Unboost] = field(default_factory=list)
    deactivate: list[Deactivation] = field(default_factory=list)
    unresolved: list[Note] = field(default_factory=list)
    left_alone: list[Note] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)  # every Workload waiting for GPU quota
    idle_gpus_held: int = 0  # GPU quota held by Workloads idle for some waiting Workload
    served: list[ObjectKey] = field(default_factory=list)  # waiting Workloads written for this pass

    @property
    def writes(self) -> int:
        return len(self.boost) + len(self.unboost) + len(self.deactivate)


# What the service remembers between passes: when each waiting Workload was last served.
Served = dict[ObjectKey, datetime]
