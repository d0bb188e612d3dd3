"""In-memory stand-ins for the two ports (automator/ports.py); the objects they hold come from k8s.py.

FakeKube behaves like the API server where the automator can tell: an accepted eviction marks the pod
terminating (it still holds its GPUs until it is gone), the annotation patch lands on the pod, Events are
recorded. Scripted answers per pod reproduce 404/409/429/500.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from automator.conventions import LAST_RECLAIM_ANNOTATION
from automator.model import ClusterState, JsonObj, PodKey, PodUsage, UsageWindow
from automator.ports import EvictionOutcome, EvictionResult, KubernetesUnavailable, PrometheusUnavailable
from automator.resources import rfc3339

_STATUS = {
    EvictionOutcome.OK: 201,
    EvictionOutcome.REFUSED_PDB: 429,
    EvictionOutcome.ERROR: 500,
    EvictionOutcome.NOT_FOUND: 404,
    EvictionOutcome.CONFLICT: 409,
}


@dataclass(frozen=True)
class RecordedEvent:
    pod: PodKey
    type: str
    reason: str
    message: str
    uid: str | None


@dataclass
class FakeKube:
    cluster: ClusterState
    # Scripted answers, consumed in order per pod; when exhausted the eviction succeeds.
    eviction_script: dict[PodKey, list[EvictionOutcome]] = field(default_factory=dict)
    fail_snapshot: str | None = None  # a message: snapshot() raises KubernetesUnavailable with it
    fail_writes: bool = False  # annotate/event raise KubernetesUnavailable
    eviction_calls: list[PodKey] = field(default_factory=list)
    evicted: list[PodKey] = field(default_factory=list)
    annotations: dict[PodKey, str] = field(default_factory=dict)
    events: list[RecordedEvent] = field(default_factory=list)

    def _pod(self, key: PodKey) -> JsonObj | None:
        return next((p for p in self.cluster.pods if PodKey.of(p) == key), None)

    def snapshot(self) -> ClusterState:
        if self.fail_snapshot is not None:
            raise KubernetesUnavailable(self.fail_snapshot)
        return copy.deepcopy(self.cluster)

    def evict(self, pod: PodKey) -> EvictionResult:
        self.eviction_calls.append(pod)
        script = self.eviction_script.get(pod) or []
        outcome = script.pop(0) if script else EvictionOutcome.OK
        obj = self._pod(pod)
        if outcome is EvictionOutcome.OK and obj is None:
            outcome = EvictionOutcome.NOT_FOUND
        if outcome is EvictionOutcome.OK and obj is not None:
            self.evicted.append(pod)
            obj.setdefault("metadata", {})["deletionTimestamp"] = rfc3339(datetime.now(UTC))
        return EvictionResult(outcome, _STATUS[outcome], f"fake {outcome}")

    def annotate_preemptor(self, pod: PodKey, when: datetime) -> None:
        if self.fail_writes:
            raise KubernetesUnavailable(f"patch pod {pod}: fake failure")
        self.annotations[pod] = rfc3339(when)
        obj = self._pod(pod)
        if obj is not None:
            obj.setdefault("metadata", {}).setdefault("annotations", {})[LAST_RECLAIM_ANNOTATION] = rfc3339(
                when
            )

    def event(self, pod: PodKey, type_: str, reason: str, message: str, uid: str | None = None) -> None:
        if self.fail_writes:
            raise KubernetesUnavailable(f"event on {pod}: fake failure")
        self.events.append(RecordedEvent(pod, type_, reason, message, uid))


@dataclass
class FakePrometheus:
    """Known usage per pod; counts queries as the real adapter does (one per distinct window)."""

    data: dict[PodKey, PodUsage] = field(default_factory=dict)
    down: str | None = None  # a reason: usage() raises PrometheusUnavailable with it
    queries_last_call: int = 0
    calls: int = 0

    def usage(
        self, windows: Mapping[PodKey, UsageWindow], at: datetime | None = None
    ) -> dict[PodKey, PodUsage]:
        self.calls += 1
        gpu = {w.gpu_seconds for w in windows.values()}
        cpu = {w.cpu_seconds for w in windows.values() if w.cpu_seconds > 0}
        if self.down is not None:
            self.queries_last_call = 1 if windows else 0
            raise PrometheusUnavailable(self.down)
        self.queries_last_call = len(gpu) + len(cpu)
        return {k: self.data[k] for k in windows if k in self.data}
