"""The backtest against a real Prometheus over backfilled history whose answers are known by construction.

Window [F, F + 4 h], 5-minute steps, the defaults (30-minute window, threshold 0.05, 300 s recent window):
- ml/regret (8 GPUs on gpu-1) idle from F for 2 h, then at 0.5: evicted at F + 1h50 for hi/p1 (pending
  from then), busy again 615 s later (the first sample after F + 2 h): regret;
- ml/done (4 GPUs on gpu-3) idle until it ends at F + 3 h: evicted at F + 1 h for hi/p2, 4 GPUs x 2 h;
- the exporter's data missing from F + 2h20 to F + 3 h: ml/gappy (idle, gpu-2) is not evicted for hi/p3,
  pending from F + 2h30 until history schedules it at F + 3h05, then nothing more for it.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from automator import cli
from automator.backtest import history
from automator.backtest.cli import policies
from automator.backtest.cluster import KSM_QUERIES, NODE_ALLOCATABLE
from automator.backtest.run import run_backtest
from automator.prom import PrometheusAdapter
from tests.automator.backtest.backfill import END, Pod, build
from tests.automator.backtest.test_reconstruction import CLASSES as CLASS_ITEMS
from tools.fakes.promserver import Prometheus, start_backfilled_prometheus, start_prometheus

H, M = 3600, 60
F = (int(time.time()) // H) * H - 6 * H
WINDOW = 4 * H
STEP = 5 * M
GAP = (2 * H + 20 * M, 3 * H)
NODES = {"gpu-1": 8, "gpu-2": 8, "gpu-3": 4}
PODS = [
    Pod(
        "ml",
        "regret",
        8,
        "low",
        0,
        "gpu-1",
        0,
        ended=3 * H + 30 * M,
        activity=[(0, 2 * H, 0.0), (2 * H, 3 * H + 30 * M, 0.5)],
    ),
    Pod(
        "hi", "p1", 8, "high", 1 * H + 50 * M, "gpu-1", 3 * H + 35 * M, activity=[(3 * H + 35 * M, END, 0.9)]
    ),
    Pod("ml", "done", 4, "low", 0, "gpu-3", 0, ended=3 * H, activity=[(0, 3 * H, 0.0)]),
    Pod("hi", "p2", 4, "high", 1 * H, "gpu-3", 3 * H + 5 * M, activity=[(3 * H + 5 * M, END, 0.9)]),
    Pod("ml", "gappy", 8, "low", 0, "gpu-2", 0, ended=3 * H, activity=[(0, 3 * H, 0.0)]),
    Pod("hi", "p3", 8, "high", 2 * H + 30 * M, "gpu-2", 3 * H + 5 * M, activity=[(3 * H + 5 * M, END, 0.9)]),
]
CLASSES = {"apiVersion": "v1", "kind": "List", "items": CLASS_ITEMS}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    if shutil.which("promtool") is None or shutil.which("prometheus") is None:
        pytest.skip("prometheus/promtool not installed (make deps)")
    prom = start_backfilled_prometheus(tmp_path_factory.mktemp("prom"), build(F, NODES, PODS, GAP))
    try:
        prom.wait_for(f"count_over_time(kube_pod_info[1d] @ {F + WINDOW})", timeout=30)
        yield prom
    finally:
        prom.stop()


@pytest.fixture(scope="module")
def classes_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("classes") / "classes.yaml"
    path.write_text(yaml.safe_dump(CLASSES))
    return path


def _backtest(
    prometheus: Prometheus, classes: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> dict[str, Any]:
    argv = [
        "backtest",
        "--prometheus",
        prometheus.url,
        "--from",
        str(F),
        "--to",
        str(F + WINDOW),
        "--step",
        "5m",
        "--priority-classes",
        str(classes),
        "--output",
        "json",
        *extra,
    ]
    assert cli.main(argv) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


@pytest.mark.integration
def test_known_answers(
    prometheus: Prometheus, classes_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _backtest(prometheus, classes_file, capsys)
    assert set(report) == {"from", "to", "step_seconds", "lookahead_seconds", "policies", "warnings"}
    assert report["step_seconds"] == STEP and report["lookahead_seconds"] == 30 * M
    assert not any("Kueue" in w for w in report["warnings"])  # no Kueue in this history
    [policy] = report["policies"]
    evictions = {e["victim"]: e for e in policy["evictions"]}
    assert set(evictions) == {"ml/regret", "ml/done"}  # nothing for hi/p3: the gap, then history bound it

    regret = evictions["ml/regret"]
    assert regret["preemptor"] == "hi/p1" and regret["node"] == "gpu-1" and regret["gpus"] == 8
    assert regret["at"] == _rfc3339(F + 1 * H + 50 * M)
    assert regret["regret"] is True
    assert regret["busy_again_after_seconds"] == pytest.approx(2 * H + 15 - (1 * H + 50 * M))

    done = evictions["ml/done"]
    assert done["at"] == _rfc3339(F + 1 * H) and done["preemptor"] == "hi/p2"
    assert done["regret"] is False and done["busy_again_after_seconds"] is None

    totals = policy["totals"]
    assert totals["steps"] == WINDOW // STEP + 1
    # F itself (the first sample is at F + 15 s), and the steps whose newest sample is over 60 s old:
    # F + 2h25 .. F + 3h (the one at 3h05 sees fresh samples again).
    assert totals["steps_without_data"] == 1 + (3 * H - (2 * H + 25 * M)) // STEP + 1
    assert totals["evictions"] == 2 and totals["regret_evictions"] == 1
    # done: 4 GPUs from F + 1 h until it ended at F + 3 h; regret: 8 GPUs from F + 1h50 until F + 3h30.
    assert totals["gpu_hours_reclaimed"] == pytest.approx(4 * 2 + 8 * (100 / 60), abs=1e-6)
    # p2 started at F + 3h05 (evicted for at F + 1 h), p1 at F + 3h35 (at F + 1h50).
    assert totals["wait_saved_seconds"] == pytest.approx((2 * H + 5 * M) + (1 * H + 45 * M))
    assert policy["by_namespace"]["ml"]["evictions"] == 2


@pytest.mark.integration
def test_threshold_sweep(
    prometheus: Prometheus, classes_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ml/regret's busy activity (0.5) sits between the two values: regret under 0.3 only.
    report = _backtest(prometheus, classes_file, capsys, "--sweep", "threshold=0.3,0.7")
    by_name = {p["name"]: p for p in report["policies"]}
    assert list(by_name) == ["threshold=0.3", "threshold=0.7"]
    assert by_name["threshold=0.3"]["settings"]["default-gpu-idle-threshold"] == 0.3
    assert by_name["threshold=0.3"]["totals"]["regret_evictions"] == 1
    assert by_name["threshold=0.7"]["totals"]["regret_evictions"] == 0
    for policy in by_name.values():
        assert policy["totals"]["evictions"] == 2
    # The two policies' usage queries are the same at each step: asked once (the look-ahead too).
    prom = PrometheusAdapter(prometheus.url)
    from automator.reclaim.snapshot import load_cluster

    args = cli.build_parser().parse_args(
        ["backtest", "--prometheus", "x", "--from", "0", "--to", "1", "--sweep", "threshold=0.3,0.7"]
    )
    result = run_backtest(
        prom, F, F + WINDOW, STEP, 30 * M, policies(args), load_cluster(classes_file).priority_classes
    )
    assert result.queries == 2 * (WINDOW // STEP + 1) + len(KSM_QUERIES) + 1 + 2 + 1  # + Kueue's


@pytest.mark.integration
def test_notice_sweep(prometheus: Prometheus, classes_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With 600 s of notice each victim is evicted two steps later, once it stayed idle through the notice:
    ml/done at F + 1h10, ml/regret at F + 2 h (its notice ends just before it is busy again: still regret)."""
    report = _backtest(prometheus, classes_file, capsys, "--sweep", "notice-seconds=0,600")
    without, with_notice = report["policies"]
    assert "notices" not in without["totals"] and without["totals"]["evictions"] == 2
    at = {e["victim"]: e["at"] for e in with_notice["evictions"]}
    assert at == {"ml/done": _rfc3339(F + 1 * H + 10 * M), "ml/regret": _rfc3339(F + 2 * H)}
    totals = with_notice["totals"]
    assert (totals["notices"], totals["notices_withdrawn"], totals["regret_evictions"]) == (2, 0, 1)
    assert totals["wait_saved_seconds"] == pytest.approx(without["totals"]["wait_saved_seconds"] - 2 * 600)


@pytest.mark.integration
def test_queries_per_step_do_not_grow_with_the_cluster(prometheus: Prometheus, classes_file: Path) -> None:
    prom = PrometheusAdapter(prometheus.url)
    from automator.reclaim.snapshot import load_cluster

    classes = load_cluster(classes_file).priority_classes
    args = cli.build_parser().parse_args(["backtest", "--prometheus", "x", "--from", "0", "--to", "1"])
    result = run_backtest(prom, F, F + WINDOW, STEP, 30 * M, policies(args), classes)
    steps = WINDOW // STEP + 1
    # per step: the live adapter's recent and GPU-window queries; per chunk (one here): a range query per
    # kube-state-metrics metric and the evidence query; per step with evictions (two): one look-ahead.
    assert result.steps == steps
    assert result.queries == 2 * steps + len(KSM_QUERIES) + 1 + 2 + 1  # + Kueue's
    assert result.queries_per_step == result.queries / steps


def _rfc3339(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@pytest.mark.integration
def test_text_and_html_outputs(
    prometheus: Prometheus, classes_file: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = ["backtest", "--prometheus", prometheus.url, "--from", str(F), "--to", str(F + WINDOW)]
    base += ["--step", "5m", "--priority-classes", str(classes_file)]
    assert cli.main(base) == 0
    text = capsys.readouterr().out
    [row] = [
        line.split() for line in text.splitlines() if line.split()[:1] == ["default"] and "by" not in line
    ]
    assert "default by namespace (evictions, regret, GPU-hours):" in text
    assert row[:4] == ["default", "2", "1", f"{4 * 2 + 8 * 100 / 60:.2f}"]
    assert "regret evictions of default:" in text
    assert f"ml/regret (8 GPUs on gpu-1) for hi/p1: busy again after {10 * M + 15} s" in text
    out = tmp_path / "report.html"
    assert cli.main([*base, "--output", "html", "--out", str(out)]) == 0
    assert out.read_text().lstrip().lower().startswith("<!doctype html")
    assert str(out) in capsys.readouterr().err


@pytest.mark.integration
def test_chunks_change_nothing_but_the_query_count(
    prometheus: Prometheus,
    classes_file: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    whole = _backtest(prometheus, classes_file, capsys)
    monkeypatch.setattr(history, "CHUNK_STEPS", 7)  # 49 steps: 7 chunks
    assert _backtest(prometheus, classes_file, capsys) == whole
    prom = PrometheusAdapter(prometheus.url)
    from automator.reclaim.snapshot import load_cluster

    args = cli.build_parser().parse_args(["backtest", "--prometheus", "x", "--from", "0", "--to", "1"])
    result = run_backtest(
        prom, F, F + WINDOW, STEP, 30 * M, policies(args), load_cluster(classes_file).priority_classes
    )
    assert result.queries == 2 * (WINDOW // STEP + 1) + 7 * (len(KSM_QUERIES) + 1) + 2 + 1  # + Kueue's


def test_a_prometheus_without_kube_state_metrics_is_named_as_the_cause(
    prometheus: Prometheus, classes_file: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The backfilled history has kube-state-metrics: no such warning.
    assert not [w for w in _backtest(prometheus, classes_file, capsys)["warnings"] if "kube_pod_info" in w]
    # A real Prometheus that never scraped kube-state-metrics: every step without data, and the report says
    # which series are missing and where to look.
    empty = start_prometheus(tmp_path / "empty", {})
    try:
        report = _backtest(empty, classes_file, capsys)
    finally:
        empty.stop()
    [policy] = report["policies"]
    assert policy["totals"]["steps_without_data"] == policy["totals"]["steps"] > 0
    (warning,) = [w for w in report["warnings"] if "kube-state-metrics" in w and "kube_pod_info" in w]
    assert NODE_ALLOCATABLE in warning and "scraped by this Prometheus" in warning
