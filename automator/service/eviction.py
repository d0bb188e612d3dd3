"""The actuator's writes to the cluster, each guarded and recorded: evictions (server-side dry run or
real), the reads that decide whether one may go or went, cooldown annotations and Events.

No write once leadership is lost; every outcome becomes an `Action` of the pass (/decisions shows them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from automator.metrics import AutomatorMetrics
from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.ports import EvictionOutcome, EvictionResult, KubeAdapter, KubernetesUnavailable
from automator.reclaim.model import Unresolved
from steward_common.conventions import (
    WORD_NOMINATED,
    WORD_PREEMPTOR_CHANGED,
    UnresolvedReason,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Action:
    kind: str  # evict-dry-run, evict, annotate, event
    pod: str
    result: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "pod": self.pod, "result": self.result, "detail": self.detail}


class Stop(Exception):
    """End the pass's actions now (leadership lost, API throttling, an outcome that cannot be known)."""


def _uid(pod: Pod | None) -> str | None:
    return pod.uid if pod is not None else None


@dataclass
class ClusterWriter:
    """The pass's writes through the KubeAdapter port, with the pods as the pass listed them."""

    kube: KubeAdapter
    pods: Mapping[ObjectKey, Pod]
    metrics: AutomatorMetrics | None
    should_continue: Callable[[], bool]
    actions: list[Action] = field(default_factory=list)
    # Writes the actuator's state on the Lease (service/fencing.py) before each eviction; None: no Lease
    # (one replica, or a snapshot).
    fence: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        self.uids = {k: p.uid for k, p in self.pods.items()}

    def leading(self, before: str) -> None:
        """No write once leadership is lost: checked before every eviction, patch and Event."""
        if not self.should_continue():
            raise Stop(f"lost leadership before {before}")

    def event(self, pod: ObjectKey, type_: str, reason: str, message: str) -> None:
        if not self.should_continue():
            self.actions.append(Action("event", str(pod), "skipped", f"{reason}: not the leader"))
            return
        try:
            self.kube.event(pod, type_, reason, message, uid=self.uids.get(pod))
            self.actions.append(Action("event", str(pod), "ok", reason))
        except KubernetesUnavailable as e:
            # An Event is a courtesy: losing one must not stop the pass.
            log.error("event %s on %s failed: %s", reason, pod, e)
            self.actions.append(Action("event", str(pod), "error", f"{reason}: {e}"))

    def fenced(self, pod: ObjectKey) -> None:
        """The eviction of `pod` recorded on the Lease before it is sent: Stop when it cannot be."""
        if self.fence is None:
            return
        try:
            self.fence()
        except Exception as e:  # any failure: the record is not known written, so nothing is sent
            self.actions.append(Action("evict", str(pod), "skipped", f"not recorded on the Lease first: {e}"))
            raise Stop(f"the eviction of {pod} could not be recorded on the Lease first: {e}") from e

    def record(self, kind: str, pod: ObjectKey, result: str, detail: str = "") -> None:
        self.actions.append(Action(kind, str(pod), result, detail))

    def annotate(self, pod: ObjectKey, written: Mapping[str, str | None]) -> bool:
        """The automator's own annotations on a pod (None removes one): the cooldown annotations on a
        preemptor, a notice on a victim. A failure is logged (False): the memory keeps the cooldown, the
        next pass reads the notice again."""
        try:
            self.kube.annotate_preemptor(pod, written, uid=self.uids.get(pod))
            self.actions.append(Action("annotate", str(pod), "ok", ",".join(written)))
            return True
        except KubernetesUnavailable as e:
            log.error("annotations on %s failed: %s", pod, e)
            self.actions.append(Action("annotate", str(pod), "error", str(e)))
            return False

    def evict(self, pod: ObjectKey, dry_run: bool = False) -> EvictionResult:
        try:
            result = self.kube.evict(pod, uid=self.uids.get(pod), dry_run=dry_run)
        except KubernetesUnavailable as e:
            result = EvictionResult(EvictionOutcome.UNKNOWN, None, str(e))
        if not dry_run and self.metrics is not None:
            self.metrics.evictions.labels(result=str(result.outcome)).inc()
        return result

    def preemptor_changed(self, key: ObjectKey) -> Unresolved | None:
        """Read the preemptor again just before its victims go: gone, scheduled, nominated or replaced."""
        try:
            now = self.kube.get_pod(key)
        except KubernetesUnavailable as e:
            raise Stop(f"preemptor {key} cannot be read again: {e}") from e
        changed = UnresolvedReason.PREEMPTOR_CHANGED
        if now is None:
            return Unresolved(key, f"{WORD_PREEMPTOR_CHANGED}: the preemptor is gone", changed)
        if _uid(now) != _uid(self.pods.get(key)):
            return Unresolved(key, f"{WORD_PREEMPTOR_CHANGED}: the preemptor was replaced (new uid)", changed)
        if now.node_name:
            node = now.node_name
            return Unresolved(
                key, f"{WORD_PREEMPTOR_CHANGED}: the preemptor was scheduled to {node}", changed
            )
        nominated = now.nominated_node
        if nominated:
            why = f"{WORD_NOMINATED}: the scheduler nominated node {nominated}"
            return Unresolved(key, why, UnresolvedReason.NOMINATED)
        return None
