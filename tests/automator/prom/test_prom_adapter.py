"""Prometheus adapter: query shapes against a real Prometheus, failures against a scripted HTTP server."""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from automator.objects.keys import JsonObj, ObjectKey
from automator.ports import PrometheusUnavailable
from automator.prom import (
    GPU_SERIES,
    PrometheusAdapter,
    coverage,
    cpu_query,
    gpu_query,
    recent_query,
)
from automator.reclaim import planner
from automator.reclaim.model import PlannerConfig, PodUsage, UsageWindow
from tests.automator import k8s
from tools.fakes.promserver import Prometheus, free_port, start_backfilled_prometheus

RULE_INTERVAL = 30
# Query instant: samples sit at T - 15 - 30*i, so range boundaries never fall on a sample.
T = (int(time.time()) // 60) * 60 - 120


def _gpu_samples(ns: str, pod: str, values: list[float], skip: int = 0) -> list[str]:
    """values[i] at T - 15 - 30*(i + skip) (newest first; skip: newest evaluations missing)."""
    rows = [
        f'{GPU_SERIES}{{namespace="{ns}",pod="{pod}"}} {v} {T - 15 - RULE_INTERVAL * (i + skip)}'
        for i, v in enumerate(values)
    ]
    return list(reversed(rows))  # OpenMetrics wants time order


def _openmetrics() -> str:
    lines = [f"# TYPE {GPU_SERIES} gauge"]
    lines += _gpu_samples("ml", "busy", [0.9] * 80)  # 40 min of 0.9
    lines += _gpu_samples("ml", "idle", [0.0] * 80)
    lines += _gpu_samples("ml", "gappy", [0.0] * 20)  # only the last 10 min
    # idle for the last 10 min, busy before: a 600 s window sees 0, a 1800 s window 1/3 busy.
    lines += _gpu_samples("ml", "recent-idle", [0.0] * 20 + [0.6] * 60)
    lines += _gpu_samples("other", "idle", [0.02] * 80)
    # Issue 7: idle for 28+ minutes, then at 100 % for the last 60 s / 90 s (averages 0.033 / 0.05 over
    # 1800 s); and a pod whose newest 6 minutes are missing (coverage 0.80, average 0).
    lines += _gpu_samples("ml", "burst-60s", [1.0] * 2 + [0.0] * 78)
    lines += _gpu_samples("ml", "burst-90s", [1.0] * 3 + [0.0] * 77)
    lines += _gpu_samples("ml", "newest-6m-missing", [0.0] * 48, skip=12)
    # The newest 4 minutes missing: one old idle sample still sits in a 300 s recent window.
    lines += _gpu_samples("ml", "newest-4m-missing", [0.0] * 52, skip=8)
    # One evaluation missed: still fresh (newest sample 45 s old, under two rule intervals).
    lines += _gpu_samples("ml", "one-missed", [0.0] * 79, skip=1)
    lines.append("# TYPE container_cpu_usage_seconds counter")
    for pod, cores in (("idle", 0.5), ("busy", 3.0)):
        # The pod-level cgroup series (container="", image="") must not be counted twice.
        for container, image in (("main", "img"), ("", "")):
            for i in reversed(range(80)):  # one series at a time, in time order (OpenMetrics)
                ts = T - 15 - RULE_INTERVAL * i
                lines.append(
                    f'container_cpu_usage_seconds_total{{namespace="ml",pod="{pod}",container="{container}",'
                    f'image="{image}"}} {cores * (ts - (T - 3600))} {ts}'
                )
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    if shutil.which("promtool") is None or shutil.which("prometheus") is None:
        pytest.skip("prometheus/promtool not installed (make deps)")
    prom = start_backfilled_prometheus(tmp_path_factory.mktemp("prom"), _openmetrics())
    try:
        prom.wait_for(f"count_over_time({GPU_SERIES}[1h] @ {T})", timeout=30)
        yield prom
    finally:
        prom.stop()


AT = datetime.fromtimestamp(T, tz=UTC)


@pytest.mark.integration
def test_gpu_query_shape_against_real_prometheus(prometheus: Prometheus) -> None:
    adapter = PrometheusAdapter(prometheus.url, rule_interval=RULE_INTERVAL)
    long, short = UsageWindow(1800, 0), UsageWindow(600, 0)
    windows = {
        ObjectKey("ml", "busy"): long,
        ObjectKey("ml", "idle"): long,
        ObjectKey("ml", "gappy"): long,
        ObjectKey("ml", "recent-idle"): short,
        ObjectKey("other", "idle"): long,
        ObjectKey("ml", "no-data"): long,
    }
    usage = adapter.usage(windows, at=AT)

    assert adapter.queries_last_call == 3  # the recent window, two distinct GPU windows, no CPU window
    assert ObjectKey("ml", "no-data") not in usage  # unknown, not idle
    assert usage[ObjectKey("ml", "busy")].gpu_activity == pytest.approx(0.9)
    assert usage[ObjectKey("ml", "busy")].coverage == pytest.approx(1.0)
    assert usage[ObjectKey("ml", "idle")].gpu_activity == pytest.approx(0.0)
    assert usage[ObjectKey("other", "idle")].gpu_activity == pytest.approx(0.02)
    # 20 samples of a 30 s rule over 1800 s.
    assert usage[ObjectKey("ml", "gappy")].coverage == pytest.approx(20 * 30 / 1800)
    assert usage[ObjectKey("ml", "recent-idle")].gpu_activity == pytest.approx(0.0)
    assert usage[ObjectKey("ml", "recent-idle")].coverage == pytest.approx(1.0)
    assert usage[ObjectKey("ml", "busy")].cpu_cores is None  # CPU not asked for

    # The same pod over the long window sees the busy past.
    again = adapter.usage({ObjectKey("ml", "recent-idle"): long}, at=AT)
    assert again[ObjectKey("ml", "recent-idle")].gpu_activity == pytest.approx(0.6 * 40 / 60)


@pytest.mark.integration
def test_cpu_query_shape_against_real_prometheus(prometheus: Prometheus) -> None:
    adapter = PrometheusAdapter(prometheus.url, rule_interval=RULE_INTERVAL)
    windows = {
        ObjectKey("ml", "idle"): UsageWindow(1800, 600),
        ObjectKey("ml", "busy"): UsageWindow(1800, 900),
        ObjectKey("other", "idle"): UsageWindow(1800, 600),  # GPU known, CPU unknown
    }
    usage = adapter.usage(windows, at=AT)
    assert adapter.queries_last_call == 4  # the recent window, one GPU window, two CPU windows
    assert usage[ObjectKey("ml", "idle")].cpu_cores == pytest.approx(0.5)
    assert usage[ObjectKey("ml", "busy")].cpu_cores == pytest.approx(
        3.0
    )  # the container="" series is ignored
    assert usage[ObjectKey("other", "idle")].cpu_cores is None
    assert usage[ObjectKey("other", "idle")].gpu_activity == pytest.approx(0.02)


def _recent_verdicts(usage: dict[ObjectKey, PodUsage]) -> dict[str, str]:
    """The planner's verdict on each pod as the only victim for a 4-GPU preemptor (one node per pod)."""
    objs: list[JsonObj] = [k8s.preemptor("p", gpus=4)]
    for key in usage:
        objs += [k8s.node(f"n-{key.name}", gpus=4), k8s.pod(key.name, gpus=4, node_name=f"n-{key.name}")]
    plan = planner.plan(k8s.cluster(*objs), usage, PlannerConfig(), k8s.NOW)
    return {key.name: plan.verdicts[key][0].rule for key in usage}


@pytest.mark.integration
def test_pod_busy_for_the_last_60s_or_90s_after_28_idle_minutes_is_protected(prometheus: Prometheus) -> None:
    """Issue 7: the 1800 s average (0.033, 0.05) hides a job that just started; the recent max does not."""
    adapter = PrometheusAdapter(prometheus.url, rule_interval=RULE_INTERVAL)
    names = ("burst-60s", "burst-90s", "idle")
    usage = adapter.usage(
        {ObjectKey("ml", n): UsageWindow(1800, 0) for n in names}, at=AT, recent_seconds=300
    )
    assert usage[ObjectKey("ml", "burst-60s")].gpu_activity == pytest.approx(2 / 60)
    assert usage[ObjectKey("ml", "burst-90s")].gpu_activity == pytest.approx(3 / 60)
    assert usage[ObjectKey("ml", "burst-60s")].gpu_recent_max == pytest.approx(1.0)
    assert usage[ObjectKey("ml", "idle")].gpu_recent_max == pytest.approx(0.0)
    verdicts = _recent_verdicts(usage)
    assert verdicts == {"burst-60s": "recently-busy", "burst-90s": "recently-busy", "idle": "8-idle"}


@pytest.mark.integration
def test_pod_whose_newest_samples_are_missing_is_protected(prometheus: Prometheus) -> None:
    adapter = PrometheusAdapter(prometheus.url, rule_interval=RULE_INTERVAL)
    key = ObjectKey("ml", "newest-6m-missing")
    usage = adapter.usage({key: UsageWindow(1800, 0)}, at=AT, recent_seconds=300)
    assert usage[key].coverage == pytest.approx(0.8) and usage[key].gpu_activity == 0.0
    assert usage[key].gpu_recent_max is None
    assert _recent_verdicts(usage) == {"newest-6m-missing": "recent-usage-unknown"}


@pytest.mark.integration
def test_windows_end_at_prometheus_time_and_skew_is_measured(prometheus: Prometheus) -> None:
    """With the automator's clock 5 minutes behind, the queries still end at Prometheus' now."""
    adapter = PrometheusAdapter(prometheus.url, rule_interval=RULE_INTERVAL)
    behind = datetime.now(UTC) - timedelta(minutes=5)
    adapter.usage({ObjectKey("ml", "idle"): UsageWindow(1800, 0)}, now=behind)
    assert adapter.clock_skew_seconds is not None and 290 < adapter.clock_skew_seconds < 330


def test_coverage_is_capped() -> None:
    assert coverage(60, 30, 1800) == 1.0
    assert coverage(61, 30, 1800) == 1.0
    assert coverage(30, 30, 1800) == 0.5


def _vector(*samples: tuple[dict[str, str], str]) -> dict[str, object]:
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": m, "value": [T, v]} for m, v in samples]},
    }


CLOCK = ({"stat": "clock"}, str(T))


def answer(*samples: tuple[dict[str, str], str], recent: tuple[tuple[dict[str, str], str], ...] = ()) -> Any:
    """A handler: the recent query gets Prometheus' clock (and `recent`), every other query `samples`."""

    def handle(request: Request) -> Response:
        recent_query = "max_over_time" in request.args["query"]
        newest = tuple(({**m, "stat": "newest"}, str(T)) for m, _ in recent)  # every pod fresh
        body = _vector(*recent, *newest, CLOCK) if recent_query else _vector(*samples)
        return Response(json.dumps(body), 200, content_type="application/json")

    return handle


def test_one_query_per_distinct_window_whatever_the_pod_count(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/v1/query").respond_with_handler(answer())
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"))
    for pods in (3, 3000):
        httpserver.clear_log()
        windows = {
            ObjectKey("ns", f"p{i}"): UsageWindow(gpu_seconds=(1800, 600)[i % 2], cpu_seconds=(0, 300)[i % 2])
            for i in range(pods)
        }
        assert adapter.usage(windows) == {}
        queries = [req.args["query"] for req, _ in httpserver.log]
        expected = [recent_query(300), gpu_query(600), gpu_query(1800), cpu_query(300)]
        assert sorted(queries) == sorted(expected)
        assert adapter.queries_last_call == 4


def test_sends_the_evaluation_time(httpserver: HTTPServer) -> None:
    httpserver.expect_request(
        "/api/v1/query", query_string={"query": recent_query(300), "time": f"{T}.000"}
    ).respond_with_json(
        _vector(
            ({"namespace": "a", "pod": "b"}, "0.5"),
            ({"namespace": "a", "pod": "b", "stat": "newest"}, str(T)),
            CLOCK,
        )
    )
    httpserver.expect_request(
        "/api/v1/query", query_string={"query": gpu_query(60), "time": f"{T}.000"}
    ).respond_with_json(
        _vector(
            ({"namespace": "a", "pod": "b"}, "0.25"), ({"namespace": "a", "pod": "b", "stat": "count"}, "1")
        )
    )
    usage = PrometheusAdapter(httpserver.url_for("").rstrip("/")).usage(
        {ObjectKey("a", "b"): UsageWindow(60, 0)}, at=AT
    )
    assert usage[ObjectKey("a", "b")].gpu_activity == 0.25
    assert usage[ObjectKey("a", "b")].coverage == 0.5
    assert usage[ObjectKey("a", "b")].gpu_recent_max == 0.5


def test_windows_follow_prometheus_clock_not_ours(httpserver: HTTPServer) -> None:
    """Without `at`, the first query reads Prometheus' time; every window then ends there."""
    httpserver.expect_request("/api/v1/query").respond_with_handler(answer())
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"))
    ours = AT - timedelta(minutes=5)  # the automator's clock 5 minutes behind
    adapter.usage({ObjectKey("a", "b"): UsageWindow(60, 0)}, now=ours)
    (first, _), (second, _) = httpserver.log
    assert "time" not in first.args and second.args["time"] == f"{T}.000"
    assert adapter.clock_skew_seconds == pytest.approx(300)


def test_nonfinite_value_makes_only_that_pod_unknown(httpserver: HTTPServer) -> None:
    good, bad, worse = ({"namespace": "a", "pod": p} for p in ("good", "nan", "inf"))
    handler = answer(
        (good, "0"), ({**good, "stat": "count"}, "2"),
        (bad, "NaN"), ({**bad, "stat": "count"}, "2"),
        (worse, "0"), ({**worse, "stat": "count"}, "2"),
        recent=((good, "0"), (bad, "0"), (worse, "+Inf")),
    )  # fmt: skip
    httpserver.expect_request("/api/v1/query").respond_with_handler(handler)
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"))
    windows = {ObjectKey("a", p): UsageWindow(60, 0) for p in ("good", "nan", "inf")}
    usage = adapter.usage(windows, at=AT)
    assert list(usage) == [ObjectKey("a", "good")] and adapter.nonfinite_last_call == 2


def test_average_without_count_stays_unknown(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/v1/query").respond_with_handler(
        answer(({"namespace": "a", "pod": "b"}, "0"))
    )
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"))
    assert adapter.usage({ObjectKey("a", "b"): UsageWindow(60, 0)}) == {}


def test_unreachable_prometheus_is_unavailable() -> None:
    adapter = PrometheusAdapter(f"http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(PrometheusUnavailable, match="failed") as e:
        adapter.usage({ObjectKey("a", "b"): UsageWindow(60, 0)})
    assert adapter.queries_last_call == 1
    # The operator reads the cause, not the URL-encoded query that requests repeats.
    assert "refused" in str(e.value)
    assert "query=" not in str(e.value)


def test_no_windows_no_queries() -> None:
    adapter = PrometheusAdapter(f"http://127.0.0.1:{free_port()}")
    assert adapter.usage({}) == {}
    assert adapter.queries_last_call == 0


@pytest.mark.parametrize(
    "respond",
    [
        pytest.param(lambda: Response("boom", status=500), id="500"),
        pytest.param(
            lambda: Response(json.dumps({"status": "error", "error": "bad"}), status=400),
            id="400-error-status",
        ),
        pytest.param(lambda: Response("<html>proxy</html>", status=200), id="not-json"),
        pytest.param(lambda: Response(json.dumps({"status": "success"}), status=200), id="no-data"),
        pytest.param(
            lambda: Response(json.dumps(_vector(({"stat": "clock"}, "NaN"))), status=200),
            id="nan-clock",
        ),
        pytest.param(
            lambda: Response(json.dumps(_vector(({"namespace": "a", "pod": "b"}, "0"))), status=200),
            id="no-clock",
        ),
        pytest.param(
            lambda: Response(json.dumps(_vector(({"job": "x"}, "0"))), status=200), id="no-pod-labels"
        ),
    ],
)
def test_bad_answers_are_unavailable(httpserver: HTTPServer, respond: object) -> None:
    assert callable(respond)
    httpserver.expect_request("/api/v1/query").respond_with_handler(lambda _req: respond())
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"))
    with pytest.raises(PrometheusUnavailable):
        adapter.usage({ObjectKey("a", "b"): UsageWindow(60, 0)})


def test_slow_prometheus_is_unavailable(httpserver: HTTPServer) -> None:
    def slow(_req: Request) -> Response:
        time.sleep(1.5)
        return Response(json.dumps(_vector()), status=200, content_type="application/json")

    httpserver.expect_request("/api/v1/query").respond_with_handler(slow)
    durations: list[float] = []
    adapter = PrometheusAdapter(
        httpserver.url_for("").rstrip("/"), timeout=0.3, observe_query=durations.append
    )
    with pytest.raises(PrometheusUnavailable, match="timed out"):
        adapter.usage({ObjectKey("a", "b"): UsageWindow(60, 0)})
    assert len(durations) == 1  # the failed query is still measured


def test_zero_window_is_refused() -> None:
    adapter = PrometheusAdapter(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ValueError, match="> 0"):
        adapter.usage({ObjectKey("a", "b"): UsageWindow(0, 0)})
    assert not math.isnan(coverage(1, 30, 60))


def test_query_text() -> None:
    assert "[1800s]" in gpu_query(1800) and 'stat", "count"' in gpu_query(1800)
    assert cpu_query(300) == (
        'sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{container!="", image!=""}[300s]))'
    )


@pytest.mark.integration
def test_pod_whose_newest_4_minutes_are_missing_is_protected(prometheus: Prometheus) -> None:
    """Its 300 s recent window still holds one idle sample, but the newest is 255 s old: not fresh."""
    adapter = PrometheusAdapter(prometheus.url, rule_interval=RULE_INTERVAL)
    stale, fresh = ObjectKey("ml", "newest-4m-missing"), ObjectKey("ml", "one-missed")
    usage = adapter.usage(
        {stale: UsageWindow(1800, 0), fresh: UsageWindow(1800, 0)}, at=AT, recent_seconds=300
    )
    assert usage[stale].coverage > 0.8 and usage[stale].gpu_activity == 0.0  # the window alone says idle
    assert usage[stale].gpu_recent_max is None
    assert usage[fresh].gpu_recent_max == 0.0
    assert _recent_verdicts(usage) == {"newest-4m-missing": "recent-usage-unknown", "one-missed": "8-idle"}
