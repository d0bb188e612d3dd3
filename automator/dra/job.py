"""The DRA check as a periodic job of `gpu-automator run` (docs/dra.md, "In the service").

Each check lists ResourceSlices, ResourceClaims, DeviceClasses, Pods and Nodes through the Kubernetes
adapter, reads measured per-container GPU memory through the Prometheus adapter, runs the pure checks, keeps
the report for /metrics and the JSON endpoint, and writes an Event per finding once (not once per check).
Pure orchestration over two small ports; the adapters are automator/kube/dra.py (DraKubernetesAdapter) and
automator/prom.py (DraMemoryReader); service.py only registers the job and the route.

What is missing is said, never guessed: no report is exported before the first check, nor once the last
successful one is older than STALE_INTERVALS intervals; while Prometheus cannot be read, the capacity checks
still run but usage-over-claim is not looked for, and its findings count is left out of /metrics (unknown,
not 0) and the report says `usage_checked: false`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from automator.dra.checks import check
from automator.dra.load import KINDS, DraInputError, Entry, load_api_objects, load_objects, read_objects
from automator.dra.metrics import DraCheckMetrics, DraCollector
from automator.dra.model import (
    USAGE_OVER_CLAIM,
    CheckOutcome,
    EventOutcome,
    Report,
)
from automator.dra.report import EVENT_COMPONENT, events, to_json
from automator.objects.cache import RecordCache
from automator.ports import ContainerUsage, KubernetesUnavailable, PrometheusUnavailable
from steward_common.gc_pause import gc_paused

log = logging.getLogger(__name__)

JsonObj = dict[str, Any]

# A report older than this many intervals is no longer exported or served (the check stopped working).
STALE_INTERVALS = 3
# Events: at most this many writes per check (a cluster with many orphaned claims must not flood
# the API server; the rest follow in the next checks), and a finding that persists is written again after
# this long (core/v1 Events expire after an hour by default; the same name answers 409 while one exists).
MAX_EVENTS_PER_CHECK = 50
EVENT_REPEAT_SECONDS = 3600.0


class DraCluster(Protocol):
    """What the check needs from the cluster (kube/dra.py DraKubernetesAdapter, SnapshotDraCluster)."""

    def dra_available(self) -> bool: ...

    def dra_objects(self) -> list[JsonObj]: ...

    def dra_event(self, body: JsonObj) -> bool: ...


class DraUsage(Protocol):
    """Measured GPU memory per container and GPU (automator/prom.py DraMemoryReader)."""

    def container_memory(self) -> list[ContainerUsage]: ...


class SnapshotDraCluster:
    """The DRA objects of a `--cluster-snapshot` file, re-read every check; writes no Event (dry-run)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _objects(self) -> list[JsonObj]:
        try:
            return [dict(obj) for obj, _ in read_objects(self.path) if obj.get("kind") in KINDS]
        except DraInputError as e:
            raise KubernetesUnavailable(f"snapshot {self.path}: {e}") from e

    def dra_available(self) -> bool:
        return any(o.get("kind") != "Pod" and o.get("kind") != "Node" for o in self._objects())

    def dra_objects(self) -> list[JsonObj]:
        return self._objects()

    def dra_event(self, body: JsonObj) -> bool:
        raise RuntimeError("snapshot mode is dry-run only: refusing to write an Event")


@dataclass
class CheckStatus:
    """One check: when, how it ended, and its report (None unless it read the cluster)."""

    at: datetime
    result: CheckOutcome
    reason: str = ""
    report: Report | None = None
    usage_checked: bool = False
    usage_reason: str = ""
    usage_entries: int = 0
    events_written: int = 0
    events_deferred: int = 0
    duration_seconds: float = 0.0


def _now() -> datetime:
    return datetime.now(UTC)


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass
class DraCheckJob:
    cluster: DraCluster
    usage: DraUsage | None
    interval: float
    registry: CollectorRegistry
    is_leader: Callable[[], bool] = lambda: True
    clock: Callable[[], datetime] = _now
    write_events: bool = True
    instance: str = EVENT_COMPONENT
    max_events_per_check: int = MAX_EVENTS_PER_CHECK
    event_repeat_seconds: float = EVENT_REPEAT_SECONDS
    # The previous pass's records by object version (automator/objects/cache.py): only for a cluster whose
    # resourceVersions come from an API server (the Kubernetes adapter), never for a file.
    record_cache: RecordCache[Entry] | None = None
    last: CheckStatus | None = None  # the last check, whatever its result
    last_ok: CheckStatus | None = None  # the last check that read the cluster
    _announced: dict[str, datetime] = field(default_factory=dict)  # Event name -> when written
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.metrics = DraCheckMetrics(self.registry)
        self.registry.register(DraCollector(self.exported_report, self.unchecked_kinds))

    # --- one check -----------------------------------------------------------------------------------

    def run_once(self) -> CheckStatus | None:
        """One check if this replica leads; None otherwise (a standby reads and writes nothing)."""
        if not self.is_leader():
            return None
        started = time.monotonic()
        now = self.clock()
        try:
            status = self._check(now)
        except KubernetesUnavailable as e:
            status = CheckStatus(now, CheckOutcome.KUBERNETES_ERROR, str(e))
        except Exception as e:  # a bug must not stop the service's other work; it is logged and counted
            log.exception("DRA check failed")
            status = CheckStatus(now, CheckOutcome.ERROR, f"{type(e).__name__}: {e}")
        status.duration_seconds = time.monotonic() - started
        self._record(status)
        return status

    def _check(self, now: datetime) -> CheckStatus:
        if not self.cluster.dra_available():
            return CheckStatus(
                now, CheckOutcome.DRA_UNAVAILABLE, "the API server does not serve resource.k8s.io/v1"
            )
        objects = self.cluster.dra_objects()
        status = CheckStatus(now, CheckOutcome.OK)
        usage: list[ContainerUsage] = []
        if self.usage is None:
            status.usage_reason = "no Prometheus configured"
        else:
            try:
                usage = self.usage.container_memory()
                status.usage_checked = True
                status.usage_entries = len(usage)
            except PrometheusUnavailable as e:
                status.usage_reason = f"measured GPU memory unavailable: {e.reason}"
        with gc_paused():
            if self.record_cache is None:
                records = load_objects((obj, "API") for obj in objects)
            else:
                records = load_api_objects(objects, self.record_cache)
            status.report = check(records, usage)
        uuids = {d.uuid for d in records.devices.values() if d.uuid is not None}
        if status.usage_checked and uuids and not any(u.gpu_uuid in uuids for u in usage):
            # Not one reading for a DRA GPU: nothing was measured there, which is not "nobody is over".
            status.usage_checked = False
            status.usage_reason = (
                f"no measured GPU memory for any of the {len(uuids)} DRA devices' uuids (is the exporter "
                "scraped on the DRA nodes and are the recording rules loaded?)"
            )
        del objects, records
        if self.write_events:
            self._write_events(status, now)
        return status

    def _record(self, status: CheckStatus) -> None:
        self.metrics.checks.labels(result=status.result.value).inc()
        self.metrics.duration.observe(status.duration_seconds)
        report = status.report
        with self._lock:
            self.last = status
            if report is not None:
                self.last_ok = status
        if report is not None:
            self.metrics.last_success.set(status.at.timestamp())
            self.metrics.usage_checked.set(1 if status.usage_checked else 0)
            counts = f"{len(report.findings)} findings on {len(report.devices)} devices"
            usage = "" if status.usage_checked else f"; usage-over-claim not checked ({status.usage_reason})"
            log.info("DRA check: %s%s (%.2f s)", counts, usage, status.duration_seconds)
        elif status.result is CheckOutcome.DRA_UNAVAILABLE:
            log.info("DRA check: %s; nothing to check", status.reason)
        else:
            log.warning("DRA check %s: %s", status.result.value, status.reason)

    # --- Events: once per finding, not once per check ----------------------------------------------------

    def _write_events(self, status: CheckStatus, now: datetime) -> None:
        assert status.report is not None
        bodies = {body["metadata"]["name"]: body for body in events(status.report, now, self.instance)}
        for name in [n for n in self._announced if n not in bodies]:
            del self._announced[name]  # the finding is gone: if it comes back, it is news again
        for name, body in bodies.items():
            written = self._announced.get(name)
            if written is not None and (now - written).total_seconds() < self.event_repeat_seconds:
                continue
            if status.events_written >= self.max_events_per_check or not self.is_leader():
                status.events_deferred += 1  # a replica that lost the lease writes nothing more
                continue
            try:
                created = self.cluster.dra_event(body)
            except KubernetesUnavailable as e:
                # Not retried in this check: the API server is unwell, the next check tries again.
                self.metrics.events.labels(result=EventOutcome.ERROR.value).inc()
                log.warning("DRA check: Event not written: %s", e)
                status.events_deferred += 1
                break
            outcome = EventOutcome.CREATED if created else EventOutcome.EXISTS
            self.metrics.events.labels(result=outcome.value).inc()
            self._announced[name] = now
            status.events_written += 1
        if status.events_deferred:
            log.info("DRA check: %d Events left for the next check", status.events_deferred)

    # --- what is exported and served -----------------------------------------------------------------

    def _fresh(self) -> CheckStatus | None:
        with self._lock:
            ok = self.last_ok
        if ok is None:
            return None
        if (self.clock() - ok.at).total_seconds() > STALE_INTERVALS * self.interval:
            return None
        return ok

    def exported_report(self) -> Report | None:
        """The report /metrics shows: the last successful check's, unless it is stale."""
        fresh = self._fresh()
        return None if fresh is None else fresh.report

    def unchecked_kinds(self) -> frozenset[str]:
        fresh = self._fresh()
        return frozenset() if fresh is None or fresh.usage_checked else frozenset({USAGE_OVER_CLAIM})

    def report_json(self) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body) of the JSON endpoint: `dra-check --output json`'s document plus the check's
        status. 503 with `findings` and `devices` null when there is no fresh report to show."""
        with self._lock:
            last = self.last
        fresh = self._fresh()
        leader = self.is_leader()
        body: dict[str, Any] = {"findings": None, "devices": None}
        if fresh is not None and fresh.report is not None:
            body = to_json(fresh.report)
        body["leader"] = leader
        body["interval_seconds"] = self.interval
        if last is None:
            body.update(result="no check yet" if leader else "standby", reason="", timestamp=None)
            if not leader:
                body["reason"] = "not the leader: the leader runs the DRA check"
        else:
            body.update(result=last.result.value, reason=last.reason, timestamp=_rfc3339(last.at))
        if fresh is not None:
            body.update(
                checked_at=_rfc3339(fresh.at),
                usage_checked=fresh.usage_checked,
                usage_reason=fresh.usage_reason,
                usage_entries=fresh.usage_entries,
            )
            return 200, body
        if last is not None and last.result is CheckOutcome.OK:
            body["reason"] = f"the last successful check is older than {STALE_INTERVALS} intervals"
        return 503, body
