"""The backtest's reads through the Prometheus adapter: range queries chunked by time (their number set by
the window and the step, not the cluster), and failures that are errors, never empty history."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from automator.backtest import history
from automator.backtest.cluster import KSM_QUERIES
from automator.objects.keys import ObjectKey
from automator.ports import PrometheusUnavailable
from automator.prom import PrometheusAdapter


def test_the_grid_is_cut_into_chunks_that_cover_it_once() -> None:
    grid = history.Grid(1000, 1000 + 300 * (2 * history.CHUNK_STEPS + 5), 300)
    chunks = list(grid.chunks())
    assert [count for _, count in chunks] == [history.CHUNK_STEPS, history.CHUNK_STEPS, 6]
    assert [first for first, _ in chunks] == [0, history.CHUNK_STEPS, 2 * history.CHUNK_STEPS]
    assert grid.at(grid.count - 1) == grid.end


def _matrix(pods: int, start: int, end: int, step: int) -> dict[str, object]:
    values = [[t, "1"] for t in range(start, end + 1, step)]
    result = [
        {"metric": {"namespace": "ml", "pod": f"p{i}", "uid": f"u{i}", "node": "n"}, "values": values}
        for i in range(pods)
    ]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


@pytest.mark.parametrize("pods", [3, 300])
def test_one_range_query_per_metric_per_chunk_whatever_the_cluster(httpserver: HTTPServer, pods: int) -> None:
    def answer(request: Request) -> Response:
        a = request.args
        body = _matrix(pods, int(a["start"]), int(a["end"]), int(a["step"].removesuffix("s")))
        return Response(json.dumps(body), content_type="application/json")

    httpserver.expect_request("/api/v1/query_range").respond_with_handler(answer)
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"))
    grid = history.Grid(1_000_000, 1_000_000 + 300 * 299, 300)
    frames = [f for first, count in grid.chunks() for f in history.ksm_frames(adapter, grid, first, count)]
    assert len(frames) == grid.count == 300
    assert adapter.queries_total == len(KSM_QUERIES) * 2  # two chunks
    assert len(frames[-1]["kube_pod_info"]) == pods


def test_a_failing_or_slow_prometheus_is_an_error(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/v1/query_range").respond_with_data("<html>proxy</html>", status=502)
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"), timeout=0.5)
    with pytest.raises(PrometheusUnavailable, match="kube_pod_info"):
        adapter.query_range("kube_pod_info", 0, 600, 300, "kube_pod_info")

    def slow(request: Request) -> Response:
        time.sleep(1.5)
        return Response("{}", content_type="application/json")

    httpserver.clear()
    httpserver.expect_request("/api/v1/query").respond_with_handler(slow)
    with pytest.raises(PrometheusUnavailable, match="timed out"):
        adapter.activity_after([ObjectKey("ml", "a")], 0.0, 1800)


def test_look_ahead_samples_keep_only_the_pods_asked(httpserver: HTTPServer) -> None:
    series = [
        {"metric": {"namespace": "ml", "pod": "a"}, "values": [[130, "0.5"], [100, "0"], [160, "NaN"]]},
        {"metric": {"namespace": "other", "pod": "a"}, "values": [[100, "1"]]},  # matched by the regexes only
    ]
    body = {"status": "success", "data": {"resultType": "matrix", "result": series}}
    httpserver.expect_request("/api/v1/query").respond_with_json(body)
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"))
    found = adapter.activity_after([ObjectKey("ml", "a"), ObjectKey("other", "b")], 90.0, 1800)
    assert found == {ObjectKey("ml", "a"): [(100.0, 0.0), (130.0, 0.5)]}
    request = httpserver.log[-1][0]
    assert request.args["time"] == "1890.000"
    assert request.args["query"].endswith('{namespace=~"ml|other", pod=~"a|b"}[1800s]')


def test_a_chunk_is_held_in_arrays_not_as_parsed_json(httpserver: HTTPServer) -> None:
    """Memory per sample of a chunk's history: each answer is read series by series into 8-byte slots and
    dropped before the next query, so the peak grows with the series and the steps of the chunk, not with
    the parsed JSON of every answer (about 240 bytes per sample when all fifteen were held)."""
    pods = 200
    grid = history.Grid(1_000_000, 1_000_000 + 300 * (history.CHUNK_STEPS - 1), 300)
    body = json.dumps(_matrix(pods, grid.start, grid.end, grid.step)).encode()  # made before measuring
    httpserver.expect_request("/api/v1/query_range").respond_with_data(body, content_type="application/json")
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"))
    tracemalloc.start()
    try:
        frames = history.ksm_frames(adapter, grid, 0, grid.count)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    samples = len(KSM_QUERIES) * pods * grid.count
    assert len(frames[0]["kube_pod_info"]) == pods and len(frames) == grid.count
    assert peak / samples < 40, f"{peak / samples:.0f} bytes per sample"
