"""The Kubernetes adapter against an HTTP server speaking the Kubernetes API (pytest-httpserver)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import urllib3
from kubernetes import client
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from automator.conventions import LAST_RECLAIM_ANNOTATION, RECLAIM_NODE_ANNOTATION
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


def test_evict_unreachable_is_an_unknown_outcome() -> None:
    adapter = KubernetesAdapter(api_for(f"http://127.0.0.1:{free_port()}"), request_timeout=2)
    assert adapter.evict(PodKey("ml", "a")).outcome is EvictionOutcome.UNKNOWN


def test_eviction_carries_the_uid_precondition_and_dry_run(
    httpserver: HTTPServer, kube: KubernetesAdapter
) -> None:
    ok = {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
    httpserver.expect_request(EVICTION, method="POST").respond_with_json(ok, status=201)
    kube.evict(PodKey("ml", "a"), uid="u-a", dry_run=True)
    kube.evict(PodKey("ml", "a"), uid="u-a")
    (dry, _), (real, _) = httpserver.log
    assert json.loads(dry.get_data())["deleteOptions"] == {"preconditions": {"uid": "u-a"}, "dryRun": ["All"]}
    assert json.loads(real.get_data())["deleteOptions"] == {"preconditions": {"uid": "u-a"}}


def test_statefulset_pod_recreated_under_the_same_name_is_not_evicted(
    httpserver: HTTPServer, kube: KubernetesAdapter
) -> None:
    """The API server answers 409 when the uid precondition names the pod that was judged, not this one."""
    message = "Precondition failed: UID in precondition: u-old, UID in object meta: u-new"
    httpserver.expect_request(EVICTION, method="POST").respond_with_json(
        status(409, "Conflict", message), status=409
    )
    result = kube.evict(PodKey("ml", "a"), uid="u-old")
    assert result.outcome is EvictionOutcome.CONFLICT and "u-new" in result.message


def test_api_throttling_429_is_not_a_budget_refusal(httpserver: HTTPServer, kube: KubernetesAdapter) -> None:
    httpserver.expect_request(EVICTION, method="POST").respond_with_json(
        status(429, "TooManyRequests", "Too many requests, please try again later."),
        status=429,
        headers={"Retry-After": "7"},
    )
    result = kube.evict(PodKey("ml", "a"), uid="u-a")
    assert result.outcome is EvictionOutcome.THROTTLED and result.retry_after == 7


def test_budget_429_is_read_from_its_cause(httpserver: HTTPServer, kube: KubernetesAdapter) -> None:
    body = status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
    body["details"] = {
        "causes": [{"reason": "DisruptionBudget", "message": "The disruption budget g needs 2"}]
    }
    httpserver.expect_request(EVICTION, method="POST").respond_with_json(
        body, status=429, headers={"Retry-After": "10"}
    )
    assert kube.evict(PodKey("ml", "a"), uid="u-a").outcome is EvictionOutcome.REFUSED_PDB


def test_timeout_after_the_server_accepted_is_unknown_not_refused(httpserver: HTTPServer) -> None:
    accepted = threading.Event()

    def slow(request: Request) -> Response:
        accepted.set()  # the server has taken the eviction; its answer comes too late
        time.sleep(1.5)
        return Response(json.dumps({"kind": "Status", "code": 201}), 201, content_type="application/json")

    httpserver.expect_request(EVICTION, method="POST").respond_with_handler(slow)
    adapter = KubernetesAdapter(api_for(httpserver.url_for("")), request_timeout=0.3)
    result = adapter.evict(PodKey("ml", "a"), uid="u-a")
    assert accepted.is_set() and result.outcome is EvictionOutcome.UNKNOWN


def test_get_pod_reads_a_plain_record_or_none(httpserver: HTTPServer, kube: KubernetesAdapter) -> None:
    full = json.loads(json.dumps(POD_A))
    full["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    full["spec"]["volumes"] = [{"name": "data"}]
    httpserver.expect_request("/api/v1/namespaces/ml/pods/a", method="GET").respond_with_json(full)
    httpserver.expect_request("/api/v1/namespaces/ml/pods/gone", method="GET").respond_with_json(
        status(404, "NotFound", 'pods "gone" not found'), status=404
    )
    pod = kube.get_pod(PodKey("ml", "a"))
    assert pod is not None and pod["metadata"]["uid"] == "u-a" and pod["spec"]["nodeName"] == "node-1"
    assert "managedFields" not in pod["metadata"] and "volumes" not in pod["spec"]
    assert kube.get_pod(PodKey("ml", "gone")) is None


def test_snapshot_keeps_pending_pods_and_pods_on_gpu_nodes_only(
    httpserver: HTTPServer, kube: KubernetesAdapter
) -> None:
    gpu = {"metadata": {"name": "node-1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    cpu = {"metadata": {"name": "cpu-1"}, "status": {"allocatable": {"cpu": "8"}}}
    on_cpu = {"metadata": {"name": "web", "namespace": "ml"}, "spec": {"nodeName": "cpu-1", "containers": []}}
    managed = json.loads(json.dumps(POD_A))
    managed["metadata"]["managedFields"] = [{"manager": "x"}]
    httpserver.expect_request("/api/v1/nodes").respond_with_json(a_list("Node", [gpu, cpu]))
    httpserver.expect_request("/api/v1/pods").respond_with_json(a_list("Pod", [managed, POD_B, on_cpu]))
    for path in ("/apis/scheduling.k8s.io/v1/priorityclasses", "/apis/policy/v1/poddisruptionbudgets"):
        httpserver.expect_request(path).respond_with_json(a_list("X", []))
    state = kube.snapshot()
    assert [p["metadata"]["name"] for p in state.pods] == ["a", "b"]
    assert "managedFields" not in state.pods[0]["metadata"]


def test_annotate_preemptor_is_a_json_merge_patch(httpserver: HTTPServer, kube: KubernetesAdapter) -> None:
    httpserver.expect_request("/api/v1/namespaces/team/pods/p", method="PATCH").respond_with_json(POD_B)
    written = {LAST_RECLAIM_ANNOTATION: "2024-06-01T14:00:05Z", RECLAIM_NODE_ANNOTATION: "node-1"}
    kube.annotate_preemptor(PodKey("team", "p"), written, uid="u-p")
    (request, _), *_ = httpserver.log
    assert request.headers["Content-Type"] == "application/merge-patch+json"
    assert json.loads(request.get_data()) == {"metadata": {"annotations": written, "uid": "u-p"}}


def test_annotate_failure_raises(httpserver: HTTPServer, kube: KubernetesAdapter) -> None:
    httpserver.expect_request("/api/v1/namespaces/team/pods/p", method="PATCH").respond_with_json(
        status(404, "NotFound", 'pods "p" not found'), status=404
    )
    with pytest.raises(KubernetesUnavailable, match="patch pod team/p: 404"):
        kube.annotate_preemptor(PodKey("team", "p"), {LAST_RECLAIM_ANNOTATION: "2024-06-01T00:00:00Z"})


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


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_hanging_lease_renewal_never_leaves_two_leaders(httpserver: HTTPServer) -> None:
    """Replica 1 leads; its renewals then hang. It must stop leading (renew deadline, call timeouts) before
    replica 2 may take the lease (lease duration, by replica 2's own clock)."""
    server = LeaseServer()
    hang = threading.Event()
    idle = threading.Event()
    idle.set()

    def handler(request: Request) -> Response:
        if hang.is_set() and "replica-1" in request.get_data(as_text=True):
            idle.clear()
            time.sleep(0.5)  # longer than the request timeout below; the renewal never lands
            idle.set()
            return Response(json.dumps(status(504, "Timeout", "etcd")), 504, content_type="application/json")
        return server(request)

    httpserver.expect_request(LEASES).respond_with_handler(handler)
    httpserver.expect_request(LEASES + "/automator").respond_with_handler(handler)
    cfg = client.Configuration(host=httpserver.url_for("").rstrip("/"))
    cfg.retries = False  # as api_client() builds it
    api = client.ApiClient(cfg)
    c1, c2 = Clock(), Clock()
    timings = {"lease_duration": 15, "renew_deadline": 10, "retry_period": 2, "request_timeout": 0.1}
    one = LeaderElector(api, "automator", "gpu-steward", "replica-1", clock=c1, **timings)  # type: ignore[arg-type]
    two = LeaderElector(api, "automator", "gpu-steward", "replica-2", clock=c2, **timings)  # type: ignore[arg-type]
    assert one.try_acquire_or_renew() and one.is_leader
    assert not two.try_acquire_or_renew()  # held, freshly observed
    hang.set()
    for _ in range(9):  # every 2 s replica 1 tries to renew; each try times out
        c1.t += 2
        c2.t += 2
        with contextlib.suppress(urllib3.exceptions.HTTPError):  # the renewal times out
            one.try_acquire_or_renew()
        assert idle.wait(5)  # the test server answers one request at a time
        leaders = [one.is_leader, two.is_leader or two.try_acquire_or_renew()]
        assert leaders.count(True) <= 1, (c1.t, leaders)
    assert not one.is_leader and two.is_leader  # replica 2 took over, replica 1 had already stepped down


def test_leader_election_rejects_unsafe_timings() -> None:
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderElector(api_for("http://127.0.0.1:1"), "l", "ns", "me", lease_duration=10, renew_deadline=10)
