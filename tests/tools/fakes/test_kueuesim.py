"""The fake cluster's Kueue stand-in (tools/fakes/kueuesim.py): a deactivated Workload is stopped and its
quota released, and a waiting one is admitted when its ClusterQueue's quota allows, its pods created."""

from __future__ import annotations

from typing import Any

from tests.automator import k8s
from tools.fakes.fakekube import FakeApiServer


def _conditions(kube: FakeApiServer, name: str) -> dict[str, tuple[str, str]]:
    (wl,) = [w for w in kube.objects_of("workloads") if w["metadata"]["name"] == name]
    return {c["type"]: (c["status"], c["reason"]) for c in wl["status"]["conditions"]}


def _cluster() -> list[dict[str, Any]]:
    holder = k8s.owned(k8s.pod("held-0", gpus=2, node_name="n3"), "job-held")
    holder["spec"]["terminationGracePeriodSeconds"] = 5
    return [
        k8s.node("n3", gpus=2),
        k8s.cluster_queue("cq", nominal=2, used=0),
        k8s.local_queue("q", "cq"),
        k8s.kueue_workload("held", gpus=2, admitted_in="cq", job_uid="job-held"),
        k8s.kueue_workload("wait", gpus=2, priority=200, job_uid="job-wait"),
        holder,
    ]


def test_deactivation_releases_the_quota_and_the_waiting_workload_is_admitted() -> None:
    now = [1_000.0]
    with FakeApiServer(
        _cluster(), clock=lambda: now[0], kueue_apis=["kueue.x-k8s.io/v1beta2"]
    ).start() as kube:
        kube.step()
        (cq,) = kube.objects_of("clusterqueues")
        assert cq["status"]["flavorsUsage"][0]["resources"][0]["total"] == "2"  # the holder's usage
        assert "QuotaReserved" not in _conditions(kube, "wait")  # no quota left
        kube.store.objects["workloads"][("ml", "held")]["spec"]["active"] = False  # the automator's patch
        kube.step()
        assert _conditions(kube, "held")["Evicted"] == ("True", "Deactivated")
        pod = kube.pod("ml", "held-0")
        assert pod is not None and pod["metadata"].get("deletionTimestamp")  # stopping, still holding
        assert "QuotaReserved" not in _conditions(kube, "wait")
        now[0] += 10  # past the grace period: the job's pod is gone
        kube.step()
        assert kube.pod("ml", "held-0") is None
        held_now = _conditions(kube, "held")
        assert held_now["QuotaReserved"] == ("False", "Pending") and held_now["Requeued"] == (
            "False",
            "Deactivated",
        )
        assert _conditions(kube, "wait")["Admitted"] == ("True", "Admitted")
        created = kube.pod("ml", "wait-main-0")
        assert created is not None and created["metadata"]["ownerReferences"][0]["uid"] == "job-wait"
        kube.step()  # the scheduler binds it where the quota's GPUs are
        created = kube.pod("ml", "wait-main-0")
        assert created is not None and created["spec"]["nodeName"] == "n3"
        (cq,) = kube.objects_of("clusterqueues")
        assert cq["status"]["flavorsUsage"][0]["resources"][0]["total"] == "2"  # now the new one's
