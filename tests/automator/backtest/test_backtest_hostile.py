"""The backtest against hostile or broken answers, hostile label values, and sizes nobody meant: every
malformed answer is its documented "Prometheus unreadable" exit (1) naming the query, never a traceback;
the text report escapes what a terminal would obey; a failed query is asked once per step whatever the
number of policies; run's credential flags; a run of more than MAX_QUERIES queries needs --yes."""

from __future__ import annotations

import base64
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from automator import cli
from automator.backtest.cli import MAX_QUERIES
from automator.backtest.report import report_text
from automator.objects.keys import ObjectKey
from automator.ports import PrometheusUnavailable
from automator.prom import PrometheusAdapter
from automator.reclaim.model import UsageWindow

FROM, TO = "1780000000", "1780003600"  # one hour: 121 steps at 30 s, one chunk
EMPTY_VECTOR = {"status": "success", "data": {"resultType": "vector", "result": []}}


def _matrix(result: Any) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})


def _series(*values: Any) -> list[dict[str, Any]]:
    return [{"metric": {"namespace": "ml", "pod": "a"}, "values": list(values)}]


def _backtest(httpserver: HTTPServer, *extra: str) -> list[str]:
    url = httpserver.url_for("").rstrip("/")
    return ["backtest", "--prometheus", url, "--from", FROM, "--to", TO, *extra]


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (_matrix(_series([math.nan, "1"])), "JSON is malformed"),  # NaN and Infinity are no JSON
        (_matrix(_series([math.inf, "1"])), "JSON is malformed"),
        (_matrix(_series([1e308, "1"])).replace("1e+308", "1e999"), "Number out of range"),
        (_matrix(_series(["1780000000", "1"])), "Expected `float`, got `str`"),
        (_matrix(_series([1780000000])), "Expected `array` of length 2"),
        (_matrix(_series([1780000000, "1", "2"])), "Expected `array` of length 2"),
        (_matrix(_series([1780000000, "NaN"])), "[1780000000.0, 'NaN'] is not a finite time and number"),
        (_matrix(_series([1780000000, "one"])), "[1780000000.0, 'one'] is not a finite time and number"),
        (_matrix(_series([1780000000, None])), "Expected `str`, got `null`"),
        (_matrix(["not an object"]), "Expected `object`, got `str` - at `$.data.result[0]`"),
        (
            _matrix([{"metric": ["namespace"], "values": []}]),
            "Expected `object`, got `array` - at `$.data.result[0].metric`",
        ),
        (_matrix([{"metric": {"pod": 7}, "values": []}]), "Expected `str`, got `int`"),
        (_matrix([{"metric": {}, "values": "1"}]), "Expected `array`, got `str`"),
        (_matrix({"series": []}), "Expected `array`, got `object` - at `$.data.result`"),
        ("[" * 100_000 + "]" * 100_000, "Expected `object`, got `array`"),  # refused at its first level
    ],
)
def test_a_malformed_history_answer_exits_1_naming_the_query(
    httpserver: HTTPServer, capsys: pytest.CaptureFixture[str], body: str, problem: str
) -> None:
    httpserver.expect_request("/api/v1/query").respond_with_json(EMPTY_VECTOR)  # where pods were bound
    httpserver.expect_request("/api/v1/query_range").respond_with_data(body, content_type="application/json")
    assert cli.main(_backtest(httpserver)) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpu-automator: error: Prometheus: kube_pod_info query") and "Traceback" not in err
    assert "unreadable ('kube_pod_info')" in err and problem in err, err  # the chunk's first query, named


def test_a_malformed_evidence_answer_exits_1_naming_the_query(
    httpserver: HTTPServer, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": "x", "value": [1, "1"]}]},
    }
    httpserver.expect_request("/api/v1/query").respond_with_json(body)
    assert cli.main(_backtest(httpserver)) == 1
    err = capsys.readouterr().err
    assert "evidence query" in err and "kube_pod_info" in err and "are not an object of text" in err
    assert "Traceback" not in err


def test_the_text_report_escapes_what_a_terminal_would_obey() -> None:
    osc, rlo, blink = "\x1b]0;pwned\x07", "\u202e", "\x1b[5m"
    eviction = {
        "at": "2026-01-01T00:00:00Z",
        "victim": f"ml{osc}/a",
        "gpus": 1,
        "node": f"n{blink}",
        "preemptor": f"hi/p{rlo}",
        "regret": True,
        "busy_again_after_seconds": 60.0,
    }
    totals = {
        "evictions": 1,
        "regret_evictions": 1,
        "gpu_hours_reclaimed": 1.0,
        "wait_saved_seconds": 0.0,
        "steps": 1,
        "steps_without_data": 0,
    }
    report = {
        "from": "2026-01-01T00:00:00Z",
        "to": "2026-01-01T01:00:00Z",
        "step_seconds": 30,
        "lookahead_seconds": 1800,
        "policies": [
            {
                "name": f"default{osc}",
                "settings": {},
                "evictions": [eviction],
                "totals": totals,
                "by_namespace": {
                    f"ml{osc}": {"evictions": 1, "regret_evictions": 1, "gpu_hours_reclaimed": 1.0}
                },
            }
        ],
        "warnings": [f"pod ml/{rlo}{blink}x\nforged line"],
    }
    text = report_text(report)
    assert all(c.isprintable() for line in text.splitlines() for c in line)
    assert "\\x1b]0;pwned\\x07" in text and "\\u202e" in text and "\\x1b[5m" in text
    assert "forged line" in text and not any(line.startswith("forged") for line in text.splitlines())


def test_a_failed_query_is_asked_once_per_step_whatever_the_policies(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/v1/query").respond_with_data("overloaded", status=503)
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"))
    at = datetime(2026, 1, 1, tzinfo=UTC)
    windows = {ObjectKey("ml", "a"): UsageWindow(1800, 0)}
    adapter.answers = {}  # one step, as run_backtest sets it
    for _ in range(8):  # eight policies with the same windows
        with pytest.raises(PrometheusUnavailable, match="answered 503: overloaded"):
            adapter.usage(windows, at=at, now=at)
        with pytest.raises(PrometheusUnavailable, match="answered 503"):
            adapter.activity_after([ObjectKey("ml", "a")], at.timestamp(), 1800)
    assert len(httpserver.log) == 2  # the usage query and the look-ahead, once each
    adapter.answers = {}  # the next step asks again
    with pytest.raises(PrometheusUnavailable):
        adapter.usage(windows, at=at, now=at)
    assert len(httpserver.log) == 3


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("flag", "content", "header"),
    [
        ("--prometheus-bearer-token-file", "tok-123\n", "Bearer tok-123"),
        (
            "--prometheus-basic-auth-file",
            "reader:hunter2\n",
            "Basic " + base64.b64encode(b"reader:hunter2").decode(),
        ),
    ],
)
def test_the_backtest_takes_runs_credential_files(
    httpserver: HTTPServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    flag: str,
    content: str,
    header: str,
) -> None:
    seen: list[str] = []

    def failing(request: Request) -> Response:
        seen.append(request.headers.get("Authorization", ""))
        return Response("no", status=500)

    httpserver.expect_request("/api/v1/query").respond_with_handler(failing)
    secret = tmp_path / "secret"
    secret.write_text(content)
    assert cli.main(_backtest(httpserver, flag, str(secret))) == 1
    assert seen == [header]
    assert content.strip() not in capsys.readouterr().err


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("flag", "content"),
    [
        ("--prometheus-basic-auth-file", "no-colon\n"),
        ("--prometheus-bearer-token-file", "\n"),
        ("--prometheus-ca-file", "not a certificate\n"),
    ],
)
def test_a_bad_credential_file_exits_2_naming_the_flag(
    httpserver: HTTPServer, capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, content: str
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(content)
    assert cli.main(_backtest(httpserver, flag, str(secret))) == 2
    assert capsys.readouterr().err.startswith(f"gpu-automator: error: {flag}: ")
    assert not httpserver.log


def test_more_than_max_queries_needs_yes_and_says_the_count(
    httpserver: HTTPServer, capsys: pytest.CaptureFixture[str]
) -> None:
    httpserver.expect_request("/api/v1/query").respond_with_data("no", status=500)
    ten_years = ["backtest", "--prometheus", httpserver.url_for("").rstrip("/"), "--from", "now-3650d"]
    argv = [*ten_years, "--to", "now", "--step", "6m"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    steps = 3650 * 240 + 1
    # per step the recent and the idle window's usage queries, per chunk of 240 steps one per
    # kube-state-metrics metric (16) and the evidence query
    queries = steps * 2 + -(-steps // 240) * 17
    assert queries > MAX_QUERIES
    assert err.startswith(
        f"gpu-automator: error: --yes: this backtest makes about {queries:,} Prometheus queries"
    )
    assert not httpserver.log
    assert cli.main([*argv, "--yes"]) == 1  # asked: it runs (and stops at the first failing query)
    assert len(httpserver.log) == 1


def test_a_week_at_the_default_step_needs_no_yes(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/v1/query").respond_with_data("no", status=500)
    url = httpserver.url_for("").rstrip("/")
    assert cli.main(["backtest", "--prometheus", url, "--from", "now-7d", "--to", "now"]) == 1


def test_the_documented_query_limit_is_the_codes() -> None:
    docs = Path(__file__).resolve().parents[3] / "docs"
    for name in ("backtest.md", "automator-cli.md"):
        assert f"more than {MAX_QUERIES:,}" in (docs / name).read_text().replace("\n", " ")
