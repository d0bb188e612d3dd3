"""Every dashboard follows the house rules, and reads only series that exist in their homes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dashboards import contracts, house
from steward_common import series
from tests.dashboards.queries import REPO, dashboards, panel_queries, panels

DASHBOARDS = dashboards()
NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
# Every name the dashboards may read: the recorded series and the metrics the exporter and automator serve.
KNOWN = (
    set(series.RECORDED)
    | contracts.EXPORTER_SAMPLES
    | {v for k, v in vars(contracts).items() if k.startswith("AUTOMATOR_") and isinstance(v, str)}
    | contracts.DRA_SAMPLES
)


def test_the_five_dashboards_exist_with_unique_uids_and_titles() -> None:
    assert set(DASHBOARDS) == {
        "gpu-steward-fleet",
        "gpu-steward-workload",
        "gpu-steward-node",
        "gpu-steward-reclaim",
        "gpu-steward-dra",
    }
    assert len({d["title"] for d in DASHBOARDS.values()}) == len(DASHBOARDS)
    for uid, dash in DASHBOARDS.items():
        assert dash["uid"] == uid
        assert house.TAG in dash["tags"]
        assert dash["templating"]["list"][0]["type"] == "datasource"


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_panels_use_the_datasource_variable_and_fit_the_grid(uid: str) -> None:
    dash = DASHBOARDS[uid]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and all(ids)
    cells: set[tuple[int, int]] = set()
    for panel in dash["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine
    titles = [p["title"] for p in panels(dash)]
    assert len(titles) == len(set(titles))
    for panel in panels(dash):
        assert panel["datasource"] == house.DATASOURCE, panel["title"]
        assert panel["description"], panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == house.DATASOURCE
            assert target["expr"].strip()


def _names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that name GPU Steward series."""
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    return {n for n in NAME.findall(without_strings) if "gpu_steward" in n}


def test_every_series_read_exists_in_its_home() -> None:
    read: set[str] = set()
    for q in panel_queries():
        names = _names(q.expr)
        assert names, f"{q.dashboard} / {q.panel}: no GPU Steward series in {q.expr!r}"
        read |= names
    assert read <= KNOWN, f"not served or recorded by anything: {sorted(read - KNOWN)}"
    # The names the brief names as core are all read.
    for name in (series.FLEET_GPUS, series.FLEET_GPUS_IDLE, series.POD_IDLE_SECONDS, series.POD_ACTIVITY):
        assert name in read


def test_a_misspelt_series_would_be_caught() -> None:
    assert _names('sum(gpu_steward_gpu_alocation{pod=~"gpu_steward_x"})') == {"gpu_steward_gpu_alocation"}
    assert "gpu_steward_gpu_alocation" not in KNOWN


def test_no_dashboard_module_types_a_series_name() -> None:
    # Names come through dashboards/contracts.py from their homes; a literal elsewhere is a copy that drifts.
    for module in sorted((REPO / "dashboards").glob("*.py")):
        text = module.read_text()
        assert "gpu_steward" not in text, f"{module.name} types a series name"


def test_contracts_fail_loudly_on_names_that_are_gone() -> None:
    with pytest.raises(LookupError, match="coverage_7m"):
        contracts.sibling(series.POD_ACTIVITY, operation="coverage_7m")
    exporter_names = {
        value for key, value in vars(contracts).items() if key.startswith(("GPU_", "CONTAINER_", "EXPORTER_"))
    }
    exporter_names.discard(contracts.EXPORTER_SAMPLES)
    assert exporter_names and exporter_names <= contracts.EXPORTER_SAMPLES
    assert contracts.sibling(series.POD_GPUS, operation="count_idle") == series.POD_GPUS_IDLE


def _thresholds(panel: dict[str, Any]) -> list[Any]:
    return [s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]]


def test_thresholds_come_from_their_homes() -> None:
    workload = {p["title"]: p for p in panels(DASHBOARDS["gpu-steward-workload"])}
    assert _thresholds(workload["GPU activity"]) == [None, series.IDLE_THRESHOLD]
    assert _thresholds(workload["Coverage"]) == [None, contracts.MIN_COVERAGE]
    node = {p["title"]: p for p in panels(DASHBOARDS["gpu-steward-node"])}
    assert _thresholds(node["Snapshot age"]) == [None, series.FRESHNESS_SECONDS]
