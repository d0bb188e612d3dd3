"""The Kubernetes adapter against a real HTTP server speaking the Kubernetes API (tools/fakekube.py)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from automator import kube as kube_module
from automator.conventions import LAST_RECLAIM_ANNOTATION
from automator.kube import ACTIVE_PODS, KubernetesAdapter, LeaderElector
from automator.model import PodKey
from automator.ports import EvictionOutcome, KubernetesUnavailable
from tools.fakekube import FakeApiServer
from tools.promserver import free_port


def api_for(url: str) -> client.ApiClient:
    return client.ApiClient(client.Configuration(host=url.rstrip("/")))


@pytest.fixture
def kube(fake_kube: FakeApiServer) -> KubernetesAdapter:
    return KubernetesAdapter(api_for(fake_kube.url), identity="automator-0")


def pod(name: str, phase: str = "Running", **meta: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", **meta},
        "spec": {"nodeName": "node-1", "priorityClassName": "batch", "containers": [{"name": "main"}]},
        "status": {"phase": phase},
    }


def test_snapshot_lists_every_kind_as_camel_case_json(
    fake_kube: FakeApiServer, kube: KubernetesAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_kube.put(
        {"kind": "Node", "metadata": {"name": "node-1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    )
    for obj in (pod("a", uid="u-a"), pod("b", "Pending"), pod("done", "Succeeded"), pod("failed", "Failed")):
        fake_kube.put(obj)
    fake_kube.put(
        {"kind": "PriorityClass", "metadata": {"name": "batch"}, "value": 100, "preemptionPolicy": "Never"}
    )
    fake_kube.put(
        {"kind": "PodDisruptionBudget", "metadata": {"name": "guard", "namespace": "ml"},
         "status": {"disruptionsAllowed": 0}}
    )  # fmt: skip
    # One pod per page: the adapter must follow the continue token with the same field selector.
    monkeypatch.setattr(kube_module, "PAGE_SIZE", 1)

    state = kube.snapshot()

    assert [p["metadata"]["name"] for p in state.pods] == ["a", "b"]  # finished pods filtered by the server
    pages = [c.query for c in fake_kube.calls if c.path == "/api/v1/pods"]
    assert len(pages) == 2 and all(q["fieldSelector"] == [ACTIVE_PODS] and q["limit"] == ["1"] for q in pages)
    assert "continue" not in pages[0] and pages[1]["continue"]
    assert state.pods[0]["spec"]["nodeName"] == "node-1"  # camelCase, as kubectl -o json
    assert state.pods[0]["spec"]["priorityClassName"] == "batch"
    assert state.pods[0]["metadata"]["uid"] == "u-a" and state.pods[0]["metadata"]["resourceVersion"]
    assert (state.pods[0]["kind"], state.pods[0]["apiVersion"]) == ("Pod", "v1")
    assert state.nodes[0]["status"]["allocatable"] == {"nvidia.com/gpu": "8"}
    assert state.priority_classes[0]["preemptionPolicy"] == "Never"
    assert state.priority_classes[0]["apiVersion"] == "scheduling.k8s.io/v1"
    assert state.pdbs[0]["status"]["disruptionsAllowed"] == 0
    assert (state.pdbs[0]["kind"], state.pdbs[0]["apiVersion"]) == ("PodDisruptionBudget", "policy/v1")


def test_snapshot_error_names_the_call(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    fake_kube.fail(
        "GET", "/api/v1/nodes", 403, "Forbidden", 'nodes is forbidden: User "x" cannot list resource "nodes"'
    )
    with pytest.raises(KubernetesUnavailable, match=r"list nodes: 403 nodes is forbidden"):
        kube.snapshot()


def test_snapshot_unreachable_api_server() -> None:
    adapter = KubernetesAdapter(api_for(f"http://127.0.0.1:{free_port()}"), request_timeout=2)
    with pytest.raises(KubernetesUnavailable, match="list nodes"):
        adapter.snapshot()


EVICTION = "/api/v1/namespaces/ml/pods/a/eviction"
EVICTION_BODY = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a", "namespace": "ml"}}


def test_evict_makes_the_pod_terminate(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    fake_kube.put(pod("a"))

    result = kube.evict(PodKey("ml", "a"))

    assert (result.outcome, result.status) == (EvictionOutcome.OK, 201)
    (call,) = fake_kube.calls
    assert (call.method, call.path, call.code) == ("POST", EVICTION, 201)
    assert call.content_type == "application/json"
    assert {k: call.body[k] for k in EVICTION_BODY} == EVICTION_BODY
    after = fake_kube.pod("ml", "a")
    assert after is not None and after["metadata"]["deletionTimestamp"]  # terminating, still holding its GPUs


def test_evict_refused_by_a_disruption_budget(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    fake_kube.put(pod("a", labels={"app": "train"}))
    fake_kube.put(
        {"kind": "PodDisruptionBudget", "metadata": {"name": "guard", "namespace": "ml"},
         "spec": {"selector": {"matchLabels": {"app": "train"}}}, "status": {"disruptionsAllowed": 0}}
    )  # fmt: skip

    result = kube.evict(PodKey("ml", "a"))

    assert (result.outcome, result.status) == (EvictionOutcome.REFUSED_PDB, 429)
    assert result.message == "Cannot evict pod as it would violate the pod's disruption budget."
    after = fake_kube.pod("ml", "a")
    assert after is not None and "deletionTimestamp" not in after["metadata"]


def test_evict_a_missing_pod_is_not_found(kube: KubernetesAdapter) -> None:
    result = kube.evict(PodKey("ml", "a"))
    assert (result.outcome, result.status, result.message) == (
        EvictionOutcome.NOT_FOUND,
        404,
        'pods "a" not found',
    )


@pytest.mark.parametrize(
    ("code", "reason", "message", "outcome"),
    [
        (500, "InternalError", "This pod has more than one PodDisruptionBudget", EvictionOutcome.ERROR),
        (409, "Conflict", "Operation cannot be fulfilled", EvictionOutcome.CONFLICT),
        (403, "Forbidden", "cannot create pods/eviction", EvictionOutcome.ERROR),
    ],
)
def test_evict_errors(
    fake_kube: FakeApiServer,
    kube: KubernetesAdapter,
    code: int,
    reason: str,
    message: str,
    outcome: EvictionOutcome,
) -> None:
    fake_kube.put(pod("a"))
    fake_kube.fail("POST", EVICTION, code, reason, message)

    result = kube.evict(PodKey("ml", "a"))

    assert (result.outcome, result.status, result.message) == (outcome, code, message)
    assert len(fake_kube.calls) == 1


def test_evict_accepts_200(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    fake_kube.answer(
        "POST", EVICTION, 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}
    )
    assert kube.evict(PodKey("ml", "a")).outcome is EvictionOutcome.OK


def test_evict_unreachable_is_an_error() -> None:
    adapter = KubernetesAdapter(api_for(f"http://127.0.0.1:{free_port()}"), request_timeout=2)
    assert adapter.evict(PodKey("ml", "a")).outcome is EvictionOutcome.ERROR


def test_annotate_preemptor_is_a_json_merge_patch(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    fake_kube.put({**pod("p"), "metadata": {"name": "p", "namespace": "team", "annotations": {"keep": "me"}}})
    kube.annotate_preemptor(PodKey("team", "p"), datetime(2024, 6, 1, 14, 0, 5, 123, tzinfo=UTC))
    (call,) = fake_kube.calls
    assert (call.method, call.path, call.code) == ("PATCH", "/api/v1/namespaces/team/pods/p", 200)
    assert call.content_type == "application/merge-patch+json"
    assert call.body == {"metadata": {"annotations": {LAST_RECLAIM_ANNOTATION: "2024-06-01T14:00:05Z"}}}
    after = fake_kube.pod("team", "p")
    assert after is not None
    assert after["metadata"]["annotations"] == {"keep": "me", LAST_RECLAIM_ANNOTATION: "2024-06-01T14:00:05Z"}


def test_annotate_failure_raises(kube: KubernetesAdapter) -> None:
    with pytest.raises(KubernetesUnavailable, match='patch pod team/p: 404 pods "p" not found'):
        kube.annotate_preemptor(PodKey("team", "p"), datetime(2024, 6, 1, tzinfo=UTC))


def test_event_is_a_core_v1_event_on_the_pod(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    kube.event(PodKey("ml", "a"), "Normal", "GpuIdleReclaimed", "x" * 2000, uid="u-a")
    kube.event(PodKey("ml", "a"), "Warning", "InvalidReclaimAnnotation", "bad")
    first, second = fake_kube.calls
    assert [(c.method, c.path, c.code) for c in (first, second)] == [
        ("POST", "/api/v1/namespaces/ml/events", 201)
    ] * 2
    body = first.body
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
    other = second.body
    assert "uid" not in other["involvedObject"] and other["metadata"]["name"] != body["metadata"]["name"]
    assert sorted(e["reason"] for e in fake_kube.objects_of("events")) == [
        "GpuIdleReclaimed",
        "InvalidReclaimAnnotation",
    ]


def test_event_failure_raises(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    fake_kube.fail("POST", "/api/v1/namespaces/ml/events", 403, "Forbidden", "cannot create events")
    with pytest.raises(KubernetesUnavailable, match="event R on ml/a: 403 cannot create events"):
        kube.event(PodKey("ml", "a"), "Normal", "R", "m")


LEASES = "/apis/coordination.k8s.io/v1/namespaces/gpu-steward/leases"


def wait_until(predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def lease_methods(fake_kube: FakeApiServer) -> list[str]:
    return [c.method for c in list(fake_kube.calls) if c.path.startswith(LEASES)]


def test_leader_election_takes_a_free_lease(fake_kube: FakeApiServer) -> None:
    changes: list[bool] = []
    elector = LeaderElector(
        api_for(fake_kube.url), "automator", "gpu-steward", "replica-1",
        lease_duration=4, renew_deadline=3, retry_period=1, on_change=changes.append,
    )  # fmt: skip
    elector.start()
    try:
        assert wait_until(lambda: elector.is_leader)
        assert changes == [True]
        (lease,) = fake_kube.objects_of("leases")
        assert lease["spec"]["holderIdentity"] == "replica-1"
        assert "POST" in lease_methods(fake_kube)
        assert wait_until(lambda: "PUT" in lease_methods(fake_kube))  # renewed with its resourceVersion
    finally:
        elector.stop(timeout=10)
    assert not elector.is_leader and changes == [True, False]
    first, *rest = fake_kube.calls
    assert (first.method, first.code) == ("GET", 404)  # no Lease yet: it creates one
    assert all(c.code < 400 for c in rest), [(c.method, c.code) for c in rest]  # renewals never conflict


def test_leader_election_respects_a_held_lease(fake_kube: FakeApiServer) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    fake_kube.put(
        {
            "kind": "Lease",
            "metadata": {"name": "automator", "namespace": "gpu-steward"},
            "spec": {
                "holderIdentity": "replica-0",
                "leaseDurationSeconds": 600,
                "acquireTime": now,
                "renewTime": now,
            },
        }
    )
    elector = LeaderElector(
        api_for(fake_kube.url), "automator", "gpu-steward", "replica-1",
        lease_duration=60, renew_deadline=3, retry_period=1,
    )  # fmt: skip
    elector.start()
    try:
        # Our own lease_duration (60 s) has not passed since we saw the holder: we must keep off.
        assert wait_until(lambda: lease_methods(fake_kube).count("GET") >= 2)
        assert not elector.is_leader
        assert "PUT" not in lease_methods(fake_kube)
        (lease,) = fake_kube.objects_of("leases")
        assert lease["spec"]["holderIdentity"] == "replica-0"
    finally:
        elector.stop(timeout=10)


def test_leader_election_rejects_unsafe_timings() -> None:
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderElector(api_for("http://127.0.0.1:1"), "l", "ns", "me", lease_duration=10, renew_deadline=10)
