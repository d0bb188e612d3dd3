"""The DRA check in `gpu-automator run`: the Kubernetes adapter's DRA reads and Events against the fake API
server (tools/fakes/fakekube.py, a real HTTP server speaking the Kubernetes API), measured memory from a real
Prometheus (the demo's DRA scenario played by the mock exporter, the recording rules loaded), metrics,
Events written once, the /dra endpoint, settings."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from prometheus_client import CollectorRegistry, generate_latest
from pytest_httpserver import HTTPServer

from automator import cli, settings
from automator.dra.job import STALE_INTERVALS, DraCheckJob, SnapshotDraCluster
from automator.dra.load import load_usage_file
from automator.dra.model import KINDS, CheckOutcome
from automator.dra.report import (
    CAPACITY_METRIC,
    CHECKS_METRIC,
    EVENTS_METRIC,
    FINDINGS_METRIC,
    LAST_SUCCESS_METRIC,
    USAGE_CHECKED_METRIC,
)
from automator.kube import ACTIVE_PODS, DraKubernetesAdapter, KubernetesAdapter
from automator.ports import ContainerUsage, KubernetesUnavailable, PrometheusUnavailable
from automator.prom import DRA_USAGE_LABELS, DraMemoryReader, PrometheusAdapter, dra_memory_query
from automator.service import main as service
from steward_common.metrics import CONTAINER_MEMORY_USED
from steward_common.series import CONTAINER_MEMORY
from tests.fakeclock import Clock
from tools.fakes.fakekube import FakeApiServer
from tools.fakes.promserver import Prometheus, free_port, rules_on_mock_exporter

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "deploy" / "demo"
DEMO_CLUSTER = DEMO / "dra-cluster.yaml"
DEMO_USAGE = DEMO / "dra-usage.yaml"
DEMO_SCENARIO = DEMO / "dra-scenario.yaml"
V1 = "/apis/resource.k8s.io/v1"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
LIST_PATHS = {
    f"{V1}/resourceslices": "ResourceSlice",
    f"{V1}/resourceclaims": "ResourceClaim",
    f"{V1}/deviceclasses": "DeviceClass",
    "/api/v1/pods": "Pod",
    "/api/v1/nodes": "Node",
}


def demo_objects() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load(DEMO_CLUSTER.read_text())["items"]
    return items


def demo_usage() -> list[ContainerUsage]:
    return load_usage_file(DEMO_USAGE)


def no_dra(api: FakeApiServer) -> None:
    """A cluster without resource.k8s.io/v1 (before Kubernetes 1.34): its discovery and lists answer 404."""
    api.fail("GET", f"{V1}/?(resource.*)?", 404, "NotFound", "the server could not find it", times=1000)


def fail_from_now(api: FakeApiServer, method: str, path: str, code: int) -> None:
    api.fail(
        method, path, code, "Forbidden" if code == 403 else "InternalError", f"scripted {code}", times=1000
    )


def events(api: FakeApiServer) -> list[dict[str, Any]]:
    return api.objects_of("events")


def event_posts(api: FakeApiServer) -> int:
    return sum(c.path.endswith("/events") for c in api.requests("POST"))


def api_for(url: str) -> client.ApiClient:
    return client.ApiClient(client.Configuration(host=url.rstrip("/")))


@pytest.fixture
def api(fake_kube: FakeApiServer) -> FakeApiServer:
    """The fake API server (tools/fakes/fakekube.py) holding the demo's DRA cluster."""
    for obj in demo_objects():
        fake_kube.put(obj)
    return fake_kube


@pytest.fixture
def kubeconfig(tmp_path: Path, api: FakeApiServer) -> Path:
    return api.kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def adapter(api: FakeApiServer) -> DraKubernetesAdapter:
    return DraKubernetesAdapter(KubernetesAdapter(api_for(api.url), identity="automator-0"))


class StaticUsage:
    def __init__(self, usage: list[ContainerUsage] | None = None, down: str | None = None) -> None:
        self.usage, self.down = usage or [], down

    def container_memory(self) -> list[ContainerUsage]:
        if self.down is not None:
            raise PrometheusUnavailable(self.down)
        return list(self.usage)


def make_job(
    cluster: Any, usage: Any, clock: Clock[datetime] | None = None, leader: bool = True, **kw: Any
) -> DraCheckJob:
    return DraCheckJob(
        cluster, usage, 60, CollectorRegistry(), is_leader=lambda: leader, clock=clock or Clock(NOW), **kw
    )


def dra_check_json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    argv = ["dra-check", "--cluster", str(DEMO_CLUSTER), "--usage", str(DEMO_USAGE), "--output", "json"]
    assert cli.main(argv) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


# --- the Kubernetes adapter ------------------------------------------------------------------------------


def test_adapter_lists_the_five_kinds_in_pages_with_kind_and_api_version(
    adapter: DraKubernetesAdapter, api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert adapter.dra_available() is True
    adapter.dra_objects()
    assert all(c.query["limit"] == ["500"] for c in api.requests("GET") if "limit" in c.query)
    api.calls.clear()
    monkeypatch.setattr("automator.kube.client.PAGE_SIZE", 1)  # one page per object: continue tokens
    objects = adapter.dra_objects()
    assert sorted(o["kind"] for o in objects) == sorted(o["kind"] for o in demo_objects())
    first = next(o for o in demo_objects() if o["kind"] == "ResourceClaim")["metadata"]
    claim = next(
        o for o in objects if o["kind"] == "ResourceClaim" and o["metadata"] == {**o["metadata"], **first}
    )
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    assert claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["cores"] == "40"
    pods = [c.query for c in api.requests("GET", "/api/v1/pods")]
    assert len(pods) == 3 and all(a["fieldSelector"] == [ACTIVE_PODS] for a in pods)  # one page per pod
    assert pods[1]["limit"] == ["1"] and pods[1]["continue"] != [""]


def test_adapter_without_resource_api_says_unavailable(
    adapter: DraKubernetesAdapter, api: FakeApiServer
) -> None:
    no_dra(api)
    assert adapter.dra_available() is False


def test_adapter_errors_name_the_call(adapter: DraKubernetesAdapter, api: FakeApiServer) -> None:
    fail_from_now(api, "GET", f"{V1}/", 403)
    with pytest.raises(KubernetesUnavailable, match=r"discover resource.k8s.io/v1: 403"):
        adapter.dra_available()
    fail_from_now(api, "GET", f"{V1}/resourceclaims", 500)
    with pytest.raises(KubernetesUnavailable, match=r"list resourceclaims: 500 scripted 500"):
        adapter.dra_objects()


def test_adapter_event_created_then_exists(adapter: DraKubernetesAdapter, api: FakeApiServer) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "llm-chat-gpu.abc", "namespace": "demo-dra"},
        "involvedObject": {"kind": "ResourceClaim", "name": "llm-chat-gpu", "namespace": "demo-dra"},
        "reason": "DraUsageOverClaim",
        "message": "m",
        "type": "Warning",
    }
    assert adapter.dra_event(body) is True
    assert adapter.dra_event(body) is False  # 409: written before
    fail_from_now(api, "POST", "/api/v1/namespaces/demo-dra/events", 403)
    with pytest.raises(
        KubernetesUnavailable, match=r"event DraUsageOverClaim demo-dra/llm-chat-gpu.abc: 403"
    ):
        adapter.dra_event(body)


def test_adapter_unreachable_api_server() -> None:
    dead = DraKubernetesAdapter(
        KubernetesAdapter(api_for(f"http://127.0.0.1:{free_port()}"), request_timeout=2)
    )
    with pytest.raises(KubernetesUnavailable, match="discover"):
        dead.dra_available()


# --- the job: report, metrics, Events, endpoint ------------------------------------------------------------


def test_check_over_the_api_is_the_cli_report_and_events_are_written_once(
    adapter: DraKubernetesAdapter, api: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock(NOW)
    job = make_job(adapter, StaticUsage(demo_usage()), clock, instance="automator-0")
    status = job.run_once()
    assert status is not None and status.result is CheckOutcome.OK and status.usage_checked

    code, body = job.report_json()
    expected = dra_check_json(capsys)
    assert code == 200
    assert {k: body[k] for k in ("findings", "devices")} == expected  # dra-check --output json's document
    assert (body["result"], body["usage_checked"], body["timestamp"]) == ("ok", True, "2026-03-01T12:00:00Z")

    # one Event, on the claim, for the one finding
    event, *rest = events(api)
    assert rest == []
    namespace, name = event["metadata"]["namespace"], event["metadata"]["name"]
    assert namespace == "demo-dra" and name.startswith("llm-chat-gpu.")
    assert event["involvedObject"]["kind"] == "ResourceClaim" and event["reason"] == "DraUsageOverClaim"
    assert event["reportingInstance"] == "automator-0"

    # the same finding next check, with another measured amount: no new Event, not even an attempt
    job.usage = StaticUsage(
        [u._replace(memory_bytes=(u.memory_bytes or 0) + (u.pod == "llm-chat")) for u in demo_usage()]
    )
    clock.now += timedelta(seconds=60)
    job.run_once()
    assert event_posts(api) == 1 and len(events(api)) == 1
    # after the repeat period it is written again; the Event still exists: 409, counted as exists
    clock.now += timedelta(hours=1)
    job.run_once()
    assert event_posts(api) == 2 and len(events(api)) == 1
    registry = job.registry
    assert registry.get_sample_value(EVENTS_METRIC + "_total", {"result": "created"}) == 1
    assert registry.get_sample_value(EVENTS_METRIC + "_total", {"result": "exists"}) == 1
    assert registry.get_sample_value(CHECKS_METRIC + "_total", {"result": "ok"}) == 3


def test_a_new_process_or_replica_does_not_duplicate_events(
    adapter: DraKubernetesAdapter, api: FakeApiServer
) -> None:
    make_job(adapter, StaticUsage(demo_usage())).run_once()
    make_job(adapter, StaticUsage(demo_usage())).run_once()  # e.g. after a failover: 409, nothing new
    assert event_posts(api) == 2 and len(events(api)) == 1


def test_events_per_check_are_bounded_and_the_rest_follow(
    adapter: DraKubernetesAdapter, api: FakeApiServer
) -> None:
    # every claim orphaned: three findings, at most two Events per check
    for pod in api.objects_of("pods"):
        api.remove("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
    clock = Clock(NOW)
    job = make_job(adapter, StaticUsage(), clock, max_events_per_check=2)
    status = job.run_once()
    assert status is not None and (status.events_written, status.events_deferred) == (2, 1)
    clock.now += timedelta(seconds=60)
    status = job.run_once()
    assert status is not None and (status.events_written, status.events_deferred) == (1, 0)
    assert len(events(api)) == 3 and event_posts(api) == 3


def test_a_replica_that_loses_the_lease_during_a_check_writes_no_event(
    adapter: DraKubernetesAdapter, api: FakeApiServer
) -> None:
    answers = iter([True])  # leader when the check starts, not any more when the Events would go
    job = make_job(adapter, StaticUsage(demo_usage()))
    job.is_leader = lambda: next(answers, False)
    status = job.run_once()
    assert status is not None and status.report is not None and len(status.report.findings) == 1
    assert (status.events_written, status.events_deferred) == (0, 1)
    assert event_posts(api) == 0


def test_metrics_carry_the_report_and_the_check(adapter: DraKubernetesAdapter) -> None:
    clock = Clock(NOW)
    job = make_job(adapter, StaticUsage(demo_usage()), clock)
    assert generate_latest(job.registry).decode().count(CAPACITY_METRIC) == 0  # nothing before a check
    job.run_once()
    get = job.registry.get_sample_value
    labels = {
        "node": "demo-dra-node-1",
        "driver": "hami-core-gpu.project-hami.io",
        "pool": "demo-dra-node-1",
        "device": "hami-gpu-0",
        "capacity": "memory",
    }
    assert get(CAPACITY_METRIC, labels) == 80 * 2**30
    assert get("gpu_steward_dra_device_consumed", labels) == (16000 + 8000) * 2**20
    assert {k: get(FINDINGS_METRIC, {"kind": k}) for k in KINDS} == {
        k: (1.0 if k == "usage-over-claim" else 0.0) for k in KINDS
    }
    assert get(LAST_SUCCESS_METRIC) == NOW.timestamp()
    assert get(USAGE_CHECKED_METRIC) == 1
    # the report goes stale when no check succeeds for three intervals: exported no more, served as 503
    clock.now += timedelta(seconds=STALE_INTERVALS * 60 + 1)
    assert get(FINDINGS_METRIC, {"kind": "usage-over-claim"}) is None
    assert get(CAPACITY_METRIC, labels) is None
    code, body = job.report_json()
    assert code == 503 and body["findings"] is None and "older than" in body["reason"]


def test_prometheus_down_checks_capacity_but_leaves_usage_unknown(adapter: DraKubernetesAdapter) -> None:
    job = make_job(adapter, StaticUsage(down="connection refused"))
    status = job.run_once()
    assert status is not None and status.result is CheckOutcome.OK and not status.usage_checked
    get = job.registry.get_sample_value
    assert get(FINDINGS_METRIC, {"kind": "usage-over-claim"}) is None  # unknown, not 0
    assert get(FINDINGS_METRIC, {"kind": "overcommitted"}) == 0
    assert get(USAGE_CHECKED_METRIC) == 0
    code, body = job.report_json()
    assert code == 200 and body["findings"] == [] and body["usage_checked"] is False
    assert "connection refused" in body["usage_reason"]


def test_no_reading_for_any_dra_device_is_unknown_usage_not_zero_findings(
    adapter: DraKubernetesAdapter,
) -> None:
    other_gpu = ContainerUsage("ml", "train", "main", "GPU-device-plugin-0", Decimal(2**30))
    job = make_job(adapter, StaticUsage([other_gpu]))
    status = job.run_once()
    assert status is not None and status.result is CheckOutcome.OK and not status.usage_checked
    assert "no measured GPU memory" in status.usage_reason
    assert job.registry.get_sample_value(FINDINGS_METRIC, {"kind": "usage-over-claim"}) is None
    assert job.registry.get_sample_value(USAGE_CHECKED_METRIC) == 0


def test_api_failure_keeps_the_last_report_until_stale_and_writes_nothing(
    adapter: DraKubernetesAdapter, api: FakeApiServer
) -> None:
    clock = Clock(NOW)
    job = make_job(adapter, StaticUsage(demo_usage()), clock)
    job.run_once()
    fail_from_now(api, "GET", f"{V1}/resourceslices", 500)
    clock.now += timedelta(seconds=60)
    status = job.run_once()
    assert status is not None and status.result is CheckOutcome.KUBERNETES_ERROR
    assert "list resourceslices" in status.reason
    code, body = job.report_json()
    assert (
        code == 200 and body["result"] == "kubernetes_error" and body["checked_at"] == "2026-03-01T12:00:00Z"
    )
    assert len(body["findings"]) == 1
    assert job.registry.get_sample_value(CHECKS_METRIC + "_total", {"result": "kubernetes_error"}) == 1


def test_no_dra_api_means_no_check(adapter: DraKubernetesAdapter, api: FakeApiServer) -> None:
    no_dra(api)
    job = make_job(adapter, StaticUsage(demo_usage()))
    status = job.run_once()
    assert status is not None and status.result is CheckOutcome.DRA_UNAVAILABLE
    assert not any(c.path.startswith(f"{V1}/resource") or c.path == "/api/v1/pods" for c in api.requests())
    code, body = job.report_json()
    assert code == 503 and body["result"] == "dra_unavailable" and body["findings"] is None
    assert job.registry.get_sample_value(FINDINGS_METRIC, {"kind": "overcommitted"}) is None


def test_a_standby_reads_and_writes_nothing(adapter: DraKubernetesAdapter, api: FakeApiServer) -> None:
    job = make_job(adapter, StaticUsage(demo_usage()), leader=False)
    assert job.run_once() is None
    assert api.requests() == []
    code, body = job.report_json()
    assert code == 503 and body["result"] == "standby" and body["leader"] is False


def test_snapshot_cluster_reads_the_file_and_refuses_events(tmp_path: Path) -> None:
    snap = SnapshotDraCluster(DEMO_CLUSTER)
    assert snap.dra_available() is True
    assert {o["kind"] for o in snap.dra_objects()} == {
        "Node",
        "DeviceClass",
        "ResourceSlice",
        "ResourceClaim",
        "Pod",
    }
    with pytest.raises(RuntimeError, match="dry-run"):
        snap.dra_event({})
    plain = tmp_path / "plain.yaml"
    plain.write_text(
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n"}}]}
        )
    )
    assert SnapshotDraCluster(plain).dra_available() is False
    with pytest.raises(KubernetesUnavailable, match="missing"):
        SnapshotDraCluster(tmp_path / "missing.yaml").dra_objects()


# --- wiring: settings, route, scheduler job ---------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    settings.add_service_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("value", ["5", "-1", "nan", "inf", "86401", "soon"])
def test_bad_dra_interval_exits_2(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert service.run(parse(["--dra-check-interval", value])) == 2
    assert "--dra-check-interval" in capsys.readouterr().err


@pytest.mark.usefixtures("clean_env")
def test_dra_interval_default_env_and_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings.service_settings(parse([])).dra_check_interval == 60
    monkeypatch.setenv("GPU_STEWARD_DRA_CHECK_INTERVAL", "0")
    assert settings.service_settings(parse([])).dra_check_interval == 0
    assert settings.service_settings(parse(["--dra-check-interval", "10"])).dra_check_interval == 10


@pytest.mark.usefixtures("clean_env")
def test_wiring_registers_the_route_and_the_metrics(kubeconfig: Path, api: FakeApiServer) -> None:
    argv = ["--kubeconfig", str(kubeconfig), "--no-leader-election"]
    argv += ["--prometheus-url", f"http://127.0.0.1:{free_port()}", "--prometheus-timeout", "2"]
    wiring = service.build(settings.service_settings(parse(argv)), CollectorRegistry())
    assert wiring.dra is not None and wiring.dra.interval == 60 and wiring.dra.write_events
    http = wiring.app.test_client()
    assert http.get("/dra").status_code == 503  # no check yet
    status = wiring.dra.run_once()
    assert status is not None and status.result is CheckOutcome.OK and not status.usage_checked
    response = http.get("/dra")
    assert response.status_code == 200 and response.get_json()["usage_checked"] is False
    text = http.get("/metrics").data.decode()
    assert 'gpu_steward_dra_checks_total{result="ok"} 1.0' in text and CAPACITY_METRIC in text
    off = service.build(
        settings.service_settings(parse([*argv, "--dra-check-interval", "0"])), CollectorRegistry()
    )
    assert off.dra is None and off.app.test_client().get("/dra").status_code == 404


@pytest.mark.usefixtures("clean_env")
def test_wiring_with_a_snapshot_file_writes_no_events(tmp_path: Path) -> None:
    argv = ["--cluster-snapshot", str(DEMO_CLUSTER), "--prometheus-url", f"http://127.0.0.1:{free_port()}"]
    wiring = service.build(settings.service_settings(parse(argv)), CollectorRegistry())
    assert wiring.dra is not None and wiring.dra.write_events is False
    status = wiring.dra.run_once()
    assert status is not None and status.result is CheckOutcome.OK and status.report is not None
    assert status.report.devices and status.events_written == 0


DEPLOY = REPO / "deploy" / "automator" / "rbac.yaml"


def test_rbac_grants_the_dra_lists_and_nothing_more_for_resource_k8s_io(
    adapter: DraKubernetesAdapter, api: FakeApiServer
) -> None:
    adapter.dra_available()
    adapter.dra_objects()
    listed = {
        c.path.rsplit("/", 1)[1] for c in api.requests() if c.path.startswith(f"{V1}/") and c.path != f"{V1}/"
    }
    (role,) = [d for d in yaml.safe_load_all(DEPLOY.read_text()) if d["kind"] == "ClusterRole"]
    granted = {
        (resource, verb)
        for rule in role["rules"]
        if "resource.k8s.io" in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {(r, "list") for r in listed}


# --- against a real Prometheus: the demo's DRA node, measured by the mock exporter ---------------------


def test_the_usage_query_reads_the_exporters_labels() -> None:
    assert set(DRA_USAGE_LABELS) <= set(CONTAINER_MEMORY_USED.labels)
    assert CONTAINER_MEMORY in dra_memory_query() and "[60s]" in dra_memory_query()


@pytest.fixture(scope="module")
def demo_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    tmp = tmp_path_factory.mktemp("dra-it")
    with rules_on_mock_exporter(tmp, DEMO_SCENARIO) as prom:
        # the rule groups evaluate every 30 s: wait for the recorded building block
        prom.wait_for(f'{CONTAINER_MEMORY}{{pod="llm-chat"}}', timeout=120)
        yield prom


@pytest.mark.integration
def test_measured_memory_from_prometheus_is_the_demo_usage_file(demo_prometheus: Prometheus) -> None:
    reader = DraMemoryReader(PrometheusAdapter(demo_prometheus.url, timeout=10))
    assert sorted(reader.container_memory()) == sorted(demo_usage())


@pytest.mark.integration
def test_service_check_with_real_prometheus_reports_the_demo_finding(
    demo_prometheus: Prometheus,
    adapter: DraKubernetesAdapter,
    api: FakeApiServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = make_job(adapter, DraMemoryReader(PrometheusAdapter(demo_prometheus.url, timeout=10)))
    status = job.run_once()
    assert status is not None and status.usage_checked and status.usage_entries == 3
    code, body = job.report_json()
    assert code == 200
    assert {k: body[k] for k in ("findings", "devices")} == dra_check_json(capsys)
    assert [e["reason"] for e in events(api)] == ["DraUsageOverClaim"]


def test_unreachable_prometheus_is_unavailable_for_the_reader() -> None:
    reader = DraMemoryReader(PrometheusAdapter(f"http://127.0.0.1:{free_port()}", timeout=2))
    with pytest.raises(PrometheusUnavailable, match="DRA memory"):
        reader.container_memory()


def test_reader_leaves_bad_values_unknown_and_unlabelled_samples_out(httpserver: HTTPServer) -> None:
    labels = dict(zip(DRA_USAGE_LABELS, ("ns", "p", "c", "GPU-1"), strict=True))
    result = [
        {"metric": labels, "value": [0, "1048576"]},
        {"metric": {**labels, "container": "nan"}, "value": [0, "NaN"]},
        {"metric": {**labels, "container": "neg"}, "value": [0, "-1"]},
        {"metric": {"namespace": "ns", "pod": "p"}, "value": [0, "5"]},
    ]
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    httpserver.expect_request("/api/v1/query").respond_with_json(body)
    reader = DraMemoryReader(PrometheusAdapter(httpserver.url_for("").rstrip("/"), timeout=5))
    got = {u.container: u.memory_bytes for u in reader.container_memory()}
    assert got == {"c": 1048576, "nan": None, "neg": None}
