"""dcgm-exporter's own Grafana dashboard (grafana.com 12239) against `--compat dcgm`, through a real
Prometheus: every panel NVML can feed returns data, per-GPU panels show each GPU once, and the totals
equal the sum of the devices, on a node with a whole GPU, a shared GPU with an unattributable process,
a free GPU and a MIG GPU. Also: every default-counters.csv field is emitted or documented as unavailable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml

from steward_common import metrics as m
from tools.fakes.promserver import Prometheus, free_port, start_mock_exporter, start_prometheus, stop

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
DASHBOARD = yaml.safe_load((FIXTURES / "dcgm_dashboard_queries.yaml").read_text())
JOB = "dcgm"


def pod(name: str, uid: str) -> dict[str, str]:
    return {"namespace": "team", "pod": name, "container": "main", "pod_uid": uid}


def run(pid: int, owner: dict[str, Any] | None, utilization: float, memory: str) -> dict[str, Any]:
    proc: dict[str, Any] = {"pid": pid, "phases": [{"from": 0, "utilization": utilization, "memory": memory}]}
    if owner is not None:
        proc["owner"] = owner
    return proc


H100 = {"model": "NVIDIA H100 80GB HBM3", "memory_total": "80Gi"}
SCENARIO = {
    "node": "dash-node",
    "gpus": [
        {
            "index": 0,
            "uuid": "GPU-whole",
            **H100,
            "allocations": [pod("train", "u-train")],
            "processes": [run(10, pod("train", "u-train"), 0.9, "40Gi")],
            "health": {"nvlink": True, "xid": [{"at": 0, "code": 79}], "clock_events": ["sw_power_cap"]},
        },
        {
            "index": 1,
            "uuid": "GPU-shared",
            **H100,
            "allocations": [pod("api-a", "u-a"), pod("api-b", "u-b")],
            "processes": [
                run(20, pod("api-a", "u-a"), 0.3, "8Gi"),
                run(21, pod("api-b", "u-b"), 0.1, "4Gi"),
                run(22, {"unresolved": True}, 0.05, "1Gi"),
            ],
        },
        {"index": 2, "uuid": "GPU-free", **H100},
        {
            "index": 3,
            "uuid": "GPU-mig",
            "model": "NVIDIA A100-SXM4-80GB",
            "memory_total": "80Gi",
            "mig": [
                {
                    "uuid": "MIG-one",
                    "profile": "3g.40gb",
                    "gpu_instance_id": 1,
                    "memory_total": "40Gi",
                    "allocations": [pod("mig-job", "u-mig")],
                    "processes": [run(30, pod("mig-job", "u-mig"), 0.5, "10Gi")],
                },
                {"uuid": "MIG-two", "profile": "3g.40gb", "gpu_instance_id": 2, "memory_total": "40Gi"},
            ],
        },
    ],
}


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    tmp = tmp_path_factory.mktemp("dashboard")
    (tmp / "scenario.yaml").write_text(yaml.safe_dump(SCENARIO))
    port = free_port()
    with ExitStack() as cleanup:
        exporter = start_mock_exporter(tmp / "scenario.yaml", port, tmp / "exporter.log", "--compat", "dcgm")
        cleanup.callback(stop, exporter)
        server = start_prometheus(tmp / "prom", {JOB: [f"127.0.0.1:{port}"]})
        cleanup.callback(server.stop)
        server.wait_for('gpu_steward_gpu_mig_info{job="dcgm"}')
        yield server


def panel_expr(expr: str) -> str:
    """Grafana's "All" for both variables, in either syntax."""
    return re.sub(r"\$\{?(instance|gpu)\}?", ".*", expr)


def total(prom: Prometheus, expr: str) -> float:
    result = prom.wait_for(expr)
    assert len(result) == 1, result
    return float(result[0]["value"][1])


@pytest.mark.integration
@pytest.mark.parametrize("panel", DASHBOARD["panels"], ids=lambda p: p["title"])
def test_every_panel_returns_data_or_is_documented_unavailable(
    prom: Prometheus, panel: dict[str, str]
) -> None:
    names = set(re.findall(r"DCGM_FI_\w+", panel["expr"]))
    if names <= set(m.DCGM_NOT_AVAILABLE):
        # NVML cannot give it: left out, never faked, and said so in docs/exporter.md.
        assert prom.query(panel_expr(panel["expr"])) == []
        docs = (ROOT / "docs" / "exporter.md").read_text()
        assert all(f"`{n}`" in docs for n in names)
        return
    assert prom.wait_for(panel_expr(panel["expr"])), panel["title"]


@pytest.mark.integration
def test_per_gpu_panels_show_each_gpu_once(prom: Prometheus) -> None:
    for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK"):
        gpus = [r["metric"]["gpu"] for r in prom.wait_for(name)]
        assert sorted(gpus) == ["0", "1", "2", "3"], name
    # the dashboard's variables: label_values(DCGM_FI_DEV_GPU_TEMP, gpu) lists each GPU once
    held = {r["metric"]["gpu"]: r["metric"].get("pod", "") for r in prom.wait_for("DCGM_FI_DEV_GPU_TEMP")}
    assert held == {"0": "train", "1": "", "2": "", "3": ""}  # the holder's labels when it is alone


@pytest.mark.integration
def test_totals_equal_the_sum_of_the_devices(prom: Prometheus) -> None:
    job = f'job="{JOB}"'
    power = total(prom, panel_expr(DASHBOARD["panels"][3]["expr"]))
    assert power == pytest.approx(total(prom, f"sum(gpu_steward_gpu_power_watts{{{job}}})"))
    avg_temp = total(prom, panel_expr(DASHBOARD["panels"][1]["expr"]))
    assert avg_temp == pytest.approx(total(prom, f"avg(gpu_steward_gpu_temperature_celsius{{{job}}})"))
    fb = total(prom, f'sum(DCGM_FI_DEV_FB_USED{{{job},pod_uid=""}}) * 1024 * 1024')
    devices = total(
        prom,
        f"sum(gpu_steward_gpu_memory_used_bytes{{{job}}} unless on (uuid) gpu_steward_gpu_mig_info)",
    )
    assert fb == pytest.approx(devices) and devices > 0


@pytest.mark.integration
def test_shared_gpu_with_an_unattributable_process_keeps_its_device_values(prom: Prometheus) -> None:
    util = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{gpu="1"}')
    # the device series stays; the per-container split is unknown (an unresolved process), so absent
    assert [(r["metric"].get("pod", ""), float(r["value"][1])) for r in util] == [("", 45.0)]
    fb = prom.wait_for('DCGM_FI_DEV_FB_USED{gpu="1"}')
    assert [float(r["value"][1]) for r in fb] == [13 * 1024]


@pytest.mark.integration
def test_mig_devices_report_framebuffer_with_instance_labels(prom: Prometheus) -> None:
    fb = prom.wait_for('DCGM_FI_DEV_FB_USED{gpu="3"}')
    seen = {(r["metric"]["GPU_I_ID"], r["metric"].get("pod", "")): float(r["value"][1]) for r in fb}
    assert seen == {("1", "mig-job"): 10 * 1024, ("2", ""): 0.0}
    assert {r["metric"]["UUID"] for r in fb} == {"GPU-mig"}


def default_counters() -> dict[str, str]:
    rows = (FIXTURES / "dcgm_default_counters.txt").read_text().splitlines()
    return dict(line.split() for line in rows if line and not line.startswith("#"))  # type: ignore[misc]


def test_every_default_counter_is_emitted_with_upstream_type_or_documented() -> None:
    fields = default_counters()
    assert len(fields) == 26  # 25 fields and the driver-version label
    emitted = {s.name: s.kind for s in m.DCGM_METRICS}
    docs = (ROOT / "docs" / "exporter.md").read_text()
    for name, kind in fields.items():
        if kind == "label":
            assert name in m.DCGM_DEVICE_LABELS
        elif name in emitted:
            assert emitted[name] == kind, name
        else:
            assert name in m.DCGM_NOT_AVAILABLE, f"{name}: neither emitted nor documented as unavailable"
        assert re.search(rf"^\| `{name}` \|", docs, re.MULTILINE), f"docs/exporter.md lacks a row for {name}"
    assert set(m.DCGM_NOT_AVAILABLE) <= set(fields)


UPSTREAM_DASHBOARD = ROOT.parent / "shared" / "reference" / "schemas" / "dcgm-exporter" / "dashboard.json"


@pytest.mark.skipif(not UPSTREAM_DASHBOARD.exists(), reason=f"no upstream dashboard at {UPSTREAM_DASHBOARD}")
def test_the_queries_run_here_are_upstreams_dashboard() -> None:
    # The panels and variables above are dcgm-exporter's own file's, query for query.
    upstream = json.loads(UPSTREAM_DASHBOARD.read_text())
    panels = [
        {"title": p["title"], "expr": t["expr"]} for p in upstream["panels"] for t in p.get("targets", [])
    ]
    assert panels == DASHBOARD["panels"]
    variables = {}
    for v in upstream["templating"]["list"]:
        if v["type"] == "query":
            query = v["query"]
            variables[v["name"]] = query["query"] if isinstance(query, dict) else query
    assert variables == DASHBOARD["variables"]
