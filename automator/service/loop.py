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
from automator.objects.model import ClusterState, Mode, PlannerConfig, PodKey
from automator.objects.pod import Pod
from automator.ports import EvictionResult, KubeAdapter, KubernetesUnavailable, UsageSource
from automator.reclaim.snapshot import InputError, load_cluster
from automator.service.actuator import ActuatorState, PassResult, run_pass

# A pass older than this many intervals makes a leader unready.
STALE_INTERVALS = 3


class SnapshotKube:
    """The cluster from a file, re-read every pass; writing is impossible (dry-run only)."""

    def __init__(self, path: Path, gpu_resources: tuple[str, ...]) -> None:
        self.path, self.gpu_resources = path, gpu_resources

    def snapshot(self) -> ClusterState:
        try:
            return load_cluster(self.path, self.gpu_resources)
        except (InputError, OSError) as e:
            raise KubernetesUnavailable(f"snapshot {self.path}: {e}") from e

    def get_pod(self, pod: PodKey) -> Pod | None:
        return next((p for p in self.snapshot().pods if p.key == pod), None)

    def evict(self, pod: PodKey, uid: str | None = None, dry_run: bool = False) -> EvictionResult:
        raise RuntimeError(f"snapshot mode is dry-run only: refusing to evict {pod}")

    def annotate_preemptor(self, pod: PodKey, annotations: Mapping[str, str], uid: str | None = None) -> None:
        raise RuntimeError(f"snapshot mode is dry-run only: refusing to patch {pod}")

    def event(self, pod: PodKey, type_: str, reason: str, message: str, uid: str | None = None) -> None:
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
    max_replans: int = 5
    max_evictions_per_hour: int | None = None
    # Writes the actuator's state on the Lease before each eviction (service/fencing.py); None: no Lease.
    fence: Callable[[], None] | None = None
    clock: Callable[[], datetime] = _now
    state: ActuatorState = field(default_factory=ActuatorState)
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
        body["leader"] = self.is_leader()
        return body
