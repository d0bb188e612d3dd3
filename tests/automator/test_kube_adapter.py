"""The Kubernetes adapter against an HTTP server speaking the Kubernetes API (pytest-httpserver)."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from automator.conventions import LAST_RECLAIM_ANNOTATION
from automator.kube import ACTIVE_PODS, KubernetesAdapter, LeaderElector
from automator.model import PodKey
from automator.ports import EvictionOutcome, KubernetesUnavailable
from tools.promserver import free_port


def api_for(url: str) -> client.ApiClient:
    return client.ApiClient(client.Configuration(host=url.rstrip("/")))


@pytest.fixture
def kube(httpserver: HTTPServer) -> KubernetesAdapter:
    return KubernetesAdapter(api_for(httpserver.url_for("")), identity="automator-0")


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def a_list(kind: str, items: list[dict[str, Any]], cont: str = "") -> dict[str, Any]:
    return {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {"continue": cont}, "items": items}


POD_A = {
    "metadata": {"name": "a", "namespace": "ml", "uid": "u-a"},
    "spec": {"nodeName": "node-1", "priorityClassName": "batch", "containers": [{"name": "main"}]},
    "status": {"phase": "Running"},
}
POD_B = {
    "metadata": {"name": "b", "namespace": "ml"},
    "spec": {"containers": []},
    "status": {"phase": "Pending"},
}


def test_snapshot_lists_every_kind_as_camel_case_json(
    httpserver: HTTPServer, kube: KubernetesAdapter
) -> None:
    node = {"metadata": {"name": "node-1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    pc = {"metadata": {"name": "batch"}, "value": 100, "preemptionPolicy": "Never"}
    pdb = {"metadata": {"name": "guard", "namespace": "ml"}, "status": {"disruptionsAllowed": 0}}
    httpserver.expect_request("/api/v1/nodes").respond_with_json(a_list("Node", [node]))
    # Two pages: the adapter must follow the continue token with the same field selector.
    first = {"fieldSelector": ACTIVE_PODS, "limit": "500"}
    httpserver.expect_request("/api/v1/pods", query_string=first).respond_with_json(
        a_list("Pod", [POD_A], "tok")
    )
    httpserver.expect_request("/api/v1/pods", query_string={**first, "continue": "tok"}).respond_with_json(
        a_list("Pod", [POD_B])
    )
    httpserver.expect_request("/apis/scheduling.k8s.io/v1/priorityclasses").respond_with_json(
        a_list("PriorityClass", [pc])
    )
    httpserver.expect_request("/apis/policy/v1/poddisruptionbudgets").respond_with_json(
        a_list("PodDisruptionBudget", [pdb])
    )

    state = kube.snapshot()

    assert [p["metadata"]["name"] for p in state.pods] == ["a", "b"]
    assert state.pods[0]["spec"]["nodeName"] == "node-1"  # camelCase, as kubectl -o json
    assert state.pods[0]["spec"]["priorityClassName"] == "batch"
    assert (state.pods[0]["kind"], state.pods[0]["apiVersion"]) == ("Pod", "v1")
    assert state.nodes[0]["status"]["allocatable"] == {"nvidia.com/gpu": "8"}
    assert state.priority_classes[0]["preemptionPolicy"] == "Never"
    assert state.priority_classes[0]["apiVersion"] == "scheduling.k8s.io/v1"
    assert state.pdbs[0]["status"]["disruptionsAllowed"] == 0
    assert (state.pdbs[0]["kind"], state.pdbs[0]["apiVersion"]) == ("PodDisruptionBudget", "policy/v1")


def test_snapshot_error_names_the_call(httpserver: HTTPServer, kube: KubernetesAdapter) -> None:
    httpserver.expect_request("/api/v1/nodes").respond_with_json(
        status(403, "Forbidden", 'nodes is forbidden: User "x" cannot list resource "nodes"'), status=403
    )
    with pytest.raises(KubernetesUnavailable, match=r"list nodes: 403 nodes is forbidden"):
        kube.snapshot()


def test_snapshot_unreachable_api_server() -> None:
    adapter = KubernetesAdapter(api_for(f"http://127.0.0.1:{free_port()}"), request_timeout=2)
    with pytest.raises(KubernetesUnavailable, match="list nodes"):
        adapter.snapshot()


EVICTION = "/api/v1/namespaces/ml/pods/a/eviction"


@pytest.mark.parametrize(
    ("code", "body", "outcome"),
    [
        (201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}, EvictionOutcome.OK),
        (200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}, EvictionOutcome.OK),
        (
            429,
            status(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
            ),
            EvictionOutcome.REFUSED_PDB,
        ),
        (
            500,
            status(500, "InternalError", "This pod has more than one PodDisruptionBudget"),
            EvictionOutcome.ERROR,
        ),
        (404, status(404, "NotFound", 'pods "a" not found'), EvictionOutcome.NOT_FOUND),
        (409, status(409, "Conflict", "Operation cannot be fulfilled"), EvictionOutcome.CONFLICT),
        (403, status(403, "Forbidden", "cannot create pods/eviction"), EvictionOutcome.ERROR),
    ],
)
def test_evict(
    httpserver: HTTPServer, kube: KubernetesAdapter, code: int, body: dict[str, Any], outcome: EvictionOutcome
) -> None:
    httpserver.expect_request(EVICTION, method="POST").respond_with_json(body, status=code)

    result = kube.evict(PodKey("ml", "a"))

    assert result.outcome is outcome
    if code >= 400:
        assert result.status == code and result.message == body["message"]
    (request, _), *rest = httpserver.log
    assert rest == []
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.get_data()) == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "a", "namespace": "ml"},
    }


def test_evict_unreachable_is_an_error() -> None:
    adapter = KubernetesAdapter(api_for(f"http://127.0.0.1:{free_port()}"), request_timeout=2)
    assert adapter.evict(PodKey("ml", "a")).outcome is EvictionOutcome.ERROR


def test_annotate_preemptor_is_a_json_merge_patch(httpserver: HTTPServer, kube: KubernetesAdapter) -> None:
    httpserver.expect_request("/api/v1/namespaces/team/pods/p", method="PATCH").respond_with_json(POD_B)
    kube.annotate_preemptor(PodKey("team", "p"), datetime(2024, 6, 1, 14, 0, 5, 123, tzinfo=UTC))
    (request, _), *_ = httpserver.log
    assert request.headers["Content-Type"] == "application/merge-patch+json"
    assert json.loads(request.get_data()) == {
        "metadata": {"annotations": {LAST_RECLAIM_ANNOTATION: "2024-06-01T14:00:05Z"}}
    }


def test_annotate_failure_raises(httpserver: HTTPServer, kube: KubernetesAdapter) -> None:
    httpserver.expect_request("/api/v1/namespaces/team/pods/p", method="PATCH").respond_with_json(
        status(404, "NotFound", 'pods "p" not found'), status=404
    )
    with pytest.raises(KubernetesUnavailable, match="patch pod team/p: 404"):
        kube.annotate_preemptor(PodKey("team", "p"), datetime(2024, 6, 1, tzinfo=UTC))


def test_event_is_a_core_v1_event_on_the_pod(httpserver: HTTPServer, kube: KubernetesAdapter) -> None:
    httpserver.expect_request("/api/v1/namespaces/ml/events", method="POST").respond_with_json({}, status=201)
    kube.event(PodKey("ml", "a"), "Normal", "GpuIdleReclaimed", "x" * 2000, uid="u-a")
    kube.event(PodKey("ml", "a"), "Warning", "InvalidReclaimAnnotation", "bad")
    (first, _), (second, _) = httpserver.log
    body = json.loads(first.get_data())
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ml",
        "name": "a",
        "uid": "u-a",
    }
    assert (body["type"], body["reason"], len(body["message"])) == ("Normal", "GpuIdleReclaimed", 1024)
    assert body["metadata"]["namespace"] == "ml" and body["metadata"]["name"].startswith("a.")
    assert body["source"] == {"component": "gpu-steward-automator"}
    assert body["reportingInstance"] == "automator-0" and body["count"] == 1
    assert body["firstTimestamp"] == body["lastTimestamp"]
    other = json.loads(second.get_data())
    assert "uid" not in other["involvedObject"] and other["metadata"]["name"] != body["metadata"]["name"]


def test_event_failure_raises(httpserver: HTTPServer, kube: KubernetesAdapter) -> None:
    httpserver.expect_request("/api/v1/namespaces/ml/events", method="POST").respond_with_json(
        status(403, "Forbidden", "cannot create events"), status=403
    )
    with pytest.raises(KubernetesUnavailable, match="event R on ml/a: 403 cannot create events"):
        kube.event(PodKey("ml", "a"), "Normal", "R", "m")


class LeaseServer:
    """coordination.k8s.io/v1 Leases in memory: enough of the API for the client's LeaseLock."""

    def __init__(self, lease: dict[str, Any] | None = None) -> None:
        self.lease = lease
        self.lock = threading.Lock()
        self.requests: list[str] = []

    def __call__(self, request: Request) -> Response:
        with self.lock:
            self.requests.append(request.method)
            if request.method == "GET":
                if self.lease is None:
                    return Response(
                        json.dumps(status(404, "NotFound", "not found")), 404, content_type="application/json"
                    )
            elif request.method in ("POST", "PUT"):
                body = json.loads(request.get_data())
                body.setdefault("metadata", {})["namespace"] = "gpu-steward"
                self.lease = body
            return Response(json.dumps(self.lease), 200, content_type="application/json")


LEASES = "/apis/coordination.k8s.io/v1/namespaces/gpu-steward/leases"


def wait_until(predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_leader_election_takes_a_free_lease(httpserver: HTTPServer) -> None:
    server = LeaseServer()
    httpserver.expect_request(LEASES).respond_with_handler(server)
    httpserver.expect_request(LEASES + "/automator").respond_with_handler(server)
    changes: list[bool] = []
    elector = LeaderElector(
        api_for(httpserver.url_for("")), "automator", "gpu-steward", "replica-1",
        lease_duration=4, renew_deadline=3, retry_period=1, on_change=changes.append,
    )  # fmt: skip
    elector.start()
    try:
        assert wait_until(lambda: elector.is_leader)
        assert changes == [True]
        assert server.lease is not None and server.lease["spec"]["holderIdentity"] == "replica-1"
        assert "POST" in server.requests
    finally:
        elector.stop(timeout=10)
    assert not elector.is_leader and changes == [True, False]


def test_leader_election_respects_a_held_lease(httpserver: HTTPServer) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    held = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "automator", "namespace": "gpu-steward", "resourceVersion": "1"},
        "spec": {
            "holderIdentity": "replica-0",
            "leaseDurationSeconds": 600,
            "acquireTime": now,
            "renewTime": now,
        },
    }
    server = LeaseServer(held)
    httpserver.expect_request(LEASES + "/automator").respond_with_handler(server)
    elector = LeaderElector(
        api_for(httpserver.url_for("")), "automator", "gpu-steward", "replica-1",
        lease_duration=60, renew_deadline=3, retry_period=1,
    )  # fmt: skip
    elector.start()
    try:
        # Our own lease_duration (60 s) has not passed since we saw the holder: we must keep off.
        assert wait_until(lambda: server.requests.count("GET") >= 2)
        assert not elector.is_leader
        assert "PUT" not in server.requests and server.lease is not None
        assert server.lease["spec"]["holderIdentity"] == "replica-0"
    finally:
        elector.stop(timeout=10)


def test_leader_election_rejects_unsafe_timings() -> None:
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderElector(api_for("http://127.0.0.1:1"), "l", "ns", "me", lease_duration=10, renew_deadline=10)
