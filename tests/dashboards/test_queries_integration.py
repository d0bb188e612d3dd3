"""Every panel's queries against a real Prometheus with the rules, fed by the mock exporter and the
automator's metrics: none errors, and every panel returns data.

Two mock exporters (one node with idle, busy, shared, host-used and lost GPUs; one node whose kubelet
socket is missing) and the automator's own metrics (AutomatorMetrics on
a registry served over HTTP, with passes, decisions and evictions happening) are scraped every second.
The rule groups are loaded as written except that they evaluate every second instead of every 30 s, so
the windows, the idle clock and the idle GPU-hours fill within seconds: the rules measure their interval
from evaluation timestamps, so they hold under any interval (docs/architecture.md).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, start_http_server

from automator.dra.job import DraCheckJob, SnapshotDraCluster
from automator.dra.load import load_usage_file
from automator.keda.metrics import KedaMetrics
from automator.metrics import AutomatorMetrics
from automator.ports import ContainerUsage
from dashboards import contracts
from tests.dashboards.queries import PanelQuery, panel_queries, variable_queries
from tools.fakes.promserver import Prometheus, free_port, start_mock_exporter, start_prometheus, stop

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def owner(ns: str, pod: str, container: str = "main") -> dict[str, str]:
    return {"namespace": ns, "pod": pod, "container": container}


def gpu(index: int, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "index": index,
        "uuid": f"GPU-{name}",
        "model": "NVIDIA H100 80GB HBM3",
        "memory_total": "80Gi",
        **extra,
    }


def process(pid: int, who: dict[str, Any], utilization: float, memory: str) -> dict[str, Any]:
    return {"pid": pid, "owner": who, "phases": [{"from": 0, "utilization": utilization, "memory": memory}]}


MAIN_NODE = {
    "node": "dash-node-a",
    "gpus": [
        gpu(0, "idle", allocations=[owner("team", "idle-pod")]),
        gpu(
            1,
            "busy",
            allocations=[owner("team", "busy-pod")],
            processes=[process(11, owner("team", "busy-pod"), 0.9, "40Gi")],
        ),
        gpu(
            2,
            "shared",
            allocations=[owner("inference", "api-a"), owner("inference", "api-b")],
            processes=[
                process(21, owner("inference", "api-a"), 0.3, "8Gi"),
                process(22, owner("inference", "api-b"), 0.1, "4Gi"),
                process(23, {"host": True}, 0.05, "1Gi"),
            ],
        ),
        gpu(3, "lost", fails_at=0, allocations=[owner("team", "unlucky")]),
    ],
}
# The kubelet socket is missing here: no allocations, attribution degraded.
DEGRADED_NODE = {
    "node": "dash-node-b",
    "attribution": {"podresources": False},
    "gpus": [gpu(0, "b0", processes=[process(31, owner("batch", "job-1"), 0.6, "10Gi")])],
}


class _DemoUsage:
    """The demo DRA node's measured memory (deploy/demo/dra-usage.yaml)."""

    def container_memory(self) -> list[ContainerUsage]:
        return load_usage_file(ROOT / "deploy" / "demo" / "dra-usage.yaml")


def _automator_activity(
    metrics: AutomatorMetrics, keda: KedaMetrics, dra: DraCheckJob, stop_event: threading.Event
) -> None:
    """A pass per second, as the service records them, KEDA answers and refreshes, and a DRA check of the
    demo's DRA node."""
    while not stop_event.wait(1.0):
        dra.run_once()
        keda.requests.labels(transport="http", status="200").inc()
        keda.refresh_duration.observe(0.05)
        keda.cache_age.set(3)
        keda.cached_queries.set(2)
        metrics.passes.labels(result="ok").inc()
        metrics.pass_duration.observe(0.2)
        metrics.query_duration.observe(0.02)
        metrics.queries_per_pass.set(1)
        metrics.decisions.labels(mode="enforce").inc()
        metrics.evictions.labels(result="ok").inc()
        metrics.unresolved.labels(reason="no-fit").set(1)
        metrics.is_leader.set(1)
        metrics.reclaimed_gpus.inc(2)
        metrics.reclaimed_gpus_held.set(2)
        metrics.last_success.set(time.time())
        metrics.kueue_actions.labels(action="deactivate", mode="enforce").inc()
        metrics.kueue_waiting.set(1)
        metrics.kueue_waiting_gpus.set(8)
        metrics.kueue_idle_quota.set(8)


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    tmp = tmp_path_factory.mktemp("dashboards-it")
    rules = []
    for source in sorted((ROOT / "rules").glob("*.yaml")):
        doc = yaml.safe_load(source.read_text())
        for group in doc["groups"]:
            group["interval"] = "1s"
        rules.append(tmp / source.name)
        rules[-1].write_text(yaml.safe_dump(doc))
    exporters, ports = [], []
    for scenario in (MAIN_NODE, DEGRADED_NODE):
        path = tmp / f"{scenario['node']}.yaml"
        path.write_text(yaml.safe_dump(scenario))
        ports.append(free_port())
        exporters.append(start_mock_exporter(path, ports[-1], tmp / f"{scenario['node']}.log"))
    registry = CollectorRegistry()
    metrics = AutomatorMetrics(registry, version="test", mode="enforce")
    metrics.is_leader.set(1)
    keda = KedaMetrics(registry)
    automator_port = free_port()
    server, _ = start_http_server(automator_port, addr="127.0.0.1", registry=registry)
    stop_event = threading.Event()
    dra_cluster = SnapshotDraCluster(ROOT / "deploy" / "demo" / "dra-cluster.yaml")
    dra = DraCheckJob(dra_cluster, _DemoUsage(), 60, registry, write_events=False)
    activity = threading.Thread(
        target=_automator_activity, args=(metrics, keda, dra, stop_event), daemon=True
    )
    activity.start()
    prometheus = None
    try:
        prometheus = start_prometheus(
            tmp / "prometheus",
            {
                "gpu-steward-exporter": [f"127.0.0.1:{p}" for p in ports],
                "gpu-steward-automator": [f"127.0.0.1:{automator_port}"],
            },
            rule_files=rules,
        )
        # Idle GPU-hours need an idle pod at two evaluations in a row: everything else is there by then.
        prometheus.wait_for(f"{contracts.FLEET_IDLE_GPU_HOURS_24H} > 0", timeout=60)
        yield prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        stop_event.set()
        server.shutdown()
        for proc in exporters:
            stop(proc)


def _api(prom: Prometheus, path: str, params: dict[str, Any]) -> dict[str, Any]:
    """GET an API path; a PromQL error (HTTP 400/422) becomes an assertion naming the query."""
    url = f"{prom.url}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body: dict[str, Any] = json.load(r)
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{params}: {e.code} {e.read().decode()}") from None
    assert body["status"] == "success", body
    return body


def run(prom: Prometheus, q: PanelQuery) -> list[Any]:
    """The query as the panel sends it: instant for stats and tables, a range for time series."""
    if q.instant:
        return list(_api(prom, "/api/v1/query", {"query": q.expr})["data"]["result"])
    now = time.time()
    params = {"query": q.expr, "start": now - 60, "end": now, "step": "2s"}
    return list(_api(prom, "/api/v1/query_range", params)["data"]["result"])


QUERIES = panel_queries()


def test_every_panel_query_runs_and_every_panel_returns_data(prom: Prometheus) -> None:
    by_panel: dict[tuple[str, str], list[PanelQuery]] = {}
    for q in QUERIES:
        by_panel.setdefault((q.dashboard, q.panel), []).append(q)
    empty: list[tuple[str, str]] = []
    deadline = time.monotonic() + 30  # range queries may lag the first samples by a few evaluations
    for key, queries in sorted(by_panel.items()):
        while True:
            results = [run(prom, q) for q in queries]  # any query error fails here, naming the query
            if any(results) or time.monotonic() > deadline:
                break
            time.sleep(1)
        if not any(results):
            empty.append(key)
    assert not empty, f"panels without data: {empty}"
    assert len(by_panel) >= 40


def test_core_numbers_read_what_the_scenario_holds(prom: Prometheus) -> None:
    def value(dashboard: str, panel: str) -> float:
        (q,) = [q for q in QUERIES if (q.dashboard, q.panel) == (dashboard, panel)]
        (sample,) = run(prom, q)
        return float(sample["value"][1])

    fleet = "gpu-steward-fleet"
    assert value(fleet, "GPUs total") == 5
    # Every GPU held counts once: idle-pod, busy-pod, api-a and api-b (one shared GPU, 1/2 each),
    # unlucky (the lost GPU), and job-1, which holds no allocation on node b but reads activity.
    assert value(fleet, "Allocated") == 5
    assert value(fleet, "Allocated but idle") == 1  # idle-pod only
    assert value(fleet, "Unknown") == 1  # unlucky: its GPU is lost, so its activity is unknown
    assert value("gpu-steward-node", "Attribution sources degraded") == 1  # podresources on node b
    assert value("gpu-steward-node", "Lost or unreadable") == 1  # the lost GPU, counted once
    assert value("gpu-steward-reclaim", "Unresolved preemptors") == 1
    assert value("gpu-steward-reclaim", "Leaders") == 1
    # the demo's DRA node: one container over its claim, two HAMi devices
    assert value("gpu-steward-dra", "Critical findings") == 1
    assert value("gpu-steward-dra", "DRA devices") == 2
    assert value("gpu-steward-dra", "Usage compared") == 1


def test_template_variables_list_values(prom: Prometheus) -> None:
    for uid, name, selector, label in variable_queries():
        body = _api(prom, f"/api/v1/label/{label}/values", {"match[]": selector})
        assert body["data"], f"{uid}: variable {name} lists nothing ({selector})"


def test_a_broken_query_would_fail(prom: Prometheus) -> None:
    with pytest.raises(AssertionError, match="400"):
        run(prom, PanelQuery("x", "x", "A", "sum(rate(up[1m])", instant=True))
