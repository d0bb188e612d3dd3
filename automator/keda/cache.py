"""The values KEDA reads, kept fresh in the background (pure: standard library threads only).

A refresh runs one query per (signal base, window) asked about recently and one pod list per namespace,
whatever the number of workloads: KEDA's many small requests are answered from memory. Only a question
about a new (base, window) or namespace waits for Prometheus or the API: its first fetch runs in a small
pool of its own, one per key (never behind a global lock), and the question waits for it at most
`first_wait_seconds` (under KEDA's own timeout), then answers "warming up" (503) while the fetch goes on.
This is the on-demand mode, used only when the cluster has no ScaledObject API (automator/keda/table.py
answers the declared questions otherwise), and every bound holds under hostile questions: both tables are
capped, and an entry asked within the last refresh is never dropped for a new one (the new one answers
warming_up); first fetches wait in a bounded queue (full: warming_up, nothing queued), and a queued fetch
whose entry was dropped never runs; each client may add a few new entries per refresh; each entry keeps its
own errors (one malformed answer never stops the refresh of the others); a workload's availability series
is kept while it was asked within the alert's `for:` window.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass
from typing import Any

from automator.keda.metrics import AVAILABILITY_ALERT_SECONDS, MAX_WORKLOAD_SERIES, KedaMetrics
from automator.keda.request import Question, Workload
from automator.keda.signals import Base, query
from automator.keda.values import NoValue, Reading, Value, compute, parse
from automator.keda.workloads import Namespace, UnknownWorkload, resolve
from automator.ports import KubernetesUnavailable, PrometheusUnavailable

log = logging.getLogger(__name__)

QueryFn = Callable[[str], Sequence[Mapping[str, Any]]]  # raises PrometheusUnavailable
NamespaceFn = Callable[[str], Namespace]  # raises KubernetesUnavailable


@dataclass(frozen=True)
class CacheConfig:
    refresh_seconds: float = 15.0
    max_age_seconds: float = 120.0  # data older than this is no value (503)
    pod_grace_seconds: float = 120.0  # a pod started this recently may have no data yet
    forget_seconds: float = 600.0  # stop refreshing what nobody asked about for this long
    max_queries: int = 32  # distinct (base, window) pairs kept (the least recently asked is dropped)
    max_namespaces: int = 100  # namespaces whose pods are kept (the least recently asked is dropped)
    first_wait_seconds: float = 2.0  # a new question waits this long for its first fetch, then 503
    fetch_workers: int = 4  # threads running first fetches
    max_pending_first: int = 16  # first fetches queued or running at once (past it: warming_up, not queued)
    client_new_keys: int = 8  # new entries one client address may add per refresh period
    series_keep_seconds: float = AVAILABILITY_ALERT_SECONDS  # a series asked this recently is kept


MAX_CLIENTS = 4096  # client addresses counted per refresh period (past it, unknown ones add nothing)


class Refused(NoValue):
    """A new entry refused to keep the bounds (503 warming_up); `why` counts it."""

    def __init__(self, why: str, message: str) -> None:
        super().__init__("warming_up", message)
        self.why = why


@dataclass
class _Slot:
    last_asked: float
    dropped: bool = False  # no longer in its table: a queued first fetch of it never runs
    data: Any = None  # Reading or Namespace
    fetched_at: float | None = None  # wall clock of the last success
    error: str | None = None  # the last attempt's failure, None after a success
    pending: Future[None] | None = None  # the first fetch, while it runs


@dataclass(frozen=True)
class Answer:
    question: Question
    value: Value
    query: str


class KedaCache:
    def __init__(
        self,
        run_query: QueryFn,
        list_namespace: NamespaceFn,
        config: CacheConfig | None = None,
        metrics: KedaMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._query, self._list = run_query, list_namespace
        self.config = config or CacheConfig()
        self.metrics = metrics
        self.clock = clock
        # Oldest asked first: the front is what a full table drops.
        self._readings: OrderedDict[tuple[Base, int], _Slot] = OrderedDict()
        self._namespaces: OrderedDict[str, _Slot] = OrderedDict()
        self._workloads: OrderedDict[tuple[str, str], float] = OrderedDict()  # series -> last asked
        self._new_keys: dict[str, int] = {}  # client address -> entries added this refresh period
        self._pending = 0  # first fetches queued or running
        self._lock = threading.Lock()  # guards the two tables and the slots' `pending`; never held on I/O
        self._first = ThreadPoolExecutor(self.config.fetch_workers, thread_name_prefix="keda-first-fetch")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        if metrics is not None:
            metrics.cache_age.set_function(self.oldest_age)

    # --- reading ---------------------------------------------------------------------------------

    @property
    def refresh_seconds(self) -> float:
        return self.config.refresh_seconds

    def target_of(self, scaled_object: tuple[str, str]) -> tuple[str, str] | None:
        return None  # no ScaledObject is read in on-demand mode

    @property
    def declared(self) -> bool:
        return False

    def answer(
        self,
        q: Question,
        waiters: threading.BoundedSemaphore | None = None,
        scaled_object: tuple[str, str] | None = None,  # unused: nothing is declared in on-demand mode
        client: str | None = None,
    ) -> Answer:
        """The workload's value now; NoValue (503) when data is missing, stale, unreachable or still being
        fetched for the first time; UnknownWorkload (404) for a Deployment or StatefulSet that does not
        exist. `waiters` bounds the callers of one listener that may wait on a first fetch at once: past
        it a question answers "warming up" at once, so the listener's threads stay free."""
        self.ensure_started()
        try:
            answer = self._answer(q, waiters, client)
        except Refused as e:
            if self.metrics is not None:
                self.metrics.ondemand_refusals.labels(e.why).inc()
            raise  # what was refused was never stored: no series either
        except NoValue:
            self._available(q.workload, 0.0)
            raise
        except UnknownWorkload:
            self._available(q.workload, None)
            raise
        self._available(q.workload, 1.0)
        return answer

    def _available(self, workload: Workload, value: float | None) -> None:
        """The workload's workload_available series (None: it has none, the workload does not exist)."""
        if self.metrics is None:
            return
        key = (workload.namespace, f"{workload.kind}/{workload.name}")
        gauge = self.metrics.workload_available
        with self._lock:
            if value is None:
                if self._workloads.pop(key, None) is not None:
                    gauge.remove(*key)
                return
            now = self.clock()
            if key not in self._workloads and len(self._workloads) >= MAX_WORKLOAD_SERIES:
                oldest, asked = next(iter(self._workloads.items()))
                if now - asked <= self.config.series_keep_seconds:
                    return  # every series is watched by its alert: the new workload gets none
                del self._workloads[oldest]
                gauge.remove(*oldest)
            self._workloads[key] = now
            self._workloads.move_to_end(key)
            gauge.labels(*key).set(value)

    def _answer(self, q: Question, waiters: threading.BoundedSemaphore | None, client: str | None) -> Answer:
        name = q.workload.namespace
        key = (q.signal.base, q.window_seconds)
        ns_slot = self._slot(self._namespaces, name, self.config.max_namespaces, client)
        reading_slot = self._slot(self._readings, key, self.config.max_queries, client)
        try:
            first = [
                f
                for f in (
                    self._start(ns_slot, lambda s: self._fetch_namespace(name, s)),
                    self._start(reading_slot, lambda s: self._fetch_reading(key, s)),
                )
                if f is not None
            ]
        except Refused:
            self._discard(self._namespaces, name, ns_slot)
            self._discard(self._readings, key, reading_slot)
            raise
        if first:
            self._wait(first, waiters)
        ns = self._namespace_of(name, ns_slot)
        reading = self._reading_of(reading_slot)
        pods = resolve(q.workload, ns)
        value = compute(
            q.signal,
            q.aggregation,
            pods,
            reading,
            self.clock(),
            self.config.max_age_seconds,
            self.config.pod_grace_seconds,
        )
        return Answer(q, value, reading.query)

    def _slot(self, table: OrderedDict[Any, _Slot], key: Any, limit: int, client: str | None) -> _Slot:
        """The key's slot; a new one only within the client's budget, and never by dropping a slot asked
        within the last refresh (Refused: warming_up, nothing stored)."""
        now = self.clock()
        with self._lock:
            slot = table.get(key)
            if slot is not None:
                slot.last_asked = now
                table.move_to_end(key)
                return slot
            if client is not None:
                added = self._new_keys.get(client)
                if added is None and len(self._new_keys) >= MAX_CLIENTS:
                    raise Refused("client_limit", "too many clients asked new questions in this refresh")
                if (added or 0) >= self.config.client_new_keys:
                    raise Refused("client_limit", "this client asked too many new questions in this refresh")
            while len(table) >= limit:
                oldest_key, oldest = next(iter(table.items()))
                if now - oldest.last_asked <= self.config.refresh_seconds:
                    raise Refused("table_full", "every kept question was asked within the last refresh")
                del table[oldest_key]  # the least recently asked: its refreshes stop
                oldest.dropped = True
            if client is not None:
                self._new_keys[client] = self._new_keys.get(client, 0) + 1
            slot = table[key] = _Slot(last_asked=now)
            return slot

    def _discard(self, table: OrderedDict[Any, _Slot], key: Any, slot: _Slot) -> None:
        """Remove a slot never fetched (its first fetch was refused): a refused question stores nothing."""
        with self._lock:
            if table.get(key) is slot and slot.pending is None and slot.data is None and slot.error is None:
                del table[key]
                slot.dropped = True

    def _start(self, slot: _Slot, fetch: Callable[[_Slot], None]) -> Future[None] | None:
        """The slot's first fetch (started here unless it runs already); None once it has data or an error.
        Refused when the queue of first fetches is full: nothing is queued."""
        with self._lock:
            if slot.data is not None or slot.error is not None:
                return None
            if slot.pending is None:
                if self._pending >= self.config.max_pending_first:
                    raise Refused("queue_full", "too many questions are being fetched for the first time")
                self._pending += 1
                slot.pending = self._first.submit(self._run_first, slot, fetch)
            return slot.pending

    def _run_first(self, slot: _Slot, fetch: Callable[[_Slot], None]) -> None:
        try:
            # Dropped from its table while queued: nobody reads it. A refresh may have filled it meanwhile.
            if not slot.dropped and slot.data is None and slot.error is None:
                fetch(slot)
        finally:
            with self._lock:
                slot.pending = None
                self._pending -= 1

    def _wait(self, pending: list[Future[None]], waiters: threading.BoundedSemaphore | None) -> None:
        if waiters is not None and not waiters.acquire(blocking=False):
            return  # every waiting place of this listener is taken: answer now (warming up)
        try:
            wait_for(pending, timeout=self.config.first_wait_seconds)
        finally:
            if waiters is not None:
                waiters.release()

    def _namespace_of(self, name: str, slot: _Slot) -> Namespace:
        if slot.data is None and slot.error is None:
            raise NoValue("warming_up", f"the pods of namespace {name} are being listed for the first time")
        if slot.data is None:
            raise NoValue("kubernetes_unavailable", f"cannot list the pods of namespace {name}: {slot.error}")
        if slot.error is not None and self._age(slot) > self.config.max_age_seconds:
            raise NoValue("kubernetes_unavailable", f"pods of namespace {name} are stale: {slot.error}")
        data: Namespace = slot.data
        return data

    def _reading_of(self, slot: _Slot) -> Reading:
        if slot.data is None and slot.error is None:
            raise NoValue("warming_up", "the signal and window are being queried for the first time")
        if slot.error is not None:
            # The last refresh failed: fail loudly now rather than serve an answer that may be old.
            raise NoValue("prometheus_unavailable", f"Prometheus query failed: {slot.error}")
        data: Reading = slot.data
        return data

    def _age(self, slot: _Slot) -> float:
        return self.clock() - slot.fetched_at if slot.fetched_at is not None else float("inf")

    def oldest_age(self) -> float:
        with self._lock:
            slots = [*self._readings.values(), *self._namespaces.values()]
        ages = [self._age(s) for s in slots]
        return max(ages) if ages else 0.0

    # --- refreshing ------------------------------------------------------------------------------

    def _fetch_reading(self, key: tuple[Base, int], slot: _Slot) -> None:
        expr = query(*key)
        try:
            reading = parse(self._query(expr), expr)
        except Exception as e:  # PrometheusUnavailable, or a malformed answer: this slot's error only
            slot.error = (
                str(e) if isinstance(e, PrometheusUnavailable) else f"unreadable answer ({type(e).__name__})"
            )
            if self.metrics is not None:
                self.metrics.prometheus_errors.inc()
            log.warning("KEDA query %s %ds failed: %s", key[0], key[1], e)
            return
        slot.data, slot.fetched_at, slot.error = reading, self.clock(), None

    def _fetch_namespace(self, name: str, slot: _Slot) -> None:
        try:
            ns = self._list(name)
        except Exception as e:  # KubernetesUnavailable, or a malformed answer: this slot's error only
            slot.error = (
                str(e) if isinstance(e, KubernetesUnavailable) else f"unreadable answer ({type(e).__name__})"
            )
            if self.metrics is not None:
                self.metrics.kubernetes_errors.inc()
            log.warning("KEDA pods of namespace %s: %s", name, e)
            return
        slot.data, slot.fetched_at, slot.error = ns, self.clock(), None

    def _forget(self, table: OrderedDict[Any, _Slot], now: float) -> None:
        for key in [k for k, s in table.items() if now - s.last_asked > self.config.forget_seconds]:
            table.pop(key).dropped = True

    def refresh(self) -> bool:
        """One refresh of everything asked about recently; True when every query and list succeeded."""
        start = time.monotonic()
        now = self.clock()
        with self._lock:
            self._forget(self._readings, now)
            self._forget(self._namespaces, now)
            self._new_keys.clear()  # a new refresh period: every client may add its few new entries again
            keep = max(self.config.forget_seconds, self.config.series_keep_seconds)
            for wl in [k for k, t in self._workloads.items() if now - t > keep]:
                del self._workloads[wl]
                if self.metrics is not None:
                    self.metrics.workload_available.remove(*wl)
            readings = list(self._readings.items())
            namespaces = list(self._namespaces.items())
        for key, slot in readings:
            self._fetch_reading(key, slot)
        for name, ns_slot in namespaces:
            self._fetch_namespace(name, ns_slot)
        ok = all(s.error is None for _, s in readings) and all(s.error is None for _, s in namespaces)
        if self.metrics is not None:
            self.metrics.refresh_duration.observe(time.monotonic() - start)
            self.metrics.cached_queries.set(len(readings))
            self.metrics.cached_namespaces.set(len(namespaces))
            if ok:
                self.metrics.last_refresh.set(self.clock())
        return ok

    def _loop(self) -> None:
        while not self._stop.wait(self.config.refresh_seconds):
            try:
                self.refresh()
            except Exception:  # a bug must not stop the refresh: answers would only go stale (503)
                log.exception("KEDA refresh failed")

    def ensure_started(self) -> None:
        """Start the background refresh once (on the first question: no thread for a service nobody asks)."""
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._loop, name="keda-refresh", daemon=True)
                self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._first.shutdown(wait=False, cancel_futures=True)
        if self._thread is not None:
            self._thread.join(timeout)
