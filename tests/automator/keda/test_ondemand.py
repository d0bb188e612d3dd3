"""The on-demand mode (no ScaledObject API) made safe: bounded first-fetch queue, queued fetches of dropped
entries never run, recent entries never evicted, a per-client budget of new entries, errors kept per entry,
availability series kept while their alert may fire."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from automator.keda.cache import CacheConfig, KedaCache, Refused
from automator.keda.metrics import KedaMetrics
from automator.keda.request import question
from automator.keda.values import NoValue
from tests.automator.keda.fakes import NOW, FakePrometheus, cluster, fresh_result


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _cache(prom: Any, clock: Clock, **config: Any) -> KedaCache:
    cache = KedaCache(
        prom, cluster(), CacheConfig(refresh_seconds=15, **config), KedaMetrics(CollectorRegistry()), clock
    )
    cache.ensure_started = lambda: None  # type: ignore[method-assign]  # refreshes run by hand here
    return cache


def _q(window: str = "2m", namespace: str = "inference", workload: str = "deployment=api") -> Any:
    kind, _, name = workload.partition("=")
    return question({"namespace": namespace, kind: name, "signal": "gpu_utilization", "window": window})


def _refused(cache: KedaCache, why: str) -> float:
    assert cache.metrics is not None
    return float(cache.metrics.ondemand_refusals.labels(why)._value.get())


class Held(FakePrometheus):
    """Answers only once `go` is set: first fetches stay queued or running."""

    def __init__(self) -> None:
        super().__init__(fresh_result())
        self.go = threading.Event()

    def __call__(self, expr: str) -> Any:
        assert self.go.wait(30)
        return super().__call__(expr)


def test_the_first_fetch_queue_is_bounded_and_a_full_one_queues_nothing() -> None:
    prom, clock = Held(), Clock()
    cache = _cache(prom, clock, fetch_workers=1, max_pending_first=2, first_wait_seconds=0.5)
    try:
        for window in ("1m", "2m"):  # 1m's query holds the one worker, 2m's waits in the queue
            with pytest.raises(NoValue, match="first time"):
                cache.answer(_q(window))
        with pytest.raises(Refused):
            cache.answer(_q("3m"))
        assert _refused(cache, "queue_full") == 1
        assert len(cache._readings) == 2  # the refused window stored nothing
        prom.go.set()
        cache._first.shutdown(wait=True)
        assert len(prom.queries) == 2
    finally:
        prom.go.set()
        cache.stop()


def test_a_queued_fetch_whose_entry_was_dropped_never_runs() -> None:
    prom, clock = Held(), Clock()
    cache = _cache(prom, clock, fetch_workers=1, max_queries=2, first_wait_seconds=0.5)
    try:
        for window in ("1m", "2m"):  # 1m's query holds the one worker, 2m's waits in the queue
            with pytest.raises(NoValue):
                cache.answer(_q(window))
        clock.now += 16
        with pytest.raises(NoValue):
            cache.answer(_q("1m"))  # asked again: kept
        with pytest.raises(NoValue):
            cache.answer(_q("3m"))  # takes the place of 2m, not asked within the last refresh
        prom.go.set()
        cache._first.shutdown(wait=True)
        assert not any("[120s]" in q for q in prom.queries)  # the dropped entry's queued query never ran
        assert sum("[180s]" in q for q in prom.queries) == 1
    finally:
        prom.go.set()
        cache.stop()


def test_each_client_adds_a_few_new_entries_per_refresh() -> None:
    clock = Clock()
    cache = _cache(FakePrometheus(fresh_result()), clock, client_new_keys=2, max_namespaces=100)
    try:
        # Namespace a and the window: the budget of 2 is spent; b is refused, stored nowhere.
        assert cache.answer(_q(namespace="a"), client="10.0.0.66").value.value == pytest.approx(40.0)
        with pytest.raises(Refused):
            cache.answer(_q(namespace="b"), client="10.0.0.66")
        assert _refused(cache, "client_limit") == 1 and list(cache._namespaces) == ["a"]
        assert cache.answer(_q(), client="10.0.0.7").value.value == pytest.approx(40.0)  # another client
        cache.refresh()  # a new refresh period: the budget is back
        assert cache.answer(_q(namespace="b"), client="10.0.0.66").value.value == pytest.approx(40.0)
    finally:
        cache.stop()


def test_a_malformed_answer_fails_its_own_entry_only() -> None:
    good = fresh_result()

    def prom(expr: str) -> Any:
        return [None, "x"] if "[60s]" in expr else good

    clock = Clock()
    cache = _cache(prom, clock)
    try:
        assert cache.answer(_q("2m")).value.value == pytest.approx(40.0)
        with pytest.raises(NoValue) as e:
            cache.answer(_q("1m"))
        assert e.value.reason == "prometheus_unavailable"
        assert cache.refresh() is False  # the refresh went through every entry
        assert cache.answer(_q("2m")).value.value == pytest.approx(40.0)
    finally:
        cache.stop()


def test_an_availability_series_asked_within_the_alerts_window_is_never_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("automator.keda.cache.MAX_WORKLOAD_SERIES", 2)
    clock = Clock()
    cache = _cache(FakePrometheus(fresh_result()), clock)
    assert cache.metrics is not None

    def series() -> set[str]:
        assert cache.metrics is not None
        return {s.labels["workload"] for m in cache.metrics.workload_available.collect() for s in m.samples}

    def ask(workload: str) -> None:
        with contextlib.suppress(NoValue):  # a value or none: either way the workload has a series
            cache.answer(_q(workload=workload))

    try:
        ask("deployment=api")
        ask("deployment=other")
        for i in range(50):  # a flood of selectors, each a workload of its own
            ask(f"selector=app=x{i}")
        assert series() == {"deployment/api", "deployment/other"}
        clock.now += 601  # neither asked within the alert's for: window any more
        ask("deployment=other")
        ask("selector=app=x1")
        assert series() == {"deployment/other", "selector/app In (x1)"}
    finally:
        cache.stop()
