"""The ports: what the actuator and the service need from the cluster and from Prometheus, and the errors
the adapters raise. Implemented by automator/kube.py, automator/prom.py, the snapshot file (service.py)
and the test fakes; the layers above depend on this module, never on an adapter. Pure: no client library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from automator.model import ClusterState, PodKey, PodUsage, UsageWindow


class EvictionOutcome(StrEnum):
    """An Eviction API answer (the `result` label of gpu_steward_automator_evictions_total)."""

    OK = "ok"  # 200/201: accepted, the pod terminates gracefully
    REFUSED_PDB = "refused_pdb"  # 429: a PodDisruptionBudget (or rate limit) forbids it now
    ERROR = "error"  # 500 (e.g. two PDBs select the pod) or any other failure
    NOT_FOUND = "not_found"  # 404: already gone, its GPUs are free
    CONFLICT = "conflict"  # 409: concurrent update; worth one retry


@dataclass(frozen=True)
class EvictionResult:
    outcome: EvictionOutcome
    status: int | None = None
    message: str = ""


class KubernetesUnavailable(Exception):
    """The cluster could not be read or written; the message says which call failed and why."""


class PrometheusUnavailable(Exception):
    """Prometheus could not give a trustworthy answer this pass; reason says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class KubeAdapter(Protocol):
    def snapshot(self) -> ClusterState: ...

    def evict(self, pod: PodKey) -> EvictionResult: ...

    def annotate_preemptor(self, pod: PodKey, when: datetime) -> None: ...

    def event(self, pod: PodKey, type_: str, reason: str, message: str, uid: str | None = None) -> None: ...


class UsageSource(Protocol):
    queries_last_call: int

    def usage(
        self, windows: Mapping[PodKey, UsageWindow], at: datetime | None = None
    ) -> dict[PodKey, PodUsage]: ...
