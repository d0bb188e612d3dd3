"""dcgm-exporter's own dashboard (the one behind grafana.com 12239, copied in ../shared/reference/schemas/)
against the exporter's dcgm compat series: a real Prometheus scrapes a mock-source exporter with
`--compat dcgm`, every panel's query runs with its variables resolved as Grafana would, and the panels that
show data and their totals are checked against the exporter's own device series."""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.fakes.promserver import Prometheus, free_port, start_mock_exporter, start_prometheus, stop

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO.parent / "shared" / "reference" / "schemas" / "dcgm-exporter" / "dashboard.json"
SCENARIO = REPO / "deploy" / "demo" / "scenario.yaml"
# DCGM's profiling fields need DCGM's profiling module: NVML, the exporter's source, has no tensor activity.
EMPTY = {"Tensor Core Utilization"}


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    if not DASHBOARD.is_file():
        pytest.skip(f"{DASHBOARD} absent (../shared/reference is not beside this checkout)")
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed (make deps)")
    work = tmp_path_factory.mktemp("dcgm-dashboard")
    port = free_port()
    exporter = start_mock_exporter(SCENARIO, port, work / "exporter.log", "--compat", "dcgm")
    prometheus = start_prometheus(work / "prometheus", {"gpu-steward-exporter": [f"127.0.0.1:{port}"]})
    try:
        prometheus.wait_for("count(DCGM_FI_DEV_GPU_TEMP) and count(gpu_steward_gpu_temperature_celsius)")
        yield prometheus
    finally:
        prometheus.stop()
        stop(exporter)


def _label_values(prom: Prometheus, query: str, at: float) -> list[str]:
    match = re.fullmatch(r"label_values\((\w+), (\w+)\)", query)
    assert match, query
    metric, label = match.groups()
    return sorted({s["metric"][label] for s in prom.query(metric, at) if label in s["metric"]})


def _resolve(prom: Prometheus, dashboard: dict[str, Any], expr: str, at: float) -> str:
    """$instance and $gpu as Grafana's "All" of a multi-value variable: every value, regex-joined."""
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        values = _label_values(prom, variable["query"], at)
        assert values, variable["name"]
        # Grafana escapes regex characters; a dot (in an address) matches itself either way.
        expr = expr.replace(f"${variable['name']}", "(" + "|".join(values) + ")")
    return expr


def _value(result: list[dict[str, Any]]) -> float:
    (sample,) = result
    return float(sample["value"][1])


def test_seven_of_eight_panels_show_data_and_totals_are_device_sums(prom: Prometheus) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    at = float(prom.query("timestamp(DCGM_FI_DEV_GPU_TEMP)")[0]["value"][1])
    with_data, empty = set(), set()
    results = {}
    for panel in dashboard["panels"]:
        (target,) = panel["targets"]
        result = prom.query(_resolve(prom, dashboard, target["expr"], at), at)
        (with_data if result else empty).add(panel["title"])
        results[panel["title"]] = result
    assert empty == EMPTY
    assert len(with_data) == 7
    # One temperature and one power series per device, as dcgm-exporter has: the totals are device sums.
    gpus = prom.query("gpu_steward_gpu_temperature_celsius", at)
    assert len(results["GPU Temperature"]) == len(gpus) == len(results["GPU Power Usage"])
    devices_power = _value(prom.query("sum(gpu_steward_gpu_power_watts)", at))
    assert math.isclose(_value(results["GPU Power Total"]), devices_power, rel_tol=1e-9)
    devices_temp = _value(prom.query("avg(gpu_steward_gpu_temperature_celsius)", at))
    assert math.isclose(_value(results["GPU Avg. Temp"]), devices_temp, rel_tol=1e-9)
