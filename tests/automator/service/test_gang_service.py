"""The service with gangs, through the real adapter against the fake API server: a victim gang evicted in
name order, a refusal ending the decision with "gang partly evicted", every placed member annotated."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from automator.kube import KubernetesAdapter
from automator.ports import Mode
from automator.reclaim.model import PlannerConfig
from automator.service.actuator import run_pass
from steward_common.conventions import GANG_COSCHEDULING_LABEL, LAST_RECLAIM_ANNOTATION
from tests.automator import k8s
from tests.automator.fakes import FakePrometheus
from tools.fakes.fakekube import FakeApiServer

GANG = {GANG_COSCHEDULING_LABEL: "train"}


def _cluster() -> list[dict[str, Any]]:
    """A 2-member idle victim gang (4 GPUs on each 4-GPU node) and a pending 8-GPU gang of 2 members."""
    return [
        k8s.node("n1", gpus=4),
        k8s.node("n2", gpus=4),
        k8s.pod("g-0", gpus=4, node_name="n1", labels=GANG),
        k8s.pod("g-1", gpus=4, node_name="n2", labels=GANG),
        k8s.pod_group("train", 2),
        k8s.preemptor("p-0", gpus=4, labels={GANG_COSCHEDULING_LABEL: "big"}),
        k8s.preemptor("p-1", gpus=4, labels={GANG_COSCHEDULING_LABEL: "big"}),
        k8s.pod_group("big", 2),
        k8s.reclaim_class(),
    ]


def _events(kube: FakeApiServer) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for e in kube.objects_of("events"):
        found.setdefault(e["involvedObject"]["name"], []).append(e["message"])
    return found


def _evictions(kube: FakeApiServer) -> list[str]:
    return [
        c.path.split("/")[-2]
        for c in kube.requests("POST")
        if c.path.endswith("/eviction") and "dryRun" not in str(c.body)
    ]


def test_a_victim_gang_goes_in_name_order_and_every_placed_member_is_annotated() -> None:
    with FakeApiServer(_cluster(), gang_apis=("scheduling.x-k8s.io/v1alpha1",)).start() as kube:
        adapter = KubernetesAdapter(client.ApiClient(client.Configuration(host=kube.url)), request_timeout=5)
        result = run_pass(
            adapter, FakePrometheus(k8s.idle("g-0", "g-1")), PlannerConfig(), Mode.ENFORCE, k8s.NOW
        )
        assert _evictions(kube) == ["g-0", "g-1"]
        annotated = {
            name: (kube.pod("ml", name) or {})["metadata"]["annotations"].get(LAST_RECLAIM_ANNOTATION)
            for name in ("p-0", "p-1")
        }
        events = _events(kube)
    assert result.reason == "" or "partly" not in result.reason
    assert all(annotated.values()), annotated  # p-1 fits on the GPUs the gang freed on n2: annotated too
    assert any("member of gang ml/train" in m for m in events["g-1"])
    assert any("(gang ml/big)" in m for m in events["p-0"])


def test_a_refusal_in_a_victim_gang_ends_the_decision_and_says_so() -> None:
    with FakeApiServer(_cluster(), gang_apis=("scheduling.x-k8s.io/v1alpha1",)).start() as kube:
        adapter = KubernetesAdapter(client.ApiClient(client.Configuration(host=kube.url)), request_timeout=5)
        kube.answer(
            "POST",
            r"/api/v1/namespaces/ml/pods/g-[01]/eviction",
            201,
            {"kind": "Status"},
            times=2,
            body_contains="dryRun",
        )
        kube.fail("POST", r"/api/v1/namespaces/ml/pods/g-1/eviction", 403, "Forbidden", "denied", times=10)
        run_pass(
            adapter,
            FakePrometheus(k8s.idle("g-0", "g-1")),
            PlannerConfig(),
            Mode.ENFORCE,
            k8s.NOW,
            max_replans=0,
        )
        evicted = _evictions(kube)
        events = _events(kube)
    assert evicted[0] == "g-0" and "g-1" in evicted  # in name order; g-1 refused
    assert any("gang ml/train partly evicted: 1 of 2" in m for m in events["p-0"]), events
