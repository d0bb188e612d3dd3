"""The reclaim loop's state: one pass when this replica leads, readiness, and the last pass for /decisions.

No web server or scheduler here (web.py and scheduling.py); the wiring of both is service.py's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from automator.metrics import AutomatorMetrics
from automator.objects.cluster import ClusterState
from automator.objects.files import InputError
from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.ports import EvictionResult, KubeAdapter, KubernetesUnavailable, Mode, UsageSource
from automator.reclaim.model import PlannerConfig
from automator.reclaim.snapshot import load_cluster
from automator.service.actuator import ActuatorState, PassResult, run_pass
from automator.service.kueue import KueueStep

# A pass older than this many intervals makes a leader unready.
STALE_INTERVALS = 3


class SnapshotKube:
    """The cluster from a file, re-read every pass; writing is impossible (dry-run only)."""

    def __init__(self, path: Path, gpu_resources: tuple[str, ...], kueue: bool = False) -> None:
        self.path, self.gpu_resources, self.kueue = path, gpu_resources, kueue

    def snapshot(self) -> ClusterState:
        try:
            return load_cluster(self.path, self.gpu_resources, self.kueue)
        except (InputError, OSError) as e:
            raise KubernetesUnavailable(f"snapshot {self.path}: {e}") from e

    def get_pod(self, pod: ObjectKey) -> Pod | None:
        return next((p for p in self.snapshot().pods if p.key == pod), None)

    def evict(self, pod: ObjectKey, uid: str | None = None, dry_run: bool = False) -> EvictionResult:
        raise RuntimeError(f"snapshot mode is dry-run only: refusing to evict {pod}")

    def annotate_preemptor(
        self, pod: ObjectKey, annotations: Mapping[str, str | None], uid: str | None = None
    ) -> None:
        raise RuntimeError(f"snapshot mode is dry-run only: refusing to patch {pod}")

    def event(self, pod: ObjectKey, type_: str, reason: str, message: str, uid: str | None = None) -> None:
        raise RuntimeError(f"snapshot mode is dry-run only: refusing to write an Event on {pod}")


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Service:
    kube: KubeAdapter
    prom: UsageSource
    config: PlannerConfig
    mode: Mode
    interval: float
    metrics: AutomatorMetrics
    is_leader: Callable[[], bool] = lambda: True
    # Who holds the Lease (a pod name), as this replica last read it; None when unknown.
    leader_identity: Callable[[], str | None] = lambda: None
    max_replans: int = 5
    max_evictions_per_hour: int | None = None
    # Writes the actuator's state on the Lease before each eviction (service/fencing.py); None: no Lease.
    fence: Callable[[], None] | None = None
    clock: Callable[[], datetime] = _now
    state: ActuatorState = field(default_factory=ActuatorState)
    kueue: KueueStep | None = None  # --kueue boost or deactivate (docs/kueue.md)
    last: PassResult | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run_once(self) -> PassResult | None:
        """One pass if this replica leads; None otherwise (a standby runs nothing)."""
        leader = self.is_leader()
        self.metrics.set_leader(leader)
        if not leader:
            return None
        result = run_pass(
            self.kube,
            self.prom,
            self.config,
            self.mode,
            self.clock(),
            state=self.state,
            metrics=self.metrics,
            should_continue=self.is_leader,
            max_replans=self.max_replans,
            max_evictions_per_hour=self.max_evictions_per_hour,
            fence=self.fence,
            kueue=self.kueue,
        )
        with self._lock:
            self.last = result
        return result

    def readiness(self) -> tuple[bool, str]:
        if not self.is_leader():
            return True, "standby: not the leader, running no passes"
        with self._lock:
            last = self.last
        if last is None:
            return False, "no pass yet"
        if not last.ok:
            # Unauthenticated: the reason's text (addresses, API answers) is for /decisions only.
            return False, f"last pass failed ({last.result}): details in /decisions"
        age = (self.clock() - last.at).total_seconds()
        if age > STALE_INTERVALS * self.interval:
            return False, f"last pass is {age:.0f} s old (interval {self.interval:g} s)"
        return True, f"ok: last pass {age:.0f} s ago"

    def decisions(self) -> dict[str, Any]:
        if not self.is_leader():
            return self._standby()
        with self._lock:
            last = self.last
        if last is None:
            body: dict[str, Any] = {
                "decisions": [],
                "unresolved": [],
                "mode": str(self.mode),
                "timestamp": None,
                "result": "no pass yet",
                "acted": False,
            }
        else:
            body = last.to_json()
        body["leader"] = True
        return body

    def _standby(self) -> dict[str, Any]:
        """A standby runs no pass (a pass it ran as leader is stale): it names the replica that does."""
        holder = self.leader_identity()
        where = f"pod {holder} leads" if holder else "no replica is known to hold the Lease now"
        return {
            "decisions": [],
            "unresolved": [],
            "mode": str(self.mode),
            "timestamp": None,
            "result": "standby",
            "reason": f"standby: {where}; the leader runs the passes and answers /decisions",
            "acted": False,
            "leader": False,
            "leader_pod": holder,
        }
