"""The fake API server (tools/fakes/fakekube.py) and its simulated cluster (tools/fakes/fakesim.py), over
real HTTP.

Time is a fake clock moved by the tests, and the simulation runs only when a test calls step().
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.sources.scenario import load_scenario
from tests.fakeclock import FakeClock
from tools.fakes.fakekube import FakeApiServer
from tools.fakes.fakesim import LOAD_ANNOTATION, MEMORY_ANNOTATION, UTILIZATION_ANNOTATION, GpuDevices

GPU = "nvidia.com/gpu"


def node(name: str = "node-1", gpus: int = 4) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": "gpu"}},
        "status": {"allocatable": {GPU: str(gpus), "cpu": "8", "memory": "64Gi", "pods": "10"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def pod(name: str, gpus: int = 1, node_name: str | None = "node-1", **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"limits": {GPU: str(gpus)}, "requests": {"cpu": "1"}}}],
        "terminationGracePeriodSeconds": 30,
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", **meta},
        "spec": spec,
        "status": {"phase": "Running" if node_name else "Pending"},
    }


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_800_000_000.0)


@pytest.fixture
def make(clock: FakeClock) -> Iterator[Any]:
    servers: list[FakeApiServer] = []

    def start(*objects: dict[str, Any], devices: GpuDevices | None = None) -> FakeApiServer:
        server = FakeApiServer(objects, clock=clock, devices=devices).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


def call(
    server: FakeApiServer, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        server.url + path, data=data, method=method, headers={"Content-Type": content_type}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status), json.load(r)
    except urllib.error.HTTPError as e:
        return int(e.code), json.load(e)


def eviction(name: str, **options: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "ml"},
    }
    if options:
        body["deleteOptions"] = options
    return body


EVICT = "/api/v1/namespaces/ml/pods/{}/eviction"


def test_eviction_uid_precondition(make: Any) -> None:
    server = make(pod("a"))
    code, status = call(server, "POST", EVICT.format("a"), eviction("a", preconditions={"uid": "uid-old"}))
    assert (code, status["kind"], status["reason"]) == (409, "Status", "Conflict")
    assert "UID in precondition: uid-old, UID in object meta: uid-a" in status["message"]
    assert "deletionTimestamp" not in (server.pod("ml", "a") or {})["metadata"]

    code, status = call(server, "POST", EVICT.format("a"), eviction("a", preconditions={"uid": "uid-a"}))
    assert (code, status["status"]) == (201, "Success")
    assert (server.pod("ml", "a") or {})["metadata"]["deletionTimestamp"]


def test_dry_run_eviction_changes_nothing(make: Any) -> None:
    server = make(pod("a"))
    code, _ = call(server, "POST", EVICT.format("a") + "?dryRun=All", eviction("a"))
    assert code == 201
    assert "deletionTimestamp" not in (server.pod("ml", "a") or {})["metadata"]


def test_disruption_budget_is_spent_then_refuses(make: Any) -> None:
    pdb = {"kind": "PodDisruptionBudget", "metadata": {"name": "guard", "namespace": "ml"},
           "spec": {"selector": {"matchLabels": {"app": "x"}}},
           "status": {"disruptionsAllowed": 1}}  # fmt: skip
    server = make(pod("a", labels={"app": "x"}), pod("b", labels={"app": "x"}), pdb)
    assert call(server, "POST", EVICT.format("a"), eviction("a"))[0] == 201
    code, status = call(server, "POST", EVICT.format("b"), eviction("b"))
    assert (code, status["reason"]) == (429, "TooManyRequests")
    assert status["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert call(server, "POST", EVICT.format("a"), eviction("a"))[0] == 201  # already terminating: accepted


def test_terminating_pod_holds_its_gpus_until_its_grace_period_ends(make: Any, clock: FakeClock) -> None:
    server = make(node(gpus=2), pod("old", gpus=2), pod("new", gpus=2, node_name=None))
    server.step()
    assert not (server.pod("ml", "new") or {})["spec"].get("nodeName")
    conditions = (server.pod("ml", "new") or {})["status"]["conditions"]
    assert conditions[-1]["reason"] == "Unschedulable"
    assert conditions[-1]["message"] == f"0/1 nodes are available: 1 Insufficient {GPU}."

    call(server, "POST", EVICT.format("old"), eviction("old"))
    clock.now += 29
    server.step()
    assert server.pod("ml", "old") is not None and not (server.pod("ml", "new") or {})["spec"].get("nodeName")
    clock.now += 1
    server.step()
    assert server.pod("ml", "old") is None
    new = server.pod("ml", "new") or {}
    assert new["spec"]["nodeName"] == "node-1" and new["status"]["phase"] == "Running"
    reasons = [e["reason"] for e in server.objects_of("events")]
    assert reasons == ["FailedScheduling", "Killing", "Scheduled"]


def test_scheduler_honours_node_selector_and_priority(make: Any) -> None:
    low = pod("low", node_name=None)
    low["spec"].update(priority=1, nodeSelector={"pool": "gpu"})
    high = pod("high", node_name=None)
    high["spec"].update(priority=100)
    elsewhere = pod("elsewhere", node_name=None)
    elsewhere["spec"]["nodeSelector"] = {"pool": "cpu"}
    server = make(node(gpus=1), low, high, elsewhere)
    server.step()
    assert (server.pod("ml", "high") or {})["spec"]["nodeName"] == "node-1"
    assert not (server.pod("ml", "low") or {})["spec"].get("nodeName")
    assert "selector" in (server.pod("ml", "elsewhere") or {})["status"]["conditions"][-1]["message"]


def test_lease_update_with_a_stale_resource_version_conflicts(make: Any) -> None:
    server = make()
    leases = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
             "spec": {"holderIdentity": "a"}}  # fmt: skip
    code, created = call(server, "POST", leases, lease)
    assert code == 201 and created["metadata"]["resourceVersion"] and created["metadata"]["uid"]
    code, status = call(server, "POST", leases, lease)
    assert (code, status["reason"]) == (409, "AlreadyExists")

    mine = {**created, "spec": {"holderIdentity": "b"}}
    code, updated = call(server, "PUT", f"{leases}/l", mine)
    assert code == 200 and updated["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    code, status = call(server, "PUT", f"{leases}/l", {**created, "spec": {"holderIdentity": "c"}})
    assert (code, status["reason"]) == (409, "Conflict")
    assert "the object has been modified" in status["message"]
    assert server.objects_of("leases")[0]["spec"]["holderIdentity"] == "b"


def test_lists_select_by_field_and_label_and_reject_unknown_fields(make: Any) -> None:
    server = make(pod("a", labels={"app": "x", "tier": "1"}), pod("b", node_name=None, labels={"app": "y"}))

    def names(query: str) -> list[str]:
        code, body = call(server, "GET", "/api/v1/pods?" + query)
        assert code == 200, body
        return [i["metadata"]["name"] for i in body["items"]]

    assert names("fieldSelector=spec.nodeName%3D") == ["b"]
    assert names("fieldSelector=status.phase!%3DPending,metadata.namespace%3Dml") == ["a"]
    assert names("labelSelector=app+in+(x,z),tier") == ["a"]
    assert names("labelSelector=!tier") == ["b"]
    code, status = call(server, "GET", "/api/v1/pods?fieldSelector=spec.priority%3D1")
    assert (code, status["message"]) == (400, 'field label not supported: "spec.priority"')
    code, body = call(server, "GET", "/apis/resource.k8s.io/v1/resourceslices")
    assert (code, body["kind"], body["items"]) == (200, "ResourceSliceList", [])
    assert call(server, "GET", "/api/v1/pods?watch=true")[0] == 405
    code, status = call(server, "GET", "/apis/example.com/v1/widgets")
    assert (code, status["kind"], status["reason"]) == (404, "Status", "NotFound")


def test_patches(make: Any) -> None:
    server = make(pod("a", annotations={"keep": "1"}))
    path = "/api/v1/namespaces/ml/pods/a"
    code, patched = call(server, "PATCH", path, {"metadata": {"annotations": {"new": "2", "keep": None}}},
                         "application/merge-patch+json")  # fmt: skip
    assert code == 200 and patched["metadata"]["annotations"] == {"new": "2"}
    stale = {"metadata": {"resourceVersion": "1", "annotations": {"x": "y"}}}
    assert call(server, "PATCH", path, stale, "application/merge-patch+json")[0] == 409
    guarded = [{"op": "test", "path": "/metadata/annotations/new", "value": "3"},
               {"op": "replace", "path": "/metadata/annotations/new", "value": "4"}]  # fmt: skip
    assert call(server, "PATCH", path, guarded, "application/json-patch+json")[0] == 422
    guarded[0]["value"] = "2"
    code, patched = call(server, "PATCH", path, guarded, "application/json-patch+json")
    assert code == 200 and patched["metadata"]["annotations"] == {"new": "4"}
    assert call(server, "PATCH", path, {}, "application/apply-patch+yaml")[0] == 415


def test_oversized_bodies_are_refused_before_they_are_read(make: Any) -> None:
    server = make()
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /api/v1/namespaces/ml/events HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n"
        )
        answer = s.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 413") and b"RequestEntityTooLarge" in answer


def test_gpus_follow_the_pods(make: Any, clock: FakeClock, tmp_path: Path) -> None:
    owner = {"namespace": "ml", "pod": "old", "container": "main"}
    scenario = {"node": "node-1", "gpus": [
        {"index": i, "uuid": f"GPU-{i}", "model": "M", "memory_total": "80Gi", "allocations": [owner],
         "processes": [{"pid": 10 + i, "owner": owner, "phases": [{"from": 0, "utilization": 0.0}]}]}
        for i in range(2)]}  # fmt: skip
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(scenario))
    devices = GpuDevices.from_file(base, tmp_path / "scenario.yaml")
    new = pod(
        "new", gpus=2, node_name=None, annotations={UTILIZATION_ANNOTATION: "0.9", MEMORY_ANNOTATION: "10Gi"}
    )
    server = make(node(gpus=2), pod("old", gpus=2), new, devices=devices)
    out = tmp_path / "scenario.yaml"

    server.step()
    assert [len(g.processes) for g in load_scenario(out).gpus] == [1, 1]
    call(server, "POST", EVICT.format("old"), eviction("old"))
    server.step()
    gpus = load_scenario(out).gpus
    assert [len(g.processes) for g in gpus] == [0, 0]  # quiet at once ...
    assert [[a.pod for a in g.allocations] for g in gpus] == [["old"], ["old"]]  # ... still held
    clock.now += 30
    server.step()
    gpus = load_scenario(out).gpus
    assert [[a.pod for a in g.allocations] for g in gpus] == [["new"], ["new"]]
    assert [
        [(p.owner.ref.pod if p.owner.ref else None, p.phases[0].utilization) for p in g.processes]
        for g in gpus
    ] == [[("new", 0.9)], [("new", 0.9)]]
    assert devices.assigned == {("ml", "new"): [0, 1]}


def test_a_malformed_request_is_a_bad_request_not_a_dropped_connection(make: Any) -> None:
    server = make(pod("a"))
    code, status = call(server, "GET", "/api/v1/pods?limit=many")
    assert (code, status["kind"], status["reason"]) == (400, "Status", "BadRequest")
    assert call(server, "GET", "/api/v1/pods?limit=1")[0] == 200


def test_kubectl_can_read_the_fake_cluster(make: Any, tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is missing: run make deps")
    server = make(node(), pod("a", labels={"app": "x"}))
    call(server, "POST", EVICT.format("a"), eviction("a"))
    config = str(server.kubeconfig(tmp_path / "kubeconfig"))

    def kubectl_(*args: str) -> str:
        done = subprocess.run(
            [kubectl, "--kubeconfig", config, *args], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "node-1" in kubectl_("get", "nodes")
    assert re.search(r"^ml\s+a\s", kubectl_("get", "pods", "-A", "-l", "app=x"), re.MULTILINE)
    described = kubectl_("describe", "pod", "-n", "ml", "a")
    assert "Killing" in described and "Terminating" in described  # the Event, found by its involvedObject


def test_scripted_answers_match_method_path_and_body_then_run_out(make: Any) -> None:
    server = make(pod("a"))
    lease = "/apis/coordination.k8s.io/v1/namespaces/ml/leases/l"
    server.fail("PUT", lease, 504, "Timeout", "etcd", times=1, body_contains="replica-1")
    server.fail(
        "POST", "/api/v1/namespaces/ml/pods/a/eviction", 429, "TooManyRequests", "slow down",
        details={"causes": [{"reason": "X"}]}, **{"Retry-After": "7"},
    )  # fmt: skip
    # another replica's body does not match: the store answers (404, no such Lease)
    assert call(server, "PUT", lease, {"kind": "Lease", "spec": {"holderIdentity": "replica-2"}})[0] == 404
    code, status = call(server, "PUT", lease, {"kind": "Lease", "spec": {"holderIdentity": "replica-1"}})
    assert (code, status["reason"], status["message"]) == (504, "Timeout", "etcd")
    assert call(server, "PUT", lease, {"kind": "Lease", "spec": {"holderIdentity": "replica-1"}})[0] == 404
    req = urllib.request.Request(
        server.url + "/api/v1/namespaces/ml/pods/a/eviction",
        data=json.dumps({"kind": "Eviction", "metadata": {"name": "a"}}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=10)
    assert caught.value.code == 429 and caught.value.headers["Retry-After"] == "7"
    assert json.load(caught.value)["details"] == {"causes": [{"reason": "X"}]}
    assert server.pod("ml", "a")["metadata"].get("deletionTimestamp") is None  # a script changes nothing
    assert [c.code for c in server.requests("PUT", lease)] == [404, 504, 404]


def test_a_scripted_answer_can_be_late_and_not_json(make: Any) -> None:
    server = make()
    server.answer("GET", "/api/v1/pods", 200, "<html>proxy</html>", headers={"Content-Type": "text/html"})
    with urllib.request.urlopen(server.url + "/api/v1/pods", timeout=10) as r:
        assert (r.headers["Content-Type"], r.read()) == ("text/html", b"<html>proxy</html>")
    server.answer("GET", "/api/v1/nodes", 200, {"items": []}, delay=1.0)
    with pytest.raises(OSError):  # the answer comes after the client gave up; the request was recorded
        urllib.request.urlopen(server.url + "/api/v1/nodes", timeout=0.2)
    assert [c.path for c in server.requests("GET")] == ["/api/v1/pods", "/api/v1/nodes"]


def workload(replicas: int, load: str | None = None) -> list[dict[str, Any]]:
    """A Deployment and the ReplicaSet it controls, whose template asks for one GPU."""
    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "c", "resources": {"limits": {GPU: "1"}}}]},
    }  # fmt: skip
    annotations = {LOAD_ANNOTATION: load} if load else {}
    return [
        {"kind": "Deployment",
         "metadata": {"name": "web", "namespace": "ml", "uid": "dep", "annotations": annotations},
         "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template}},
        {"kind": "ReplicaSet",
         "metadata": {"name": "web-5d8f", "namespace": "ml", "uid": "rs",
                      "ownerReferences": [{"kind": "Deployment", "name": "web", "uid": "dep",
                                           "controller": True}]},
         "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template}},
    ]  # fmt: skip


def web_pods(server: FakeApiServer) -> list[dict[str, Any]]:
    return [p for p in server.objects_of("pods") if p["metadata"]["name"].startswith("web-5d8f-")]


def test_a_deployment_keeps_its_replicas_through_its_replicaset(make: Any, clock: FakeClock) -> None:
    server = make(node(gpus=4), *workload(1))
    server.step()
    (first,) = web_pods(server)
    assert first["metadata"]["ownerReferences"][0]["uid"] == "rs" and first["spec"]["nodeName"] == "node-1"
    status, _ = call(server, "PATCH", "/apis/apps/v1/namespaces/ml/deployments/web",
                     {"spec": {"replicas": 3}}, "application/merge-patch+json")  # fmt: skip
    assert status == 200
    clock.now += 60
    server.step()
    pods = web_pods(server)
    assert len(pods) == 3 and all(p["status"]["phase"] == "Running" for p in pods)
    (deployment,) = server.objects_of("deployments")
    assert deployment["status"]["replicas"] == 3
    call(server, "PATCH", "/apis/apps/v1/namespaces/ml/deployments/web", {"spec": {"replicas": 1}},
         "application/merge-patch+json")  # fmt: skip
    server.step()
    leaving = [p["metadata"]["name"] for p in web_pods(server) if p["metadata"].get("deletionTimestamp")]
    assert len(leaving) == 2 and first["metadata"]["name"] not in leaving  # the newest go first
    clock.now += 6
    server.step()
    assert [p["metadata"]["name"] for p in web_pods(server)] == [first["metadata"]["name"]]


def test_a_deployments_load_is_shared_by_its_running_replicas(make: Any, clock: FakeClock) -> None:
    load = '[{"from": 0, "utilization": 1.5}, {"from": 60, "utilization": 0.3}]'
    server = make(node(gpus=4), *workload(1, load))
    server.step()
    assert list(server.cluster.loads().values()) == [[(0.0, 1.0), (60.0, 0.3)]]  # one replica: at most 1
    call(server, "PATCH", "/apis/apps/v1/namespaces/ml/deployments/web", {"spec": {"replicas": 3}},
         "application/merge-patch+json")  # fmt: skip
    server.step()
    shares = server.cluster.loads()
    assert len(shares) == 3 and all(
        [x for phase in s for x in phase] == pytest.approx([0, 0.5, 60, 0.1]) for s in shares.values()
    )
