"""The backtest does not replay Kueue, and says so when the history shows that the cluster has Workloads
(Kueue's own gauges), against a real Prometheus over backfilled history."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator

import pytest

from automator import cli
from automator.backtest import history
from automator.backtest.cli import policies
from automator.backtest.run import KUEUE_NOT_REPLAYED, run_backtest
from automator.prom import PrometheusAdapter
from tests.automator.backtest.backfill import END, OpenMetrics, build
from tests.automator.backtest.test_reconstruction import CLASSES
from tools.fakes.promserver import Prometheus, start_backfilled_prometheus

H = 3600
F = (int(time.time()) // H) * H - 6 * H
WINDOW = 2 * H


def _with_kueue(pending_from: int) -> str:
    """A one-node history, and Kueue's pending gauge at 0 until pending_from (seconds after F), then 1."""
    base = build(F, {"gpu-1": 8}, [], None).removesuffix("# EOF\n")
    om = OpenMetrics(F)
    om.series(
        "kueue_admitted_active_workloads", {"cluster_queue": "gpu-cq"}, ((t, 0) for t in range(0, END, 30))
    )
    points = ((t, 1 if t >= pending_from else 0) for t in range(0, END, 30))
    om.series("kueue_pending_workloads", {"cluster_queue": "gpu-cq", "status": "inadmissible"}, points)
    return base + om.text()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    if shutil.which("promtool") is None or shutil.which("prometheus") is None:
        pytest.skip("prometheus/promtool not installed (make deps)")
    prom = start_backfilled_prometheus(tmp_path_factory.mktemp("prom"), _with_kueue(pending_from=H))
    try:
        prom.wait_for(f"count_over_time(kueue_pending_workloads[1d] @ {F + WINDOW})", timeout=30)
        yield prom
    finally:
        prom.stop()


@pytest.mark.integration
def test_the_report_says_kueue_is_not_replayed_when_workloads_were_there(prometheus: Prometheus) -> None:
    adapter = PrometheusAdapter(prometheus.url)
    assert history.kueue_seen(adapter, history.Grid(F, F + WINDOW, 300))
    # before the Workload was pending every gauge read 0: no Workload, no note
    assert not history.kueue_seen(adapter, history.Grid(F, F + H - 600, 300))
    args = cli.build_parser().parse_args(["backtest", "--prometheus", "x", "--from", "0", "--to", "1"])
    result = run_backtest(adapter, F, F + WINDOW, 300, 1800, policies(args), CLASSES)
    assert KUEUE_NOT_REPLAYED in result.report["warnings"]
    assert "Kueue is not replayed" in KUEUE_NOT_REPLAYED
