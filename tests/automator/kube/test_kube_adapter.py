"""The Kubernetes adapter against a real HTTP server speaking the Kubernetes API (tools/fakes/fakekube.py, the
`fake_kube` fixture of tests/conftest.py): its objects answer the reads, its Evictions, patches, Events and
Leases the writes, and `answer()`/`fail()` script the errors a real API server gives."""

from __future__ import annotations

import contextlib
import copy
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import urllib3
from kubernetes import client

from automator.kube import ACTIVE_PODS, KubernetesAdapter, LeaderElector
from automator.objects.keys import ObjectKey
from automator.ports import EvictionOutcome, KubernetesUnavailable
from steward_common.conventions import LAST_RECLAIM_ANNOTATION, RECLAIM_NODE_ANNOTATION
from tests.fakeclock import FakeClock
from tools.fakes.fakekube import FakeApiServer
from tools.fakes.promserver import free_port


def api_for(url: str) -> client.ApiClient:
    return client.ApiClient(client.Configuration(host=url.rstrip("/")))


@pytest.fixture
def kube(fake_kube: FakeApiServer) -> KubernetesAdapter:
    return KubernetesAdapter(api_for(fake_kube.url), identity="automator-0")


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


POD_A = {
    "kind": "Pod",
    "metadata": {"name": "a", "namespace": "ml", "uid": "u-a"},
    "spec": {"nodeName": "node-1", "priorityClassName": "batch", "containers": [{"name": "main"}]},
    "status": {"phase": "Running"},
}
POD_B = {
    "kind": "Pod",
    "metadata": {"name": "b", "namespace": "ml"},
    "spec": {"containers": []},
    "status": {"phase": "Pending"},
}
GPU_NODE = {
    "kind": "Node",
    "metadata": {"name": "node-1"},
    "status": {"allocatable": {"nvidia.com/gpu": "8"}},
}


def test_snapshot_lists_every_kind_as_camel_case_json(
    fake_kube: FakeApiServer, kube: KubernetesAdapter, monkeypatch: pytest.MonkeyPatch
) -> None:
    pc = {"kind": "PriorityClass", "metadata": {"name": "batch"}, "value": 100, "preemptionPolicy": "Never"}
    pdb = {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard", "namespace": "ml"},
        "status": {"disruptionsAllowed": 0},
    }
    finished = {**copy.deepcopy(POD_B), "metadata": {"name": "done", "namespace": "ml"}}
    finished["status"] = {"phase": "Succeeded"}
    for obj in (GPU_NODE, POD_A, POD_B, finished, pc, pdb):
        fake_kube.put(obj)
    # Pages of one: the adapter must follow the continue token with the same field selector.
    monkeypatch.setattr("automator.kube.client.PAGE_SIZE", 1)

    state = kube.snapshot()

    assert [p.key.name for p in state.pods] == ["a", "b"]
    assert state.pods[0].node_name == "node-1"  # decoded from camelCase, as kubectl -o json
    assert state.pods[0].class_name == "batch"
    assert state.nodes[0].allocatable == {"nvidia.com/gpu": "8"}
    assert [pc.name for pc in state.priority_classes] == ["batch"]
    assert [(p.namespace, p.name, p.allowed) for p in state.pdbs] == [("ml", "guard", 0)]
    pages = fake_kube.requests("GET", "/api/v1/pods")
    assert len(pages) == 2
    assert all(p.query["fieldSelector"] == [ACTIVE_PODS] and p.query["limit"] == ["1"] for p in pages)
    assert "continue" not in pages[0].query and pages[1].query["continue"] != [""]


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
        # Any 5xx may hide an eviction that still commits: not a refusal.
        (
            500,
            status(500, "InternalError", "This pod has more than one PodDisruptionBudget"),
            EvictionOutcome.UNKNOWN,
        ),
        (502, status(502, "InternalError", "bad gateway"), EvictionOutcome.UNKNOWN),
        (503, status(503, "ServiceUnavailable", "unavailable"), EvictionOutcome.UNKNOWN),
        (504, status(504, "Timeout", "no response in time"), EvictionOutcome.UNKNOWN),
        (404, status(404, "NotFound", 'pods "a" not found'), EvictionOutcome.NOT_FOUND),
        (409, status(409, "Conflict", "Operation cannot be fulfilled"), EvictionOutcome.CONFLICT),
        (403, status(403, "Forbidden", "cannot create pods/eviction"), EvictionOutcome.ERROR),
    ],
)
def test_evict(
    fake_kube: FakeApiServer,
    kube: KubernetesAdapter,
    code: int,
    body: dict[str, Any],
    outcome: EvictionOutcome,
) -> None:
    fake_kube.answer("POST", EVICTION, code, body)

    result = kube.evict(ObjectKey("ml", "a"))

    assert result.outcome is outcome
    if code >= 400:
        assert result.status == code and result.message == body["message"]
    request, *rest = fake_kube.calls
    assert rest == []
    assert request.content_type == "application/json"
    assert request.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "a", "namespace": "ml"},
    }


def test_evict_unreachable_is_an_unknown_outcome() -> None:
    adapter = KubernetesAdapter(api_for(f"http://127.0.0.1:{free_port()}"), request_timeout=2)
    assert adapter.evict(ObjectKey("ml", "a")).outcome is EvictionOutcome.UNKNOWN


def test_eviction_carries_the_uid_precondition_and_dry_run(
    fake_kube: FakeApiServer, kube: KubernetesAdapter
) -> None:
    fake_kube.put(POD_A)
    assert kube.evict(ObjectKey("ml", "a"), uid="u-a", dry_run=True).outcome is EvictionOutcome.OK
    pod = fake_kube.pod("ml", "a")
    assert pod is not None and "deletionTimestamp" not in pod["metadata"]  # a dry run changes nothing
    assert kube.evict(ObjectKey("ml", "a"), uid="u-a").outcome is EvictionOutcome.OK
    dry, real = fake_kube.calls
    assert dry.body["deleteOptions"] == {"preconditions": {"uid": "u-a"}, "dryRun": ["All"]}
    assert real.body["deleteOptions"] == {"preconditions": {"uid": "u-a"}}
    pod = fake_kube.pod("ml", "a")
    assert pod is not None and pod["metadata"]["deletionTimestamp"]  # accepted: terminating


def test_statefulset_pod_recreated_under_the_same_name_is_not_evicted(
    fake_kube: FakeApiServer, kube: KubernetesAdapter
) -> None:
    """The API server answers 409 when the uid precondition names the pod that was judged, not this one."""
    fake_kube.put({**POD_A, "metadata": {**POD_A["metadata"], "uid": "u-new"}})  # type: ignore[dict-item]
    result = kube.evict(ObjectKey("ml", "a"), uid="u-old")
    assert result.outcome is EvictionOutcome.CONFLICT and "u-new" in result.message
    pod = fake_kube.pod("ml", "a")
    assert pod is not None and "deletionTimestamp" not in pod["metadata"]


def test_api_throttling_429_is_not_a_budget_refusal(
    fake_kube: FakeApiServer, kube: KubernetesAdapter
) -> None:
    fake_kube.fail(
        "POST",
        EVICTION,
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        **{"Retry-After": "7"},
    )
    result = kube.evict(ObjectKey("ml", "a"), uid="u-a")
    assert result.outcome is EvictionOutcome.THROTTLED and result.retry_after == 7


def test_budget_429_is_read_from_its_cause(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    fake_kube.fail(
        "POST",
        EVICTION,
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        details={"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget g needs 2"}]},
        **{"Retry-After": "10"},
    )
    assert kube.evict(ObjectKey("ml", "a"), uid="u-a").outcome is EvictionOutcome.REFUSED_PDB


def test_the_fakes_own_budget_refusal_is_read_as_one(
    fake_kube: FakeApiServer, kube: KubernetesAdapter
) -> None:
    """The fake answers a budget that allows no disruption as the API server does (cause DisruptionBudget)."""
    fake_kube.put({**POD_A, "metadata": {**POD_A["metadata"], "labels": {"app": "x"}}})  # type: ignore[dict-item]
    fake_kube.put(
        {
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "g", "namespace": "ml"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "minAvailable": 1},
            "status": {"disruptionsAllowed": 0},
        }
    )
    assert kube.evict(ObjectKey("ml", "a"), uid="u-a", dry_run=True).outcome is EvictionOutcome.REFUSED_PDB


def test_timeout_after_the_server_accepted_is_unknown_not_refused(fake_kube: FakeApiServer) -> None:
    # The server takes the eviction; its answer comes too late.
    fake_kube.answer("POST", EVICTION, 201, {"kind": "Status", "code": 201}, delay=1.5)
    adapter = KubernetesAdapter(api_for(fake_kube.url), request_timeout=0.3)
    result = adapter.evict(ObjectKey("ml", "a"), uid="u-a")
    accepted = fake_kube.requests("POST", EVICTION)
    assert len(accepted) == 1 and result.outcome is EvictionOutcome.UNKNOWN


def test_get_pod_reads_a_plain_record_or_none(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    full = copy.deepcopy(POD_A)
    full["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]  # type: ignore[index]
    full["spec"]["volumes"] = [{"name": "data"}]  # type: ignore[index]
    fake_kube.put(full)
    pod = kube.get_pod(ObjectKey("ml", "a"))
    assert pod is not None and pod.uid == "u-a" and pod.node_name == "node-1"
    assert kube.get_pod(ObjectKey("ml", "gone")) is None


def test_snapshot_keeps_pending_pods_and_pods_on_gpu_nodes_only(
    fake_kube: FakeApiServer, kube: KubernetesAdapter
) -> None:
    cpu = {"kind": "Node", "metadata": {"name": "cpu-1"}, "status": {"allocatable": {"cpu": "8"}}}
    on_cpu = {
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "ml"},
        "spec": {"nodeName": "cpu-1", "containers": []},
    }
    managed = copy.deepcopy(POD_A)
    managed["metadata"]["managedFields"] = [{"manager": "x"}]  # type: ignore[index]
    for obj in (GPU_NODE, cpu, managed, POD_B, on_cpu):
        fake_kube.put(obj)
    state = kube.snapshot()
    assert [p.key.name for p in state.pods] == ["a", "b"]
    (listed,) = fake_kube.requests("GET", "/api/v1/pods")
    assert listed.query == {"fieldSelector": [ACTIVE_PODS], "limit": ["500"]}  # pages of 500, active pods


def test_annotate_preemptor_is_a_json_merge_patch(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    fake_kube.put({"kind": "Pod", "metadata": {"name": "p", "namespace": "team", "uid": "u-p"}})
    written = {LAST_RECLAIM_ANNOTATION: "2024-06-01T14:00:05Z", RECLAIM_NODE_ANNOTATION: "node-1"}
    kube.annotate_preemptor(ObjectKey("team", "p"), written, uid="u-p")
    request, *_ = fake_kube.calls
    assert request.content_type == "application/merge-patch+json"
    assert request.body == {"metadata": {"annotations": written, "uid": "u-p"}}
    pod = fake_kube.pod("team", "p")
    assert pod is not None and pod["metadata"]["annotations"] == written


def test_annotating_a_replaced_preemptor_conflicts(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    """The uid in the patch is a precondition: a pod recreated under the same name is not annotated."""
    fake_kube.put({"kind": "Pod", "metadata": {"name": "p", "namespace": "team", "uid": "u-new"}})
    with pytest.raises(KubernetesUnavailable, match="patch pod team/p: 409"):
        kube.annotate_preemptor(ObjectKey("team", "p"), {LAST_RECLAIM_ANNOTATION: "x"}, uid="u-old")


def test_annotate_failure_raises(kube: KubernetesAdapter) -> None:
    with pytest.raises(KubernetesUnavailable, match="patch pod team/p: 404"):
        kube.annotate_preemptor(ObjectKey("team", "p"), {LAST_RECLAIM_ANNOTATION: "2024-06-01T00:00:00Z"})


def test_event_is_a_core_v1_event_on_the_pod(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    kube.event(ObjectKey("ml", "a"), "Normal", "GpuIdleReclaimed", "x" * 2000, uid="u-a")
    kube.event(ObjectKey("ml", "a"), "Warning", "InvalidReclaimAnnotation", "bad")
    first, second = fake_kube.calls
    assert (first.method, first.path) == ("POST", "/api/v1/namespaces/ml/events")
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
    assert len(fake_kube.objects_of("events")) == 2  # both were created


def test_event_failure_raises(fake_kube: FakeApiServer, kube: KubernetesAdapter) -> None:
    fake_kube.fail("POST", "/api/v1/namespaces/ml/events", 403, "Forbidden", "cannot create events")
    with pytest.raises(KubernetesUnavailable, match="event R on ml/a: 403 cannot create events"):
        kube.event(ObjectKey("ml", "a"), "Normal", "R", "m")


LEASES = "/apis/coordination.k8s.io/v1/namespaces/gpu-steward/leases"
LEASE = LEASES + "/automator"


def lease_methods(fake_kube: FakeApiServer) -> list[str]:
    return [c.method for c in fake_kube.calls if c.path.startswith(LEASES)]


def holder(fake_kube: FakeApiServer) -> str | None:
    leases = fake_kube.objects_of("leases")
    return leases[0]["spec"]["holderIdentity"] if leases else None


def wait_until(predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


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
        assert holder(fake_kube) == "replica-1"
        assert "POST" in lease_methods(fake_kube)
    finally:
        elector.stop(timeout=10)
    assert not elector.is_leader and changes == [True, False]


def test_leader_election_respects_a_held_lease(fake_kube: FakeApiServer) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    fake_kube.put(
        {
            "apiVersion": "coordination.k8s.io/v1",
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
        assert "PUT" not in lease_methods(fake_kube) and holder(fake_kube) == "replica-0"
        assert elector.holder == "replica-0"  # what a standby's /decisions names
    finally:
        elector.stop(timeout=10)


def test_hanging_lease_renewal_never_leaves_two_leaders(fake_kube: FakeApiServer) -> None:
    """Replica 1 leads; its renewals then hang. It must stop leading (renew deadline, call timeouts) before
    replica 2 may take the lease (lease duration, by replica 2's own clock)."""
    cfg = client.Configuration(host=fake_kube.url)
    cfg.retries = False  # as api_client() builds it
    api = client.ApiClient(cfg)
    c1, c2 = FakeClock(), FakeClock()
    timings = {"lease_duration": 15, "renew_deadline": 10, "retry_period": 2, "request_timeout": 0.1}
    one = LeaderElector(api, "automator", "gpu-steward", "replica-1", clock=c1, **timings)  # type: ignore[arg-type]
    two = LeaderElector(api, "automator", "gpu-steward", "replica-2", clock=c2, **timings)  # type: ignore[arg-type]
    assert one.try_acquire_or_renew() and one.is_leader
    assert not two.try_acquire_or_renew()  # held, freshly observed
    # From now on every write of replica 1 hangs longer than its request timeout, then fails: it never lands.
    fake_kube.fail("PUT", LEASE, 504, "Timeout", "etcd", times=100, delay=0.5, body_contains="replica-1")
    for _ in range(9):  # every 2 s replica 1 tries to renew; each try times out
        c1.now += 2
        c2.now += 2
        with contextlib.suppress(urllib3.exceptions.HTTPError):  # the renewal times out
            one.try_acquire_or_renew()
        leaders = [one.is_leader, two.is_leader or two.try_acquire_or_renew()]
        assert leaders.count(True) <= 1, (c1.t, leaders)
    assert not one.is_leader and two.is_leader  # replica 2 took over, replica 1 had already stepped down
    assert two.holder == "replica-2"
    assert one.holder == "replica-2"  # replica 1's reads still land: it names the new leader
    c1.now += 16  # and once that record is older than the lease duration, by its own clock, nobody
    assert one.holder is None
    assert holder(fake_kube) == "replica-2"
    assert fake_kube.requests("PUT", LEASE)[0].code == 504  # replica 1's renewals did hang


def test_leader_election_rejects_unsafe_timings() -> None:
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderElector(api_for("http://127.0.0.1:1"), "l", "ns", "me", lease_duration=10, renew_deadline=10)


def test_an_unchanged_pod_is_not_decoded_again_a_changed_one_is_and_a_deleted_one_is_forgotten(
    fake_kube: FakeApiServer, kube: KubernetesAdapter
) -> None:
    for obj in (GPU_NODE, POD_A, {**POD_B, "metadata": {**POD_B["metadata"], "uid": "u-b"}}):
        fake_kube.put(obj)
    first = {p.key.name: p for p in kube.snapshot().pods}
    again = {p.key.name: p for p in kube.snapshot().pods}
    assert again["a"] is first["a"] and again["b"] is first["b"]  # the records of the previous pass
    fake_kube.put({**POD_A, "spec": {**POD_A["spec"], "priority": 7}})  # a new resourceVersion
    fake_kube.remove("pods", "ml", "b")
    changed = {p.key.name: p for p in kube.snapshot().pods}
    assert changed.keys() == {"a"} and changed["a"] is not first["a"] and changed["a"].spec_priority == 7
    fake_kube.put({**POD_B, "metadata": {**POD_B["metadata"], "uid": "u-b"}})
    assert {p.key.name: p for p in kube.snapshot().pods}["b"] is not first["b"]  # forgotten, decoded anew
