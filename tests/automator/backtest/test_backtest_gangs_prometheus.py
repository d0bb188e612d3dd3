"""The backtest with gangs against a real Prometheus over backfilled kube-state-metrics: the gang label read
back from kube_pod_labels (allow-listed), the victim gang evicted as one eviction of its two members, and
regret because one member is busy again within the look-ahead.

Window [F, F + 3 h], 5-minute steps, the defaults (30-minute window, threshold 0.05, 300 s recent window):
ml/w-0 (4 GPUs on gpu-1) and ml/w-1 (4 GPUs on gpu-2), one coscheduling gang, idle from F; w-1 at 0.5 from
F + 1h10. hi/p (4 GPUs, class high) pending from F + 1 h, never bound in history.
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
from steward_common.conventions import GANG_COSCHEDULING_LABEL
from tests.automator.backtest.backfill import END, Pod, build
from tests.automator.backtest.test_reconstruction import CLASSES as CLASS_ITEMS
from tools.fakes.promserver import Prometheus, start_backfilled_prometheus

H, M = 3600, 60
F = (int(time.time()) // H) * H - 6 * H
WINDOW = 3 * H
GANG = {GANG_COSCHEDULING_LABEL: "train"}


def _pods(labels: dict[str, str]) -> list[Pod]:
    return [
        Pod("ml", "w-0", 4, "low", 0, "gpu-1", 0, activity=[(0, END, 0.0)], labels=labels),
        Pod(
            "ml",
            "w-1",
            4,
            "low",
            0,
            "gpu-2",
            0,
            activity=[(0, H + 10 * M, 0.0), (H + 10 * M, END, 0.5)],
            labels=labels,
        ),
        Pod("hi", "p", 4, "high", 1 * H, "", None),
    ]


def _prometheus(tmp: Path, labels: dict[str, str]) -> Prometheus:
    prom = start_backfilled_prometheus(tmp, build(F, {"gpu-1": 4, "gpu-2": 4}, _pods(labels), None))
    prom.wait_for(f"count_over_time(kube_pod_info[1d] @ {F + WINDOW})", timeout=30)
    return prom


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Path]]:
    if shutil.which("promtool") is None or shutil.which("prometheus") is None:
        pytest.skip("prometheus/promtool not installed (make deps)")
    classes = tmp_path_factory.mktemp("classes") / "classes.yaml"
    classes.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": CLASS_ITEMS}))
    prom = _prometheus(tmp_path_factory.mktemp("prom"), GANG)
    try:
        yield prom, classes
    finally:
        prom.stop()


def _report(prom: Prometheus, classes: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    argv = ["backtest", "--prometheus", prom.url, "--from", str(F), "--to", str(F + WINDOW), "--step", "5m",
            "--priority-classes", str(classes), "--output", "json"]  # fmt: skip
    assert cli.main(argv) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


@pytest.mark.integration
def test_a_victim_gang_from_kube_state_metrics_is_one_eviction_and_regret(
    prometheus: tuple[Prometheus, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    [policy] = _report(*prometheus, capsys)["policies"]
    evictions = policy["evictions"]
    assert sorted((e["victim"], e["node"], e.get("gang")) for e in evictions) == [
        ("ml/w-0", "gpu-1", "ml/train"),
        ("ml/w-1", "gpu-2", "ml/train"),
    ]
    assert {e["at"] for e in evictions} == {evictions[0]["at"]}  # together, for hi/p
    assert all(e["regret"] for e in evictions)  # w-1 busy again: the gang's eviction is regret
    totals = policy["totals"]
    assert (totals["evictions"], totals["evicted_pods"], totals["regret_evictions"]) == (1, 2, 1)


@pytest.mark.integration
def test_without_the_gang_label_one_pod_is_evicted(
    prometheus: tuple[Prometheus, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    prom = _prometheus(tmp_path, {})
    try:
        [policy] = _report(prom, prometheus[1], capsys)["policies"]
    finally:
        prom.stop()
    assert [e.get("gang") for e in policy["evictions"]] == [None]
    assert "evicted_pods" not in policy["totals"]
