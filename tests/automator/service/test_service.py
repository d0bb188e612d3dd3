"""The `run` service: endpoints over fake adapters with one pass run synchronously, flags and wiring."""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient
from prometheus_client import CollectorRegistry
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from automator import settings
from automator.metrics import AutomatorMetrics
from automator.objects.cluster import ClusterState
from automator.objects.keys import JsonObj, ObjectKey
from automator.ports import KubernetesUnavailable, Mode
from automator.reclaim.model import PlannerConfig, PodUsage
from automator.service import main as service
from tests.automator import k8s
from tests.automator.fakes import FakeKube, FakePrometheus
from tests.fakeclock import Clock

NOW = k8s.NOW


def cluster_objects() -> list[JsonObj]:
    return k8s.cluster_objects(
        k8s.node("node-a", 4),
        k8s.pod("idle", 4, "node-a", priority=None, priority_class="batch", cpu="1", memory="1Gi"),
        k8s.preemptor("pending", 4, None, "urgent", namespace="team", cpu="1", memory="1Gi"),
        k8s.priority_class("batch", 100),
        k8s.reclaim_class("urgent", 1000),
    )


def cluster() -> ClusterState:
    return k8s.state(cluster_objects())


class Leader:
    def __init__(self, leading: bool = True) -> None:
        self.leading = leading

    def __call__(self) -> bool:
        return self.leading


def make_service(
    prom: FakePrometheus | None = None, leader: Leader | None = None, mode: Mode = Mode.DRY_RUN
) -> tuple[service.Service, FakeKube, Clock]:
    kube = FakeKube(cluster())
    clock = Clock(NOW)
    svc = service.Service(
        kube=kube,
        prom=prom or FakePrometheus({ObjectKey("ml", "idle"): PodUsage(0.0, 1.0, gpu_recent_max=0.0)}),
        config=PlannerConfig(),
        mode=mode,
        interval=30,
        metrics=AutomatorMetrics(CollectorRegistry()),
        is_leader=leader or Leader(),
        clock=clock,
    )
    return svc, kube, clock


def client_for(svc: service.Service) -> FlaskClient:
    return service.create_app(svc).test_client()


def test_healthz() -> None:
    svc, _, _ = make_service()
    assert client_for(svc).get("/healthz").status_code == 200


def test_readyz_follows_the_last_pass() -> None:
    svc, _, clock = make_service()
    http = client_for(svc)
    before = http.get("/readyz")
    assert before.status_code == 503 and b"no pass yet" in before.data

    assert svc.run_once() is not None
    assert http.get("/readyz").status_code == 200

    clock.now = NOW + timedelta(seconds=3 * 30 + 1)  # no pass for more than three intervals
    stale = http.get("/readyz")
    assert stale.status_code == 503 and b"old" in stale.data


def test_readyz_fails_when_prometheus_is_down() -> None:
    svc, kube, _ = make_service(FakePrometheus(down="connection refused"), mode=Mode.ENFORCE)
    http = client_for(svc)
    result = svc.run_once()
    assert result is not None and result.result == "prometheus_unavailable"
    response = http.get("/readyz")
    # A fixed reason: the details (addresses, error texts) are /decisions' only.
    assert response.status_code == 503 and b"prometheus_unavailable" in response.data
    assert b"connection refused" not in response.data
    assert kube.eviction_calls == []
    body = http.get("/decisions").get_json()
    assert body["result"] == "prometheus_unavailable" and body["decisions"] == [] and body["acted"] is False
    assert "connection refused" in body["reason"]


def test_standby_runs_no_pass_and_is_ready() -> None:
    prom = FakePrometheus()
    svc, kube, _ = make_service(prom, leader=Leader(False), mode=Mode.ENFORCE)
    assert svc.run_once() is None
    assert prom.calls == 0 and kube.eviction_calls == []
    http = client_for(svc)
    ready = http.get("/readyz")
    assert ready.status_code == 200 and b"standby" in ready.data
    assert svc.metrics.registry.get_sample_value("gpu_steward_automator_is_leader") == 0
    assert http.get("/decisions").get_json()["leader"] is False


def test_a_standby_names_the_leader_instead_of_no_pass() -> None:
    leader = Leader(True)
    svc, _, _ = make_service(leader=leader)
    holder: list[str | None] = ["gpu-steward-automator-7c9f-abcde"]
    svc.leader_identity = lambda: holder[0]
    http = client_for(svc)
    svc.run_once()
    assert http.get("/decisions").get_json()["decisions"]  # the leader answers with its pass
    leader.leading = False  # it lost the Lease: its pass is stale, another pod leads
    body = http.get("/decisions").get_json()
    assert body["result"] == "standby" and body["leader"] is False and body["decisions"] == []
    assert body["leader_pod"] == holder[0] and holder[0] in body["reason"]
    assert body["timestamp"] is None and body["acted"] is False
    holder[0] = None  # nobody holds it (the last holder's record expired)
    body = http.get("/decisions").get_json()
    assert body["leader_pod"] is None and "no replica" in body["reason"]


def test_metrics_endpoint() -> None:
    svc, _, _ = make_service()
    svc.run_once()
    response = client_for(svc).get("/metrics")
    assert response.status_code == 200 and response.content_type.startswith("text/plain")
    text = response.data.decode()
    assert 'gpu_steward_automator_passes_total{result="ok"} 1.0' in text
    assert 'gpu_steward_automator_decisions_total{mode="dry-run"} 1.0' in text
    assert "gpu_steward_automator_is_leader 1.0" in text
    assert "gpu_steward_automator_prometheus_queries_per_pass 2.0" in text
    assert "gpu_steward_automator_pass_duration_seconds_count 1.0" in text
    assert 'gpu_steward_automator_build_info{mode="dry-run",version="unknown"} 1.0' in text


def test_decisions_endpoint_in_dry_run() -> None:
    svc, kube, _ = make_service()
    http = client_for(svc)
    assert http.get("/decisions").get_json()["result"] == "no pass yet"
    svc.run_once()
    body = http.get("/decisions").get_json()
    assert body["mode"] == "dry-run" and body["acted"] is False and body["leader"] is True
    assert body["timestamp"] == k8s.ts(NOW)
    assert [(d["preemptor"], d["node"], d["victims"]) for d in body["decisions"]] == [
        ("team/pending", "node-a", ["ml/idle"])
    ]
    assert kube.eviction_calls == []


def test_decisions_endpoint_in_enforce() -> None:
    svc, kube, _ = make_service(mode=Mode.ENFORCE)
    svc.run_once()
    body = client_for(svc).get("/decisions").get_json()
    assert body["mode"] == "enforce" and body["acted"] is True
    assert {"kind": "evict", "pod": "ml/idle", "result": "ok", "detail": "for team/pending"} in body[
        "actions"
    ]
    assert kube.evicted == [ObjectKey("ml", "idle")]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    settings.add_service_arguments(parser)
    return parser.parse_args(argv)


def resolved(argv: list[str]) -> settings.ServiceSettings:
    return settings.service_settings(parse(argv))


@pytest.mark.usefixtures("clean_env")
def test_flag_defaults() -> None:
    s = resolved([])
    assert s.mode is Mode.DRY_RUN
    assert s.prometheus_url == "http://prometheus-operated.monitoring.svc:9090"
    assert (s.prometheus_timeout, s.interval, s.rule_interval) == (10.0, 30.0, 30.0)
    assert (s.listen_address, s.port) == ("0.0.0.0", 8080)
    assert s.leader_election is None and s.lease_name == "gpu-steward-automator"
    assert s.kubeconfig is None and s.cluster_snapshot is None and s.max_replans == 5
    assert s.planner == PlannerConfig()


@pytest.mark.usefixtures("clean_env")
def test_env_vars_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_STEWARD_MODE", "enforce")
    monkeypatch.setenv("GPU_STEWARD_INTERVAL", "15")
    monkeypatch.setenv("GPU_STEWARD_LEADER_ELECTION", "false")
    monkeypatch.setenv("GPU_STEWARD_SINGLE_REPLICA", "true")
    monkeypatch.setenv("GPU_STEWARD_GPU_RESOURCES", "nvidia.com/gpu, nvidia.com/mig-1g.10gb")
    monkeypatch.setenv("GPU_STEWARD_MIN_COVERAGE", "0.5")
    s = resolved(["--interval", "60"])
    assert s.mode is Mode.ENFORCE and s.interval == 60.0  # the flag wins over the env var
    assert s.leader_election is False
    assert s.planner.gpu_resources == ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
    assert s.planner.min_coverage == 0.5
    assert resolved(["--gpu-resource", "amd.com/gpu"]).planner.gpu_resources == ("amd.com/gpu",)
    assert resolved(["--leader-election"]).leader_election is True
    monkeypatch.setenv("GPU_STEWARD_LEADER_ELECTION", "")  # empty: decided at run time, as unset
    monkeypatch.setenv("GPU_STEWARD_GPU_RESOURCES", "")
    assert resolved(["--no-leader-election"]).leader_election is False
    assert resolved([]).leader_election is None and resolved([]).planner.gpu_resources == ("nvidia.com/gpu",)


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("GPU_STEWARD_INTERVAL", "soon"),
        ("GPU_STEWARD_PORT", "http"),
        ("GPU_STEWARD_MODE", "bogus"),
        ("GPU_STEWARD_LEADER_ELECTION", "maybe"),
        ("GPU_STEWARD_MAX_REPLANS", "-1"),
        ("GPU_STEWARD_PROMETHEUS_TIMEOUT", "nan"),
        ("GPU_STEWARD_GPU_RESOURCES", "nvidia.com/gpu,cpu"),  # cpu is read as itself, never as devices
    ],
)
def test_bad_env_value_names_the_variable_and_exits_2(
    var: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(var, value)
    args = parse([])  # building and parsing must not fail: other subcommands share the parser
    assert service.run(args) == 2
    assert var in capsys.readouterr().err


def test_bad_env_value_does_not_break_the_offline_commands(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from automator import cli

    monkeypatch.setenv("GPU_STEWARD_LEADER_ELECTION", "maybe")
    fixtures = Path(__file__).parents[1] / "fixtures" / "docs_example"
    rc = cli.main(
        ["plan", "--cluster", str(fixtures / "cluster.yaml"), "--usage", str(fixtures / "usage.yaml")]
    )
    assert rc == 0
    assert capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--cluster-snapshot", "x.yaml", "--mode", "enforce"], "--cluster-snapshot"),
        (["--interval", "0"], "--interval"),
        (["--default-gpu-idle-seconds", "0"], "--default-gpu-idle-seconds"),
        (["--min-coverage", "1.5"], "--min-coverage"),
        (["--default-gpu-idle-threshold", "-1"], "--default-gpu-idle-threshold"),
    ],
)
def test_bad_flags_exit_2(argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert service.run(parse(argv)) == 2
    assert problem in capsys.readouterr().err


@pytest.mark.usefixtures("clean_env")
def test_good_flags_have_no_problems() -> None:
    assert resolved(["--cluster-snapshot", "x.yaml"]).planner == PlannerConfig()


def test_wiring_with_a_snapshot_file_and_prometheus(tmp_path: Path, httpserver: HTTPServer) -> None:
    """`run --cluster-snapshot`: the cluster from the file, usage from Prometheus over HTTP, dry-run."""
    snapshot = tmp_path / "cluster.yaml"
    items = cluster_objects()
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))

    def prometheus(request: Request) -> Response:
        query = request.args["query"]
        metric = {"namespace": "ml", "pod": "idle"}
        result: list[dict[str, Any]]
        if "max_over_time" in query:  # the recent window, with Prometheus' clock
            assert "[300s]" in query
            result = [
                {"metric": metric, "value": [0, "0.02"]},
                {"metric": {**metric, "stat": "newest"}, "value": [0, str(time.time())]},
                {"metric": {"stat": "clock"}, "value": [0, str(time.time())]},
            ]
        else:
            assert "[1800s]" in query
            result = [
                {"metric": metric, "value": [0, "0.01"]},
                {"metric": {**metric, "stat": "count"}, "value": [0, "60"]},
            ]
        return Response(
            json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}),
            content_type="application/json",
        )

    httpserver.expect_request("/api/v1/query").respond_with_handler(prometheus)
    args = resolved(
        ["--cluster-snapshot", str(snapshot), "--prometheus-url", httpserver.url_for("").rstrip("/")]
    )
    wiring = service.build(args, CollectorRegistry())
    assert wiring.elector is None
    wiring.service.clock = lambda: datetime.now(UTC)
    result = wiring.service.run_once()
    assert result is not None and result.ok, result and result.reason
    assert result.prometheus_queries == 2
    assert result.plan is not None and [str(v.pod) for v in result.plan.decisions[0].victims] == ["ml/idle"]
    http = wiring.app.test_client()
    assert http.get("/readyz").status_code == 200
    assert (
        wiring.service.metrics.registry.get_sample_value(
            "gpu_steward_automator_prometheus_query_duration_seconds_count"
        )
        == 2
    )


def test_snapshot_kube_refuses_to_write(tmp_path: Path) -> None:
    kube = service.SnapshotKube(tmp_path / "missing.yaml", ("nvidia.com/gpu",))
    with pytest.raises(RuntimeError, match="dry-run only"):
        kube.evict(ObjectKey("a", "b"))
    with pytest.raises(KubernetesUnavailable, match=r"missing\.yaml"):
        kube.snapshot()


DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "automator"


def manifests() -> dict[str, list[dict[str, Any]]]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind


def test_deployment_env_vars_are_real_flags_and_parse() -> None:
    (deployment,) = manifests()["Deployment"]
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["gpu-automator", "run"]
    parser = argparse.ArgumentParser()
    settings.add_service_arguments(parser)
    known = {s.env for s in settings.ALL_SETTINGS}
    ours = {e["name"]: e.get("value") for e in container["env"] if e["name"].startswith("GPU_STEWARD_")}
    assert ours and set(ours) <= known
    probes = (container["livenessProbe"]["httpGet"]["path"], container["readinessProbe"]["httpGet"]["path"])
    assert probes == ("/healthz", "/readyz")


def test_rbac_allows_every_call_the_adapter_makes() -> None:
    docs = manifests()
    (cluster_role,) = docs["ClusterRole"]
    (role,) = docs["Role"]

    def allowed(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
        return any(
            group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules
        )

    needed = [
        ("", "nodes", "list"),
        ("", "pods", "list"),
        ("", "pods", "patch"),
        ("", "pods/eviction", "create"),
        ("", "events", "create"),
        ("scheduling.k8s.io", "priorityclasses", "list"),
        ("policy", "poddisruptionbudgets", "list"),
    ]
    for group, resource, verb in needed:
        assert allowed(cluster_role["rules"], group, resource, verb), (group, resource, verb)
    for verb in ("get", "create", "update"):  # what the client's LeaseLock does
        assert allowed(role["rules"], "coordination.k8s.io", "leases", verb), verb
    assert not allowed(cluster_role["rules"], "", "pods", "delete")  # evictions only, never deletes


# --- issue 7: /decisions access, the production HTTP server, the extension points -------------------------


def test_decisions_can_require_a_bearer_token() -> None:
    svc, _, _ = make_service()
    svc.run_once()
    http = service.create_app(svc, service.DecisionsAccess(token="s3cret")).test_client()
    assert http.get("/decisions").status_code == 401
    assert http.get("/decisions", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = http.get("/decisions", headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and ok.get_json()["decisions"]
    assert http.get("/healthz").status_code == 200 and http.get("/metrics").status_code == 200


def test_decisions_can_be_turned_off() -> None:
    svc, _, _ = make_service()
    http = service.create_app(svc, service.DecisionsAccess(enabled=False)).test_client()
    assert http.get("/decisions").status_code == 404 and http.get("/readyz").status_code in (200, 503)


@pytest.mark.usefixtures("clean_env")
def test_decisions_token_comes_from_a_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc\n")
    s = resolved(["--decisions-token-file", str(token), "--no-decisions-endpoint"])
    access = service._decisions_access(s)
    assert access == service.DecisionsAccess(enabled=False, token="abc")
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(settings.SettingError, match="--decisions-token-file"):
        service._decisions_access(resolved(["--decisions-token-file", str(empty)]))


def test_a_blueprint_and_a_job_hook_in_with_a_line_each() -> None:
    from flask import Blueprint

    extra = Blueprint("extra", __name__)
    extra.add_url_rule("/extra", "extra", lambda: "hi")
    svc, _, _ = make_service()
    assert service.create_app(svc, blueprints=[extra]).test_client().get("/extra").data == b"hi"
    job = service.Job("other-check", lambda: None, 60)
    wiring = service.Wiring(svc, service.create_app(svc), jobs=[job])
    assert [j.id for j in wiring.jobs] == ["other-check"]


def test_http_server_is_waitress_with_a_bounded_pool() -> None:
    import threading
    import urllib.request

    from tools.fakes.promserver import free_port

    svc, _, _ = make_service()
    port = free_port()
    server = service.http_server(service.create_app(svc), "127.0.0.1", port, threads=2)
    assert server.adj.threads == 2 and server.adj.backlog == service.HTTP_BACKLOG
    assert server.adj.channel_timeout == service.HTTP_CHANNEL_TIMEOUT
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            assert resp.status == 200 and resp.headers["Server"] == "gpu-steward-automator"
    finally:
        server.close()


def test_trickling_clients_are_cut_at_the_head_deadline_and_probes_answer() -> None:
    """A connection limit's worth of clients each sending a header line now and then (never idle long
    enough for waitress' inactivity timeout) is cut at the head deadline: /healthz answers again."""
    import socket
    import threading
    import urllib.request

    from tools.fakes.promserver import free_port

    svc, _, _ = make_service()
    port = free_port()
    server = service.http_server(service.create_app(svc), "127.0.0.1", port, threads=2, head_deadline=1.5)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    tricklers: list[socket.socket] = []
    try:
        for _ in range(service.HTTP_CONNECTION_LIMIT):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            tricklers.append(sock)
        cut = 0
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and cut < len(tricklers):
            time.sleep(0.5)
            cut = 0
            for sock in tricklers:
                try:
                    sock.sendall(b"X-Trickle: 1\r\n")  # a line at a time, never the blank line
                except OSError:
                    cut += 1
        assert cut == len(tricklers), f"{cut} of {len(tricklers)} trickling connections cut"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=3) as resp:
            assert resp.status == 200
    finally:
        for sock in tricklers:
            sock.close()
        server.close()
