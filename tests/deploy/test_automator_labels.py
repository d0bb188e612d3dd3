"""The automator's series keep their own labels through both shipped scrape set-ups: a real Prometheus scrapes
the automator's metric tables (the service's and the KEDA endpoints', every series they pre-create) through
the job prometheus-operator generates for the automator's ServiceMonitor (its target labels `namespace`,
`service`, `pod`, `container`, `endpoint`...) and through the no-operator job; no label is renamed
exported_*, and the two set-ups see the same KEDA `transport` values. A table that uses a target label name
is refused where metrics are declared."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from automator.keda.metrics import KedaMetrics
from automator.metrics import TARGET_LABELS, TRANSPORT_LABEL, AutomatorMetrics, declare, row
from tests.deploy.test_manifests import DEPLOY, _generator, render
from tests.deploy.test_target_labels import operator_job
from tools.fakes.promserver import Prometheus, free_port, start_prometheus

AUTOMATOR_POD = "gpu-steward-automator-5d9c7b6f4-q2x8r"
SERVICE = "gpu-steward-automator"


def _meta(port_name: str) -> dict[str, str]:
    """What EndpointSlice discovery attaches to an automator pod's endpoint."""
    label = "__meta_kubernetes_service_label_app_kubernetes_io_name"
    return {
        "__meta_kubernetes_namespace": "gpu-steward",
        "__meta_kubernetes_service_name": SERVICE,
        label: SERVICE,
        label.replace("_label_", "_labelpresent_"): "true",
        "__meta_kubernetes_endpointslice_port_name": port_name,
        "__meta_kubernetes_endpointslice_address_target_kind": "Pod",
        "__meta_kubernetes_endpointslice_address_target_name": AUTOMATOR_POD,
        "__meta_kubernetes_pod_name": AUTOMATOR_POD,
        "__meta_kubernetes_pod_container_name": "automator",
        "__meta_kubernetes_pod_node_name": "cpu-node-1",
        "__meta_kubernetes_pod_phase": "Running",
    }


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed (make deps)")
    registry = CollectorRegistry()
    AutomatorMetrics(registry)
    KedaMetrics(registry)
    port = free_port()
    server, thread = start_http_server(port, "127.0.0.1", registry)
    (monitor,) = [o for o in render("automator") if o["kind"] == "ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    operator = operator_job(monitor, 0, override_honor_labels=False)
    operator["static_configs"] = [{"targets": [f"127.0.0.1:{port}"], "labels": _meta(endpoint["port"])}]
    generator = _generator(DEPLOY / "components" / "no-operator" / "generate.py")
    (plain,) = [j for j in generator.scrape_configs() if j["job_name"] == SERVICE]
    del plain["kubernetes_sd_configs"]
    plain |= {"job_name": "no-operator", "scrape_interval": "1s", "scrape_timeout": "1s"}
    plain["static_configs"] = [{"targets": [f"localhost:{port}"], "labels": _meta(endpoint["port"])}]
    prom = start_prometheus(
        tmp_path_factory.mktemp("automator-labels"), {}, extra_scrape_configs=[operator, plain]
    )
    try:
        prom.wait_for('gpu_steward_automator_keda_requests_total{instance=~"localhost:.*"}')
        prom.wait_for('gpu_steward_automator_keda_requests_total{instance=~"127.*"}')
        yield prom
    finally:
        prom.stop()
        server.shutdown()
        thread.join(timeout=10)


def test_no_automator_label_is_renamed_by_a_scrape(scraped: Prometheus) -> None:
    series = scraped.query('{__name__=~"gpu_steward_automator_.*"}')
    assert len(series) > 50
    for s in series:
        assert not [k for k in s["metric"] if k.startswith("exported_")], s["metric"]
    # The operator's `endpoint` is the Service port's name; the KEDA requests name their transport apart.
    operator = scraped.query('gpu_steward_automator_keda_requests_total{instance=~"127.*"}')
    assert {s["metric"]["endpoint"] for s in operator} == {"http"}
    transports = {
        mode: {(s["metric"][TRANSPORT_LABEL], s["metric"]["status"]) for s in scraped.query(query)}
        for mode, query in (
            ("operator", 'gpu_steward_automator_keda_requests_total{instance=~"127.*"}'),
            ("no-operator", 'gpu_steward_automator_keda_requests_total{instance=~"localhost:.*"}'),
        )
    }
    assert transports["operator"] == transports["no-operator"]
    assert {t for t, _ in transports["operator"]} == {"http", "grpc"}


def test_a_table_with_a_target_label_is_refused() -> None:
    class Owner:
        requests: Counter

    for label in sorted(TARGET_LABELS):
        table = (row("x_", "requests", "counter", "requests", "help", (label,)),)
        with pytest.raises(TypeError, match=label):
            declare(Owner(), CollectorRegistry(), table)
    declare(Owner(), CollectorRegistry(), (row("x_", "requests", "counter", "requests", "h", ("t",)),))
