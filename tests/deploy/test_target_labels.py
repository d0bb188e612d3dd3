"""The exporter's series keep the labels the exporter exposed once prometheus-operator scrapes them through
the shipped ServiceMonitor, with honorLabels and with a Prometheus that sets overrideHonorLabels: a device or
host-process series never takes the exporter pod's namespace/pod/container, a user's series never turns them
into exported_*. A real mock-source exporter, scraped by a real Prometheus with the scrape job the operator
generates for the ServiceMonitor (its documented target labels: job, instance, namespace, service, pod,
container, endpoint, then the endpoint's relabelings)."""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.test_manifests import render
from tools.fakes.promserver import Prometheus, free_port, start_mock_exporter, start_prometheus, stop

# The exporter names the node it runs on, which is the target's node: the mock source plays this one.
NODE = "demo-gpu-node-1"
EXPORTER_POD = "gpu-steward-exporter-x7k2p"
TARGET_LABELS = {"job", "instance", "service", "endpoint"}
SCENARIO = Path(__file__).resolve().parents[2] / "deploy" / "demo" / "scenario.yaml"


def _meta(port: int, service: str) -> dict[str, str]:
    """What EndpointSlice discovery attaches to the exporter pod's endpoint."""
    return {
        "__meta_kubernetes_namespace": "gpu-steward",
        "__meta_kubernetes_service_name": service,
        "__meta_kubernetes_service_label_app_kubernetes_io_name": service,
        "__meta_kubernetes_service_labelpresent_app_kubernetes_io_name": "true",
        "__meta_kubernetes_endpointslice_port_name": "metrics",
        "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
        "__meta_kubernetes_endpointslice_address_target_name": EXPORTER_POD,
        "__meta_kubernetes_pod_name": EXPORTER_POD,
        "__meta_kubernetes_pod_container_name": "exporter",
        "__meta_kubernetes_pod_node_name": NODE,
        "__meta_kubernetes_pod_phase": "Running",
    }


def _relabel(rule: dict[str, Any]) -> dict[str, Any]:
    """A ServiceMonitor RelabelConfig in prometheus.yml's spelling."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    out = {names.get(k, k): v for k, v in rule.items()}
    out["action"] = str(out.get("action", "replace")).lower()
    return out


def operator_job(monitor: dict[str, Any], index: int, *, override_honor_labels: bool) -> dict[str, Any]:
    """The scrape job prometheus-operator generates for endpoint `index` of `monitor` (pkg/prometheus/
    promcfg.go): keep the selected Service's port, the documented target labels, then the relabelings."""
    spec = monitor["spec"]
    endpoint = spec["endpoints"][index]
    ((key, value),) = spec["selector"]["matchLabels"].items()
    sanitized = key.replace(".", "_").replace("/", "_").replace("-", "_")
    relabel: list[dict[str, Any]] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        {
            "action": "keep",
            "source_labels": [
                f"__meta_kubernetes_service_label_{sanitized}",
                f"__meta_kubernetes_service_labelpresent_{sanitized}",
            ],
            "regex": f"({value});true",
        },
        {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_endpointslice_port_name"],
            "regex": endpoint["port"],
        },
        {
            "source_labels": [
                "__meta_kubernetes_endpointslice_address_target_kind",
                "__meta_kubernetes_endpointslice_address_target_name",
            ],
            "separator": ";",
            "regex": "Node;(.*)",
            "replacement": "${1}",
            "target_label": "node",
        },
        {
            "source_labels": [
                "__meta_kubernetes_endpointslice_address_target_kind",
                "__meta_kubernetes_endpointslice_address_target_name",
            ],
            "separator": ";",
            "regex": "Pod;(.*)",
            "replacement": "${1}",
            "target_label": "pod",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"},
        {"target_label": "endpoint", "replacement": endpoint["port"]},
        *[_relabel(r) for r in endpoint.get("relabelings", [])],
    ]
    return {
        "job_name": "serviceMonitor/{namespace}/{name}/".format(**monitor["metadata"]) + str(index),
        "honor_labels": bool(endpoint.get("honorLabels")) and not override_honor_labels,
        "metrics_path": endpoint.get("path", "/metrics"),
        "scrape_interval": "1s",
        "relabel_configs": relabel,
    }


def _monitor() -> dict[str, Any]:
    (monitor,) = [
        o
        for o in render("exporter")
        if o["kind"] == "ServiceMonitor" and o["metadata"]["name"] == "gpu-steward-exporter"
    ]
    return monitor


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, int, str]]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed (make deps)")
    work = tmp_path_factory.mktemp("target-labels")
    port = free_port()
    exporter = start_mock_exporter(SCENARIO, port, work / "exporter.log", "--compat", "dcgm")
    monitor = _monitor()
    service = monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
    jobs = []
    # One target address per mode, so that both land in one Prometheus under distinct `instance`s.
    for address, override in ((f"127.0.0.1:{port}", False), (f"localhost:{port}", True)):
        job = operator_job(monitor, 0, override_honor_labels=override)
        job["job_name"] += "/override" if override else ""
        job["static_configs"] = [{"targets": [address], "labels": _meta(port, service)}]
        jobs.append(job)
    prom = start_prometheus(work / "prometheus", {}, extra_scrape_configs=jobs)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            exposition = r.read().decode()
        prom.wait_for('count(up{instance=~"localhost:.*"} == 1) and count(up{instance=~"127.*"} == 1)')
        prom.wait_for('count({__name__=~"gpu_steward_gpu_.*", instance=~"localhost:.*"})')
        yield prom, port, exposition
    finally:
        prom.stop()
        stop(exporter)


def _exposed(exposition: str) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    # The parser names a counter's samples <name>_total even where the line says <name> (DCGM's names).
    lines = [line for line in exposition.splitlines() if line[:1].isalpha()]
    written = {line.split("{", 1)[0].split(" ", 1)[0] for line in lines}
    out = set()
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            labels = frozenset((k, v) for k, v in sample.labels.items() if v != "")
            name = sample.name if sample.name in written else sample.name.removesuffix("_total")
            out.add((name, labels))
    return out


@pytest.mark.parametrize("instance", ["127.0.0.1", "localhost"], ids=["honorLabels", "overrideHonorLabels"])
def test_every_series_keeps_the_labels_the_exporter_exposed(
    scraped: tuple[Prometheus, int, str], instance: str
) -> None:
    prom, port, exposition = scraped
    exposed = _exposed(exposition)
    names = {name for name, _ in exposed}
    override = instance == "localhost"
    seen = set()
    for series in prom.query(f'{{instance="{instance}:{port}"}}'):
        labels = dict(series["metric"])
        name = labels.pop("__name__")
        if name not in names:
            continue  # up, scrape_*: Prometheus' own
        assert EXPORTER_POD not in labels.values(), (name, labels)
        assert labels.get("node") == NODE, labels
        assert labels["service"] == "gpu-steward-exporter" and labels["job"] == "gpu-steward-exporter"
        # The exporter's own `node` (the same node) meets the target's: renamed without honorLabels.
        if override and "exported_node" in labels:
            assert labels["exported_node"] == labels["node"]
            del labels["exported_node"]
        assert not [k for k in labels if k.startswith("exported_")], (name, labels)
        own = {k: v for k, v in labels.items() if k not in TARGET_LABELS}
        key = (name, frozenset(own.items()))
        if key not in exposed:  # a series without a node of its own: the target's
            key = (name, frozenset((k, v) for k, v in own.items() if k != "node"))
        assert key in exposed, (name, labels)
        seen.add(key)
    # Every exposed sample was scraped (Prometheus skips text-format `_created` samples of no family).
    assert {k for k in exposed if not k[0].endswith("_created")} <= seen
    # Both kinds were there: series of no pod (devices, host processes) and series of a user's pod.
    assert [k for k in seen if k[0] == "gpu_steward_gpu_utilization_ratio"]
    assert [k for k in seen if "pod" in dict(k[1])]
