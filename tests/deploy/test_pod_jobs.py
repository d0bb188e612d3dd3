"""A Prometheus without the operator that runs the community chart's generic `kubernetes-pods` job (the most
common set-up) never gives a device series the exporter pod's labels: a real Prometheus runs that job, word
for word, over a target carrying the discovery labels of the shipped exporter pod (its pod template's labels
and annotations), beside the project's own no-operator job. The shipped pod has no `prometheus.io`
annotations, so the generic job drops it; a pod annotated anyway is dropped by the rule of docs/install.md
("Generic pod jobs"); and without that rule the annotated pod does get the exporter's labels (the check can
fail)."""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_manifests import DEPLOY, _generator, render
from tests.deploy.test_target_labels import EXPORTER_POD, NODE, SCENARIO
from tools.fakes.promserver import Prometheus, free_port, start_mock_exporter, start_prometheus, stop

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "gpu-steward"

# prometheus-community/helm-charts, charts/prometheus/values.yaml, serverFiles.prometheus.yml's job
# `kubernetes-pods`, with Kubernetes discovery replaced by the target below.
CHART_POD_JOB = yaml.safe_load(
    r"""
job_name: kubernetes-pods
honor_labels: true
relabel_configs:
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
    action: keep
    regex: true
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape_slow]
    action: drop
    regex: true
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scheme]
    action: replace
    regex: (https?)
    target_label: __scheme__
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
    action: replace
    target_label: __metrics_path__
    regex: (.+)
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
    action: replace
    regex: (\d+);(([A-Fa-f0-9]{1,4}::?){1,7}[A-Fa-f0-9]{1,4})
    replacement: '[$2]:$1'
    target_label: __address__
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
    action: replace
    regex: (\d+);((([0-9]+?)(\.|$)){4})
    replacement: $2:$1
    target_label: __address__
  - action: labelmap
    regex: __meta_kubernetes_pod_annotation_prometheus_io_param_(.+)
    replacement: __param_$1
  - action: labelmap
    regex: __meta_kubernetes_pod_label_(.+)
  - source_labels: [__meta_kubernetes_namespace]
    action: replace
    target_label: namespace
  - source_labels: [__meta_kubernetes_pod_name]
    action: replace
    target_label: pod
  - source_labels: [__meta_kubernetes_pod_phase]
    regex: Pending|Succeeded|Failed|Completed
    action: drop
  - source_labels: [__meta_kubernetes_pod_node_name]
    action: replace
    target_label: node
"""
)
# What a user who annotates the exporter would add (and what its manifests used to carry).
ANNOTATED = {"prometheus.io/scrape": "true", "prometheus.io/path": "/metrics"}


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_meta(template: dict[str, Any], port: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels Prometheus' pod discovery attaches to a pod made from `template`."""
    meta = {
        "__meta_kubernetes_namespace": NAMESPACE,
        "__meta_kubernetes_pod_name": EXPORTER_POD,
        "__meta_kubernetes_pod_ip": "127.0.0.1",
        "__meta_kubernetes_pod_node_name": NODE,
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_container_name": "exporter",
        "__meta_kubernetes_pod_container_port_name": "metrics",
    }
    annotations = dict(template["metadata"].get("annotations", {}))
    if extra:
        annotations |= extra | {"prometheus.io/port": str(port)}
    for kind, values in (("label", template["metadata"]["labels"]), ("annotation", annotations)):
        for key, value in values.items():
            meta[f"__meta_kubernetes_pod_{kind}_{_sanitize(key)}"] = value
            meta[f"__meta_kubernetes_pod_{kind}present_{_sanitize(key)}"] = "true"
    return meta


def documented_drop_rule() -> list[dict[str, Any]]:
    docs = (REPO / "docs" / "install.md").read_text()
    rules: list[dict[str, Any]] = yaml.safe_load(
        docs.split("<!-- pods-job-drop -->\n```yaml\n", 1)[1].split("```", 1)[0]
    )
    return rules


def _job(name: str, base: dict[str, Any], meta: dict[str, str], address: str) -> dict[str, Any]:
    job = json.loads(json.dumps(base)) | {"job_name": name, "scrape_interval": "1s", "scrape_timeout": "1s"}
    job.pop("kubernetes_sd_configs", None)
    job["static_configs"] = [{"targets": [address], "labels": meta}]
    return job


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed (make deps)")
    work = tmp_path_factory.mktemp("pod-jobs")
    port = free_port()
    address = f"127.0.0.1:{port}"
    exporter = start_mock_exporter(SCENARIO, port, work / "exporter.log")
    (daemonset,) = [o for o in render("exporter") if o["kind"] == "DaemonSet"]
    template = daemonset["spec"]["template"]
    shipped, annotated = pod_meta(template, port), pod_meta(template, port, ANNOTATED)
    with_drop = CHART_POD_JOB | {"relabel_configs": documented_drop_rule() + CHART_POD_JOB["relabel_configs"]}
    (own,) = [
        j
        for j in _generator(DEPLOY / "components" / "no-operator" / "generate.py").scrape_configs()
        if j["job_name"] == "gpu-steward-exporter"
    ]
    jobs = [
        _job("pods-shipped", CHART_POD_JOB, shipped, address),
        _job("pods-annotated-with-drop", with_drop, annotated, address),
        _job("pods-annotated", CHART_POD_JOB, annotated, address),  # the control: no drop rule
        # The project's job over the same pod's endpoint (EndpointSlice labels), as the no-operator overlay.
        _job(
            "gpu-steward-exporter",
            own,
            {
                **shipped,
                "__meta_kubernetes_service_name": "gpu-steward-exporter",
                "__meta_kubernetes_endpointslice_port_name": "metrics",
            },
            address,
        ),
    ]
    prom = start_prometheus(work / "prometheus", {}, extra_scrape_configs=jobs)
    try:
        prom.wait_for('gpu_steward_gpu_utilization_ratio{job="pods-annotated"}')
        prom.wait_for('gpu_steward_gpu_utilization_ratio{job="gpu-steward-exporter"}')
        yield prom
    finally:
        prom.stop()
        stop(exporter)


def _targets(prom: Prometheus) -> dict[str, Any]:
    with urllib.request.urlopen(f"{prom.url}/api/v1/targets?state=any", timeout=10) as r:
        data: dict[str, Any] = json.load(r)["data"]
    return data


def test_the_generic_pod_job_drops_the_shipped_exporter_pod(scraped: Prometheus) -> None:
    targets = _targets(scraped)
    active = {t["scrapePool"] for t in targets["activeTargets"]}
    dropped = {t["discoveredLabels"]["job"] for t in targets["droppedTargets"]}
    assert {"pods-shipped", "pods-annotated-with-drop"} <= dropped
    assert active == {"pods-annotated", "gpu-steward-exporter"}
    assert not scraped.query('{job=~"pods-shipped|pods-annotated-with-drop"}')


def test_no_device_series_carries_the_exporter_pods_labels(scraped: Prometheus) -> None:
    # Through the shipped job: device series have no pod, and nothing names the exporter's pod.
    devices = scraped.query('gpu_steward_gpu_utilization_ratio{job="gpu-steward-exporter"}')
    assert devices and all("pod" not in s["metric"] and "namespace" not in s["metric"] for s in devices)
    assert not scraped.query(f'{{job="gpu-steward-exporter", pod="{EXPORTER_POD}"}}')
    assert not scraped.query(f'{{job!="pods-annotated", pod="{EXPORTER_POD}"}}')
    # The control: the same job over an annotated pod, without the drop rule, labels every device series
    # with the exporter's pod and namespace (what the shipped set-up avoids).
    control = scraped.query('gpu_steward_gpu_utilization_ratio{job="pods-annotated"}')
    assert control and all(s["metric"].get("pod") == EXPORTER_POD for s in control)
    assert all(s["metric"].get("namespace") == NAMESPACE for s in control)


def test_the_shipped_pods_carry_no_scrape_annotations() -> None:
    for path in ("", "overlays/no-operator"):
        for obj in render(path):
            template = obj.get("spec", {}).get("template", {})
            annotations = template.get("metadata", {}).get("annotations", {})
            assert not [k for k in annotations if k.startswith("prometheus.io/")], obj["metadata"]["name"]
