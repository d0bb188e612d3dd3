"""Leader election over a coordination.k8s.io/v1 Lease, every call with a timeout (`gpu-automator run`).

`LeaderElector.is_leader` fences the writes: the replica leads only while its last successful renewal is
younger than the renew deadline (docs/automator.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from automator.objects.keys import JsonObj

log = logging.getLogger(__name__)

# The writes' client timeout, as a share of the write margin (lease duration - renew deadline).
WRITE_TIMEOUT_SHARE = 0.8


class NotHolding(Exception):
    """This replica does not hold the Lease: nothing may be written as its holder."""


def _micro_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """A Lease-based election in a daemon thread, every call with a timeout; `is_leader` fences the writes.

    The replica is leader only while its last successful renewal (timed from the start of the call) is
    younger than renew_deadline, whatever its thread is doing: a renewal that hangs makes it a follower
    before the lease (lease_duration > renew_deadline) can go to another replica. Another holder's lease is
    judged expired by this replica's own monotonic clock (lease_duration after the record last changed),
    so clock skew between replicas does not matter. Updates use the Lease's resourceVersion.
    """

    def __init__(
        self,
        api: client.ApiClient,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15,
        renew_deadline: float = 10,
        retry_period: float = 2,
        on_change: Callable[[bool], None] | None = None,
        request_timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        annotations: Callable[[], Mapping[str, str]] | None = None,
        on_acquire: Callable[[Mapping[str, str]], None] | None = None,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.coordination = client.CoordinationV1Api(api)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration, self.renew_deadline, self.retry_period = (
            lease_duration,
            renew_deadline,
            retry_period,
        )
        # Each call must end well within the renew deadline.
        self.request_timeout = request_timeout or max(0.5, (renew_deadline - retry_period) / 2)
        self._clock = clock
        self._renewed_at: float | None = None
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._leading = False
        self._stopped = threading.Event()
        self._on_change = on_change
        # What the holder keeps on the Lease (written at each renewal), and who reads it when this
        # process takes the Lease: before its first pass as leader.
        self._annotations = annotations
        self._on_acquire = on_acquire
        self._thread: threading.Thread | None = None
        # One Lease update at a time: a renewal and a record made before an eviction (record()).
        self._writing = threading.Lock()

    @property
    def is_leader(self) -> bool:
        renewed = self._renewed_at
        return (
            not self._stopped.is_set()
            and renewed is not None
            and self._clock() - renewed < self.renew_deadline
        )

    @property
    def holder(self) -> str | None:
        """Who leads, as this replica last read the Lease: itself while it leads, else the holder it last
        saw, while that record is younger than the lease duration by this replica's clock; None when no
        replica is known to hold it."""
        if self.is_leader:
            return self.identity
        observed = self._observed
        if observed is None or not observed[0] or observed[0] == self.identity:
            return None
        duration = float(observed[2] or self.lease_duration)
        return str(observed[0]) if self._clock() - self._observed_at < duration else None

    @property
    def write_margin(self) -> float:
        """The longest a write may take: leadership is checked before it (renewed less than renew_deadline
        ago), and another replica may take the lease lease_duration after the last renewal."""
        return self.lease_duration - self.renew_deadline

    @property
    def write_timeout(self) -> float:
        """The client timeout of every write made while leading (evictions, patches, Events, the Lease
        record): shorter than the write margin, so it ends before another replica may take the lease."""
        return min(self.request_timeout, WRITE_TIMEOUT_SHARE * self.write_margin)

    def record(self, annotations: Mapping[str, str]) -> None:
        """Write these annotations on the Lease now, as its holder, before an eviction is sent: raises
        (NotHolding, or the API's error) when they are not known written; the caller then sends nothing."""
        with self._writing:
            if not self.is_leader:
                raise NotHolding(f"{self.identity} does not hold lease {self.namespace}/{self.name}")
            t = self.write_timeout
            resp = self.coordination.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=t
            )
            lease: JsonObj = json.loads(resp.data)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                raise NotHolding(f"lease {self.namespace}/{self.name} is held by another replica")
            meta = lease.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
            self.coordination.replace_namespaced_lease(
                self.name, self.namespace, lease, _preload_content=False, _request_timeout=t
            )

    def _set(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        log.info(
            "%s %s lease %s/%s", self.identity, "holds" if leading else "lost", self.namespace, self.name
        )
        if self._on_change is not None:
            self._on_change(leading)

    def _record(self, now: datetime, lease: JsonObj | None) -> JsonObj:
        spec = (lease or {}).get("spec") or {}
        mine = spec.get("holderIdentity") == self.identity
        record: JsonObj = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": spec.get("acquireTime") if mine and spec.get("acquireTime") else _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if mine or lease is None else 1),
        }
        return record

    def try_acquire_or_renew(self) -> bool:
        """One round: read the Lease, then create, take over or renew it. True when this replica holds it."""
        with self._writing:
            return self._acquire_or_renew()

    def _acquire_or_renew(self) -> bool:
        started = self._clock()
        now = datetime.now(UTC)
        t = self.request_timeout
        try:
            resp = self.coordination.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=t
            )
            lease: JsonObj | None = json.loads(resp.data)
        except ApiException as e:
            if e.status != 404:
                raise
            lease = None
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace, "annotations": self._kept()},
                "spec": self._record(now, None),
            }
            self.coordination.create_namespaced_lease(
                self.namespace, body, _preload_content=False, _request_timeout=t
            )
            self._acquired({})
            self._renewed_at = started
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        observed = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if observed != self._observed:
            self._observed, self._observed_at = observed, started
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and started - self._observed_at < duration:
            return False  # held by another replica whose lease has not expired (by our clock)
        found = dict((lease.get("metadata") or {}).get("annotations") or {})
        if not self.is_leader:
            self._acquired(found)  # taking over, or back after a restart: read what the holder kept
        lease["spec"] = self._record(now, lease)
        lease.setdefault("metadata", {})["annotations"] = {**found, **self._kept()}
        self.coordination.replace_namespaced_lease(
            self.name, self.namespace, lease, _preload_content=False, _request_timeout=t
        )
        self._renewed_at = started
        return True

    def _kept(self) -> dict[str, str]:
        return dict(self._annotations()) if self._annotations is not None else {}

    def _acquired(self, found: Mapping[str, str]) -> None:
        if self._on_acquire is not None:
            self._on_acquire({str(k): str(v) for k, v in found.items()})

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                self.try_acquire_or_renew()
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as e:
                log.warning("lease %s/%s: %s", self.namespace, self.name, e)
            except Exception:  # the election must outlive anything
                log.exception("leader election round failed")
            self._set(self.is_leader)
            self._stopped.wait(self.retry_period)
        self._set(False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop acting now; the lease expires, it is not released."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout)
