"""The Kubernetes adapter reads Kueue's objects where the cluster serves kueue.x-k8s.io (v1beta2, else
v1beta1) and merge-patches Workloads, against the fake API server (tools/fakes/fakekube.py), which serves
Kueue's APIs only when told to."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kubernetes import client

from automator.kube.adapter import KubernetesAdapter
from automator.objects.keys import ObjectKey
from automator.ports import KubernetesUnavailable
from tests.automator import k8s
from tools.fakes.fakekube import FakeApiServer

V2, V1 = "kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"


def objects(api: str = V2) -> list[dict[str, Any]]:
    return [
        k8s.node("n1"),
        k8s.cluster_queue("cq", nominal=16, used=8, cohort="research", api=api),
        k8s.local_queue("q", "cq", api=api),
        k8s.kueue_workload("held", admitted_in="cq", job_uid="job-held", api=api),
        k8s.kueue_workload("wait", priority=200, api=api),
        k8s.job("held", "job-held"),
        k8s.owned(k8s.pod("held-0", node_name="n1"), "job-held"),
    ]


def adapter(kube: FakeApiServer, on: bool = True) -> KubernetesAdapter:
    return KubernetesAdapter(client.ApiClient(client.Configuration(host=kube.url)), kueue=on)


def kueue_paths(kube: FakeApiServer) -> list[str]:
    return sorted(c.path for c in kube.requests("GET") if "kueue" in c.path or "/jobs" in c.path)


@pytest.mark.parametrize("api", [V2, V1])
def test_the_newest_served_version_is_listed(api: str) -> None:
    with FakeApiServer(objects(api), kueue_apis=[api] if api == V1 else [V2, V1]).start() as kube:
        listed = adapter(kube).snapshot().kueue
        paths = kueue_paths(kube)
    version = api.rpartition("/")[2]
    assert paths == sorted(
        [f"/apis/kueue.x-k8s.io/{version}/{p}" for p in ("workloads", "clusterqueues", "localqueues")]
        + ["/apis/batch/v1/jobs"]
    )
    assert listed.served
    assert {str(w.key): (w.admitted, w.cluster_queue, w.api_version) for w in listed.workloads} == {
        "ml/held": (True, "cq", api),
        "ml/wait": (False, "", api),
    }
    (cq,) = listed.cluster_queues
    assert (cq.name, cq.cohort, dict(cq.nominal), dict(cq.used)) == (
        "cq", "research", {"nvidia.com/gpu": 16}, {"nvidia.com/gpu": 8}
    )  # fmt: skip
    assert [(str(q.key), q.cluster_queue) for q in listed.local_queues] == [("ml/q", "cq")]
    assert [(str(j.key), j.uid) for j in listed.jobs] == [("ml/held", "job-held")]
    assert next(w for w in listed.workloads if w.key.name == "held").job_uids == {"job-held"}


def test_kueue_absent_is_skipped_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="automator.kube.adapter")
    with FakeApiServer(objects()).start() as kube:
        kube_adapter = adapter(kube)
        first = kube_adapter.snapshot().kueue
        kube_adapter.snapshot()
        paths = kueue_paths(kube)
    assert not first.served and first.workloads == ()
    assert paths == []  # nothing listed that the cluster does not serve
    lines = [r.getMessage() for r in caplog.records if "Kueue" in r.getMessage()]
    assert lines == ["Kueue (kueue.x-k8s.io) not served, skipped: no Workload to read"]


def test_off_lists_no_kueue_object_and_no_job() -> None:
    with FakeApiServer(objects(), kueue_apis=[V2]).start() as kube:
        listed = adapter(kube, on=False).snapshot().kueue
        assert kueue_paths(kube) == [] and not listed.served


def test_a_workload_is_merge_patched_with_its_uid_as_precondition() -> None:
    with FakeApiServer(objects(), kueue_apis=[V2]).start() as kube:
        kube_adapter = adapter(kube)
        key = ObjectKey("ml", "held")
        kube_adapter.patch_workload(
            key, V2, {"metadata": {"annotations": {"a": "1"}}, "spec": {"active": False}}, "uid-wl-ml-held"
        )
        (stored,) = [w for w in kube.objects_of("workloads") if w["metadata"]["name"] == "held"]
        assert stored["metadata"]["annotations"] == {"a": "1"} and stored["spec"]["active"] is False
        kube_adapter.patch_workload(key, V2, {"metadata": {"annotations": {"a": None}}}, "uid-wl-ml-held")
        (stored,) = [w for w in kube.objects_of("workloads") if w["metadata"]["name"] == "held"]
        assert stored["metadata"]["annotations"] == {}
        with pytest.raises(KubernetesUnavailable, match="patch workload ml/held: 409"):
            kube_adapter.patch_workload(key, V2, {"spec": {"active": True}}, "another-uid")
        (patch,) = [c for c in kube.writes() if c.method == "PATCH"][:1]
        assert patch.content_type.startswith("application/merge-patch+json")
        assert patch.path == "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/held"
        kube_adapter.workload_event(key, V2, "uid-wl-ml-held", "Normal", "GpuIdleWorkloadDeactivated", "why")
        (event,) = [e for e in kube.objects_of("events") if e["reason"] == "GpuIdleWorkloadDeactivated"]
        assert event["involvedObject"] == {
            "apiVersion": V2,
            "kind": "Workload",
            "name": "held",
            "namespace": "ml",
            "uid": "uid-wl-ml-held",
        }
