"""The ports: what the actuator and the service need from the cluster and from Prometheus, and the errors
the adapters raise. Implemented by automator/kube/, automator/prom.py, the snapshot file (service.py)
and the test fakes; the layers above depend on this module, never on an adapter. Pure: no client library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import NamedTuple, Protocol, TypeAlias

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.reclaim.model import PodUsage, UsageWindow


# Enums are the only home of these value sets: metrics pre-create their label values from them.
class Mode(StrEnum):
    DRY_RUN = "dry-run"
    ENFORCE = "enforce"


class PassOutcome(StrEnum):
    """How a reclaim pass ended (the `result` label of gpu_steward_automator_passes_total)."""

    OK = "ok"
    PROMETHEUS_UNAVAILABLE = "prometheus_unavailable"
    KUBERNETES_ERROR = "kubernetes_error"
    CLOCK_SKEW = "clock_skew"  # Prometheus' clock more than 120 s from ours: no eviction
    ERROR = "error"


class KueueAction(StrEnum):
    """A write on a Kueue Workload (the `action` label of gpu_steward_automator_kueue_actions_total)."""

    BOOST = "boost"  # kueue.x-k8s.io/priority-boost written
    UNBOOST = "unboost"  # the automator's boost removed
    DEACTIVATE = "deactivate"  # spec.active: false


class EvictionOutcome(StrEnum):
    """An Eviction API answer (the `result` label of gpu_steward_automator_evictions_total)."""

    OK = "ok"  # 200/201: accepted, the pod terminates gracefully
    REFUSED_PDB = "refused_pdb"  # 429 naming a disruption budget: the victim is excluded, re-plan
    THROTTLED = "throttled"  # 429 without a budget (API Priority and Fairness, Retry-After): end the pass
    ERROR = "error"  # any other 4xx (403, 422, ...): refused, the victim is excluded, re-plan
    NOT_FOUND = "not_found"  # 404: already gone, its GPUs are free
    CONFLICT = "conflict"  # 409: the uid precondition failed: not the pod that was judged; skip it
    # No answer (timeout, reset) or a 5xx: the eviction may have happened or may still; taken as done, the
    # pass ends and the next pass lists the pod again.
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class EvictionResult:
    outcome: EvictionOutcome
    status: int | None = None
    message: str = ""
    retry_after: float | None = None  # seconds, from a 429's Retry-After


class KubernetesUnavailable(Exception):
    """The cluster could not be read or written; the message says which call failed and why."""


class PrometheusUnavailable(Exception):
    """Prometheus could not give a trustworthy answer this pass; reason says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class KubeAdapter(Protocol):
    def snapshot(self) -> ClusterState: ...

    def get_pod(self, pod: ObjectKey) -> Pod | None:
        """The pod as the API has it now; None when it does not exist (KubernetesUnavailable: unknown)."""
        ...

    def evict(self, pod: ObjectKey, uid: str | None = None, dry_run: bool = False) -> EvictionResult:
        """policy/v1 Eviction with deleteOptions.preconditions.uid; dry_run: the server's dry run only."""
        ...

    def annotate_preemptor(
        self, pod: ObjectKey, annotations: Mapping[str, str | None], uid: str | None = None
    ) -> None:
        """Merge-patch the automator's own annotations, on a preemptor or a victim (None removes one; uid:
        the patch fails if the pod was replaced)."""
        ...

    def event(
        self, pod: ObjectKey, type_: str, reason: str, message: str, uid: str | None = None
    ) -> None: ...


class KueueWriter(Protocol):
    """The Kueue writes (docs/kueue.md): a JSON merge patch of a Workload and an Event on it."""

    def patch_workload(
        self, workload: ObjectKey, api_version: str, patch: dict[str, object], uid: str | None = None
    ) -> None:
        """KubernetesUnavailable when the patch was not made (or its outcome is unknown)."""
        ...

    def workload_event(
        self, workload: ObjectKey, api_version: str, uid: str | None, type_: str, reason: str, message: str
    ) -> None: ...


class ContainerUsage(NamedTuple):
    """A container's memory on one GPU, as Prometheus has it (the DRA check's usage)."""

    namespace: str
    pod: str
    container: str
    gpu_uuid: str
    memory_bytes: Decimal | None  # None: unknown, never compared


# The usage query's types, named once for the port and its implementations.
Windows: TypeAlias = Mapping[ObjectKey, UsageWindow]  # each pod's windows
Usage: TypeAlias = dict[ObjectKey, PodUsage]  # each pod Prometheus knows (a pod it lacks: unknown)
When: TypeAlias = datetime | None


class UsageSource(Protocol):
    queries_last_call: int
    # Pods whose series held a NaN/Inf in the last call (each left unknown, i.e. protected).
    nonfinite_last_call: int
    # Prometheus' evaluation time minus `now` in the last call (None: not measured).
    clock_skew_seconds: float | None

    def usage(self, windows: Windows, at: When = None, recent_seconds: int = 300, now: When = None) -> Usage:
        """Each pod's usage over its windows and its recent maximum over the last `recent_seconds`, as of
        `at` (default: Prometheus' now); PrometheusUnavailable when no trustworthy answer can be given."""
        ...
