"""The declared mode: every answer computed once per refresh from the questions the ScaledObjects declare
(pure: standard library only; the sources are passed in).

A refresh lists the ScaledObjects, runs one Prometheus query per distinct (signal base, window) declared,
reads the pods of the declared namespaces from one listing, computes every declared question and swaps the
new table in. A request only reads the table: a question nobody declared causes no list, no query and no
memory. Each query's and each question's failure stays on what it concerns: one malformed answer never
stops the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from automator.keda.cache import Answer
from automator.keda.declared import (
    DEFAULT_HOSTS,
    Declarations,
    Key,
    ObjectName,
    command,
    declarations,
    describe,
    key_of,
)
from automator.keda.metrics import KedaMetrics
from automator.keda.request import Question
from automator.keda.signals import Base, query
from automator.keda.values import NoValue, Reading, Value, compute, parse
from automator.keda.workloads import Namespace, UnknownWorkload, resolve
from automator.ports import KubernetesUnavailable, PrometheusUnavailable

log = logging.getLogger(__name__)

QueryFn = Callable[[str], Sequence[Mapping[str, Any]]]  # raises PrometheusUnavailable


class ScaledObjectsAbsent(Exception):
    """The ScaledObject API is not served (KEDA not installed) or not allowed (RBAC): on-demand mode."""


class DeclaredSource(Protocol):
    def scaled_objects(self) -> Iterable[Mapping[str, Any]]:
        """Every ScaledObject in scope; ScaledObjectsAbsent, or KubernetesUnavailable on another failure."""
        ...

    def namespaces(self, names: frozenset[str]) -> Mapping[str, Namespace]:
        """The running pods and workloads of these namespaces, from one listing (KubernetesUnavailable)."""
        ...


class NotDeclared(LookupError):
    """No ScaledObject declares the question (HTTP 404 not_declared, gRPC NOT_FOUND)."""


@dataclass(frozen=True)
class TableConfig:
    max_age_seconds: float = 120.0
    pod_grace_seconds: float = 120.0
    refresh_seconds: float = 15.0
    advertised_hosts: tuple[str, ...] = DEFAULT_HOSTS


Result = tuple[Value, str] | NoValue | UnknownWorkload  # (value, query) or why there is none


@dataclass(frozen=True)
class Table:
    declared: Declarations
    results: Mapping[Key, Result]
    at: float  # wall clock of the refresh
    queries: int  # Prometheus queries the refresh ran
    errors: int  # queries, lists and questions that failed


@dataclass
class _Pods:
    namespaces: Mapping[str, Namespace] = field(default_factory=dict)
    at: float | None = None  # wall clock of the last successful listing
    error: str | None = None


class DeclaredTable:
    def __init__(
        self,
        run_query: QueryFn,
        config: TableConfig | None = None,
        metrics: KedaMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._query = run_query
        self.config = config or TableConfig()
        self.metrics = metrics
        self.clock = clock
        # Replaced whole by each refresh: a request reads one consistent table.
        self.table: Table | None = None
        self._declared = Declarations()
        self._pods = _Pods()
        self._problems: tuple[str, ...] = ()
        self._lock = threading.Lock()  # one refresh at a time; never taken by a request
        self._series: set[tuple[str, str]] = set()

    # --- reading ---------------------------------------------------------------------------------

    def answer(self, q: Question, scaled_object: ObjectName | None = None) -> Answer:
        """The declared answer; NoValue (503) while the table is not built, for a ScaledObject listed since
        the last refresh, or when the question has no value; NotDeclared (404); UnknownWorkload (404)."""
        table = self.table
        if table is None:
            raise NoValue("warming_up", "the ScaledObjects have not been read yet")
        key = key_of(q)
        result = table.results.get(key)
        if result is None:
            if scaled_object is not None and scaled_object not in table.declared.scaled_objects:
                raise NoValue(
                    "warming_up",
                    f"ScaledObject {scaled_object[0]}/{scaled_object[1]} is read at the next refresh "
                    f"(every {self.config.refresh_seconds:g} s)",
                )
            raise NotDeclared(self._missing(key, scaled_object))
        if isinstance(result, NoValue):
            raise NoValue(result.reason, result.message)  # a new one per request: threads share the table
        age = self.clock() - table.at
        if age > self.config.max_age_seconds:  # the refresh stopped: an old answer is no answer
            raise NoValue("stale", f"the answers were computed {age:.0f} s ago (no refresh since)")
        if isinstance(result, UnknownWorkload):
            raise UnknownWorkload(str(result))
        value, expr = result
        return Answer(q, value, expr)

    def _missing(self, key: Key, scaled_object: ObjectName | None) -> str:
        asker = f"ScaledObject {scaled_object[0]}/{scaled_object[1]}" if scaled_object else "no ScaledObject"
        return (
            f"{asker} in namespace {key[0]} declares {describe(key)}: create or fix the ScaledObject "
            f"whose trigger asks this (it is read at the next refresh), e.g. the one `{command(key)}` prints"
        )

    def target_of(self, scaled_object: ObjectName) -> tuple[str, str] | None:
        """The ScaledObject's scale target (kind, name) as last listed."""
        table = self.table
        return table.declared.targets.get(scaled_object) if table is not None else None

    def age(self) -> float:
        table = self.table
        return self.clock() - table.at if table is not None else 0.0

    # --- refreshing ------------------------------------------------------------------------------

    def refresh(self, source: DeclaredSource) -> Table:
        """One refresh; ScaledObjectsAbsent when the ScaledObject API is not there (the caller switches
        to on-demand mode). A failed ScaledObject list keeps the last declarations; before any list has
        succeeded it raises KubernetesUnavailable and publishes no table (an empty one would answer every
        question not_declared)."""
        with self._lock:
            return self._refresh(source)

    def _refresh(self, source: DeclaredSource) -> Table:
        start = time.monotonic()
        errors = 0
        try:
            self._declared = declarations(source.scaled_objects(), self.config.advertised_hosts)
        except KubernetesUnavailable as e:
            self._count("kubernetes_errors")
            if self.table is None:
                raise
            errors += 1
            log.warning("KEDA: cannot list ScaledObjects (the last ones listed still count): %s", e)
        declared = self._declared
        if declared.problems != self._problems:
            for problem in declared.problems:
                log.warning("KEDA: %s", problem)
            self._problems = declared.problems
        readings, failed = self._readings(declared)
        errors += failed
        pods_error = self._list_pods(source, declared)
        errors += pods_error is not None
        now = self.clock()
        results: dict[Key, Result] = {}
        for key, d in declared.questions.items():
            results[key] = self._result(d.question, readings, pods_error, now)
        table = Table(declared, results, now, len(readings), errors)
        self.table = table
        self._publish(table, time.monotonic() - start)
        return table

    def _readings(self, declared: Declarations) -> tuple[dict[tuple[Base, int], Reading | str], int]:
        pairs = sorted(
            {(d.question.signal.base, d.question.window_seconds) for d in declared.questions.values()}
        )
        readings: dict[tuple[Base, int], Reading | str] = {}
        failed = 0
        for base, window in pairs:
            expr = query(base, window)
            try:
                readings[(base, window)] = parse(self._query(expr), expr)
            except PrometheusUnavailable as e:
                readings[(base, window)] = str(e)
            except Exception as e:  # a malformed answer fails its own pair only
                readings[(base, window)] = f"unreadable answer: {type(e).__name__}"
            if isinstance(readings[(base, window)], str):
                failed += 1
                self._count("prometheus_errors")
                log.warning("KEDA query %s %ds failed: %s", base, window, readings[(base, window)])
        return readings, failed

    def _list_pods(self, source: DeclaredSource, declared: Declarations) -> str | None:
        """Lists the declared namespaces' pods; on failure the last listing serves until it is too old."""
        names = frozenset(d.question.workload.namespace for d in declared.questions.values())
        try:
            found = source.namespaces(names) if names else {}
        except KubernetesUnavailable as e:
            self._count("kubernetes_errors")
            log.warning("KEDA: cannot list the declared namespaces' pods: %s", e)
            self._pods.error = str(e)
            return str(e)
        self._pods = _Pods({n: found[n] for n in names if n in found}, self.clock(), None)
        return None

    def _result(
        self,
        q: Question,
        readings: Mapping[tuple[Base, int], Reading | str],
        pods_error: str | None,
        now: float,
    ) -> Result:
        try:
            reading = readings[(q.signal.base, q.window_seconds)]
            if isinstance(reading, str):
                raise NoValue("prometheus_unavailable", f"Prometheus query failed: {reading}")
            pods = self._pods
            stale = pods.at is None or now - pods.at > self.config.max_age_seconds
            if pods_error is not None and stale:
                raise NoValue("kubernetes_unavailable", f"cannot list the pods: {pods_error}")
            ns = pods.namespaces.get(q.workload.namespace) or Namespace((), (), frozenset(), frozenset())
            value = compute(
                q.signal,
                q.aggregation,
                resolve(q.workload, ns),
                reading,
                now,
                self.config.max_age_seconds,
                self.config.pod_grace_seconds,
            )
            return value, reading.query
        except (NoValue, UnknownWorkload) as e:
            return e
        except Exception as e:  # a bug in one question must not stop the others: it has no value
            log.exception("KEDA: question %s failed", q.workload)
            return NoValue("no_data", f"the answer could not be computed ({type(e).__name__})")

    def forget(self) -> None:
        """Drop the table and its availability series (the ScaledObject API went away: on-demand mode)."""
        with self._lock:
            self.table = None
            if self.metrics is not None:
                for series in self._series:
                    self.metrics.workload_available.remove(*series)
            self._series = set()

    def _count(self, name: str) -> None:
        if self.metrics is not None:
            getattr(self.metrics, name).inc()

    def _publish(self, table: Table, seconds: float) -> None:
        m = self.metrics
        if m is None:
            return
        m.refresh_duration.observe(seconds)
        m.cached_queries.set(table.queries)
        m.cached_namespaces.set(len(self._pods.namespaces))
        m.declared_questions.set(len(table.results))
        m.declaration_problems.set(len(table.declared.problems))
        failing = sum(1 for r in table.results.values() if isinstance(r, Exception))
        m.declared_failing.set(failing)
        if table.errors == 0:
            m.last_refresh.set(table.at)
        # One availability series per declared workload: 1 when every question about it has a value.
        available: dict[tuple[str, str], float] = {}
        for key, result in table.results.items():
            series = (key[0], f"{key[1]}/{key[2]}")
            ok = 0.0 if isinstance(result, Exception) else 1.0
            available[series] = min(ok, available.get(series, 1.0))
        for series in self._series - set(available):
            m.workload_available.remove(*series)
        for series, value in available.items():
            m.workload_available.labels(*series).set(value)
        self._series = set(available)
