"""In-memory stand-ins for the two ports (automator/ports.py); the objects they hold come from k8s.py.

FakeKube behaves like the API server where the automator can tell: an accepted eviction marks the pod
terminating (it still holds its GPUs until it is gone), a uid precondition that does not match is a 409, a
dry run changes nothing, the annotation patch lands on the pod, Events are recorded. Scripted answers per
pod reproduce 404/409/429 (budget or throttling)/500 and answers that never come (UNKNOWN, after which
`accepted_silently` says whether the server had in fact evicted).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.ports import (
    EvictionOutcome,
    EvictionResult,
    KubernetesUnavailable,
    PrometheusUnavailable,
    Usage,
    When,
    Windows,
)
from automator.reclaim.model import PodUsage
from steward_common.conventions import LAST_RECLAIM_ANNOTATION

_STATUS = {
    EvictionOutcome.OK: 201,
    EvictionOutcome.REFUSED_PDB: 429,
    EvictionOutcome.ERROR: 500,
    EvictionOutcome.NOT_FOUND: 404,
    EvictionOutcome.CONFLICT: 409,
    EvictionOutcome.THROTTLED: 429,
    EvictionOutcome.UNKNOWN: None,
}


@dataclass(frozen=True)
class RecordedEvent:
    pod: ObjectKey
    type: str
    reason: str
    message: str
    uid: str | None


@dataclass
class FakeKube:
    cluster: ClusterState
    # Scripted answers, consumed in order per pod; when exhausted the eviction succeeds.
    eviction_script: dict[ObjectKey, list[EvictionOutcome]] = field(default_factory=dict)
    fail_snapshot: str | None = None  # a message: snapshot() raises KubernetesUnavailable with it
    fail_writes: bool = False  # annotate/event raise KubernetesUnavailable
    # Pods whose UNKNOWN answer hid an accepted eviction (the pod is then terminating).
    accepted_silently: set[ObjectKey] = field(default_factory=set)
    fail_get: bool | set[ObjectKey] = False  # get_pod raises KubernetesUnavailable (for these pods)
    dry_run_ok: bool = False  # dry runs always pass (the script then only answers the real evictions)
    # Called with the live objects right after a snapshot was taken: what changes between list and act.
    after_snapshot: Callable[[ClusterState], None] | None = None
    # Called before each write with its kind ("evict", "annotate", "event"): e.g. to lose leadership.
    before_write: Callable[[str], None] | None = None
    eviction_calls: list[ObjectKey] = field(default_factory=list)
    dry_run_calls: list[ObjectKey] = field(default_factory=list)
    uids_sent: list[str | None] = field(default_factory=list)
    evicted: list[ObjectKey] = field(default_factory=list)
    annotations: dict[ObjectKey, str] = field(default_factory=dict)  # last-reclaim-time written
    written: dict[ObjectKey, dict[str, str | None]] = field(default_factory=dict)  # the last patch per pod
    patches: list[tuple[ObjectKey, dict[str, str | None]]] = field(default_factory=list)  # every patch
    events: list[RecordedEvent] = field(default_factory=list)
    get_calls: list[ObjectKey] = field(default_factory=list)

    def _pod(self, key: ObjectKey) -> Pod | None:
        return next((p for p in self.cluster.pods if p.key == key), None)

    def _change(self, key: ObjectKey, **fields: Any) -> None:
        """The live pod changed (records are immutable: a changed copy takes its place)."""
        pods = self.cluster.pods
        i = next(i for i, p in enumerate(pods) if p.key == key)
        pods[i] = msgspec.structs.replace(pods[i], **fields)

    def _write(self, kind: str) -> None:
        if self.before_write is not None:
            self.before_write(kind)

    def snapshot(self) -> ClusterState:
        if self.fail_snapshot is not None:
            raise KubernetesUnavailable(self.fail_snapshot)
        taken = copy.deepcopy(self.cluster)
        if self.after_snapshot is not None:
            self.after_snapshot(self.cluster)
        return taken

    def get_pod(self, pod: ObjectKey) -> Pod | None:
        self.get_calls.append(pod)
        if self.fail_get is True or (isinstance(self.fail_get, set) and pod in self.fail_get):
            raise KubernetesUnavailable(f"get pod {pod}: fake failure")
        return self._pod(pod)

    def _terminate(self, pod: ObjectKey, obj: Pod) -> None:
        self.evicted.append(pod)
        self._change(pod, terminating=True)

    def evict(self, pod: ObjectKey, uid: str | None = None, dry_run: bool = False) -> EvictionResult:
        self._write("evict")
        obj = self._pod(pod)
        if dry_run:
            self.dry_run_calls.append(pod)
            script = self.eviction_script.get(pod) or []
            # A dry run answers what the real one would for budgets and refusals, and changes nothing.
            peek = script[0] if script and not self.dry_run_ok else EvictionOutcome.OK
            if peek in (EvictionOutcome.UNKNOWN, EvictionOutcome.CONFLICT):
                peek = EvictionOutcome.OK
            if obj is None:
                peek = EvictionOutcome.NOT_FOUND
            retry = 5.0 if peek is EvictionOutcome.THROTTLED else None
            return EvictionResult(peek, _STATUS[peek], f"fake dry-run {peek}", retry)
        self.eviction_calls.append(pod)
        self.uids_sent.append(uid)
        script = self.eviction_script.get(pod) or []
        outcome = script.pop(0) if script else EvictionOutcome.OK
        current_uid = obj.uid if obj is not None else None
        if outcome is EvictionOutcome.OK and obj is not None and uid and current_uid and uid != current_uid:
            outcome = EvictionOutcome.CONFLICT  # the uid precondition: not the pod that was judged
        if outcome is EvictionOutcome.OK and obj is None:
            outcome = EvictionOutcome.NOT_FOUND
        if outcome is EvictionOutcome.OK and obj is not None:
            self._terminate(pod, obj)
        if outcome is EvictionOutcome.UNKNOWN and pod in self.accepted_silently and obj is not None:
            self._terminate(pod, obj)
        retry = 5.0 if outcome is EvictionOutcome.THROTTLED else None
        return EvictionResult(outcome, _STATUS[outcome], f"fake {outcome}", retry)

    def annotate_preemptor(
        self, pod: ObjectKey, annotations: Mapping[str, str | None], uid: str | None = None
    ) -> None:
        self._write("annotate")
        if self.fail_writes:
            raise KubernetesUnavailable(f"patch pod {pod}: fake failure")
        if LAST_RECLAIM_ANNOTATION in annotations:
            self.annotations[pod] = str(annotations[LAST_RECLAIM_ANNOTATION])
        self.written[pod] = dict(annotations)
        self.patches.append((pod, dict(annotations)))
        obj = self._pod(pod)
        if obj is not None:
            merged = {**obj.annotations, **annotations}
            self._change(pod, annotations={k: v for k, v in merged.items() if v is not None})

    def event(self, pod: ObjectKey, type_: str, reason: str, message: str, uid: str | None = None) -> None:
        self._write("event")
        if self.fail_writes:
            raise KubernetesUnavailable(f"event on {pod}: fake failure")
        self.events.append(RecordedEvent(pod, type_, reason, message, uid))


@dataclass
class FakePrometheus:
    """Known usage per pod; counts queries as the real adapter does (one per distinct window)."""

    data: dict[ObjectKey, PodUsage] = field(default_factory=dict)
    down: str | None = None  # a reason: usage() raises PrometheusUnavailable with it
    skew: float = 0.0  # Prometheus' clock minus the caller's `now`
    nonfinite: int = 0  # pods reported as having NaN/Inf samples
    queries_last_call: int = 0
    nonfinite_last_call: int = 0
    clock_skew_seconds: float | None = None
    calls: int = 0

    def usage(self, windows: Windows, at: When = None, recent_seconds: int = 300, now: When = None) -> Usage:
        self.calls += 1
        gpu = {w.gpu_seconds for w in windows.values()}
        cpu = {w.cpu_seconds for w in windows.values() if w.cpu_seconds > 0}
        if self.down is not None:
            self.queries_last_call = 1 if windows else 0
            raise PrometheusUnavailable(self.down)
        if not windows:
            self.queries_last_call, self.clock_skew_seconds = 0, None
            return {}
        # The recent query (which reads Prometheus' clock), then one per distinct window.
        self.queries_last_call = 1 + len(gpu) + len(cpu)
        self.clock_skew_seconds = self.skew if now is not None else None
        self.nonfinite_last_call = self.nonfinite
        return {k: self.data[k] for k in windows if k in self.data}
