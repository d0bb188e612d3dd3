"""The service's Kueue step through the real adapter against the fake API server: enforce writes exactly the
annotations or spec.active (and an Event), dry-run writes nothing and shows what it would do, the writes
count against the hourly budget, and a served Workload is not served again while its quota is released."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client import CollectorRegistry

from automator import cli, settings
from automator.kube import KubernetesAdapter
from automator.kueue.model import KueueMode, KueueSettings
from automator.metrics import AutomatorMetrics
from automator.objects.keys import ObjectKey
from automator.ports import Mode
from automator.reclaim.model import PlannerConfig
from automator.reclaim.snapshot import load_usage
from automator.service import main
from automator.service.actuator import PassResult, run_pass
from automator.service.cooldown import ActuatorState
from automator.service.kueue import KueueStep
from steward_common.conventions import (
    KUEUE_BOOST_ANNOTATION,
    KUEUE_BOOST_OWNER_ANNOTATION,
    KUEUE_DEACTIVATED_FOR_ANNOTATION,
    KUEUE_REASON_DEACTIVATED,
)
from tests.automator import k8s
from tests.automator.fakes import FakePrometheus
from tools.fakes.fakekube import FakeApiServer

V2 = "kueue.x-k8s.io/v1beta2"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/"


def cluster(annotations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """cq's 16 GPUs held by two 8-GPU Workloads of 2 pods each (idle on n1, busy on n2); ml/wait waits."""
    return [
        k8s.node("n1"),
        k8s.node("n2"),
        k8s.cluster_queue("cq", nominal=16, used=16),
        k8s.local_queue("q", "cq"),
        k8s.kueue_workload("wait", priority=200),
        k8s.kueue_workload(
            "idle", gpus=4, count=2, admitted_in="cq", job_uid="job-idle", annotations=annotations
        ),
        k8s.kueue_workload("busy", gpus=4, count=2, admitted_in="cq", job_uid="job-busy"),
        *(k8s.owned(k8s.pod(f"idle-{i}", gpus=4, node_name="n1"), "job-idle") for i in range(2)),
        *(k8s.owned(k8s.pod(f"busy-{i}", gpus=4, node_name="n2"), "job-busy") for i in range(2)),
    ]


USAGE = {**k8s.idle("idle-0", "idle-1"), **k8s.busy("busy-0", "busy-1")}


def run(
    kube: FakeApiServer, mode: Mode, kueue: KueueMode, state: ActuatorState | None = None, usage: Any = None
) -> tuple[PassResult, AutomatorMetrics, ActuatorState]:
    adapter = KubernetesAdapter(
        client.ApiClient(client.Configuration(host=kube.url)), request_timeout=5, kueue=True
    )
    metrics = AutomatorMetrics(CollectorRegistry())
    state = state or ActuatorState()
    step = KueueStep(adapter, KueueSettings(kueue), state, metrics, lambda: True)
    result = run_pass(
        adapter,
        FakePrometheus(USAGE if usage is None else usage),
        PlannerConfig(),
        mode,
        k8s.NOW,
        state=state,
        metrics=metrics,
        kueue=step,
    )
    return result, metrics, state


def workload(kube: FakeApiServer, name: str) -> dict[str, Any]:
    (found,) = [w for w in kube.objects_of("workloads") if w["metadata"]["name"] == name]
    return found


def patches(kube: FakeApiServer) -> list[tuple[str, Any]]:
    return [(c.path.removeprefix(WORKLOADS), c.body) for c in kube.writes() if c.method == "PATCH"]


def actions(metrics: AutomatorMetrics, action: str, mode: str) -> float:
    value = metrics.registry.get_sample_value(
        "gpu_steward_automator_kueue_actions_total", {"action": action, "mode": mode}
    )
    return value or 0.0


def test_enforce_boost_writes_exactly_the_two_annotations_and_counts_the_pods() -> None:
    with FakeApiServer(cluster(), kueue_apis=[V2]).start() as kube:
        result, metrics, state = run(kube, Mode.ENFORCE, KueueMode.BOOST)
        assert patches(kube) == [
            (
                "idle",
                {
                    "metadata": {
                        "annotations": {
                            KUEUE_BOOST_ANNOTATION: "-100000",
                            KUEUE_BOOST_OWNER_ANNOTATION: "gpu-steward",
                        },
                        "uid": "uid-wl-ml-idle",
                    }
                },
            )
        ]
        assert workload(kube, "idle")["metadata"]["annotations"] == {
            KUEUE_BOOST_ANNOTATION: "-100000",
            KUEUE_BOOST_OWNER_ANNOTATION: "gpu-steward",
        }
        assert (
            "annotations" not in workload(kube, "busy")["metadata"]
            or not workload(kube, "busy")["metadata"]["annotations"]
        )
    body = result.to_json()
    assert body["kueue"]["boost"] == [{"workload": "ml/idle", "for": "ml/wait", "value": -100000, "gpus": 8}]
    assert [(a["kind"], a["pod"], a["result"]) for a in body["actions"]] == [("kueue-boost", "ml/idle", "ok")]
    assert state.evictions_last_hour(k8s.NOW) == 2  # a boost of a Workload of 2 pods counts 2
    assert actions(metrics, "boost", "enforce") == 1
    assert metrics.registry.get_sample_value("gpu_steward_automator_kueue_waiting_workloads") == 1
    assert metrics.registry.get_sample_value("gpu_steward_automator_kueue_waiting_gpus") == 8
    assert metrics.registry.get_sample_value("gpu_steward_automator_kueue_idle_quota_gpus") == 8


def test_enforce_unboost_removes_both_annotations_when_the_workload_is_busy_again() -> None:
    ours = {KUEUE_BOOST_ANNOTATION: "-100000", KUEUE_BOOST_OWNER_ANNOTATION: "gpu-steward"}
    with FakeApiServer(cluster(ours), kueue_apis=[V2]).start() as kube:
        result, metrics, _ = run(
            kube, Mode.ENFORCE, KueueMode.BOOST, usage=k8s.busy("idle-0", "idle-1", "busy-0", "busy-1")
        )
        assert patches(kube) == [
            (
                "idle",
                {
                    "metadata": {
                        "annotations": {KUEUE_BOOST_ANNOTATION: None, KUEUE_BOOST_OWNER_ANNOTATION: None},
                        "uid": "uid-wl-ml-idle",
                    }
                },
            )
        ]
        assert not workload(kube, "idle")["metadata"].get("annotations")
    assert result.to_json()["kueue"]["unboost"][0]["reason"].startswith(
        "kueue-not-idle: ml/idle-0 [6-gpu-busy]"
    )
    assert actions(metrics, "unboost", "enforce") == 1


def test_dry_run_writes_nothing_and_shows_what_it_would_do() -> None:
    with FakeApiServer(cluster(), kueue_apis=[V2]).start() as kube:
        result, metrics, state = run(kube, Mode.DRY_RUN, KueueMode.DEACTIVATE)
        assert kube.writes() == []
        assert workload(kube, "idle")["spec"].get("active") is None
    body = result.to_json()
    assert body["kueue"]["mode"] == "deactivate"
    assert body["kueue"]["deactivate"] == [{"workload": "ml/idle", "for": "ml/wait", "gpus": 8}]
    assert body["actions"] == [] and state.evictions_last_hour(k8s.NOW) == 0 and state.kueue_served == {}
    assert actions(metrics, "deactivate", "dry-run") == 1 and actions(metrics, "deactivate", "enforce") == 0


def test_enforce_deactivate_sets_active_false_names_the_waiting_workload_and_is_not_repeated() -> None:
    with FakeApiServer(cluster(), kueue_apis=[V2]).start() as kube:
        _, metrics, state = run(kube, Mode.ENFORCE, KueueMode.DEACTIVATE)
        assert patches(kube) == [
            (
                "idle",
                {
                    "metadata": {
                        "annotations": {KUEUE_DEACTIVATED_FOR_ANNOTATION: "ml/wait"},
                        "uid": "uid-wl-ml-idle",
                    },
                    "spec": {"active": False},
                },
            )
        ]
        stored = workload(kube, "idle")
        assert stored["spec"]["active"] is False
        assert stored["metadata"]["annotations"] == {KUEUE_DEACTIVATED_FOR_ANNOTATION: "ml/wait"}
        (event,) = [e for e in kube.objects_of("events") if e["reason"] == KUEUE_REASON_DEACTIVATED]
        assert event["involvedObject"]["kind"] == "Workload" and event["involvedObject"]["name"] == "idle"
        assert "ml/wait" in event["message"] and "GPU activity at most 0" in event["message"]
        assert "spec.active: true" in event["message"]  # how its owner queues it again
        assert state.evictions_last_hour(k8s.NOW) == 2 and list(state.kueue_served) == [
            ObjectKey("ml", "wait")
        ]
        # Kueue has not stopped the job yet (its pods still run): the quota is on its way, nothing more
        again, _, _ = run(kube, Mode.ENFORCE, KueueMode.DEACTIVATE, state=state)
        assert len(patches(kube)) == 1
    assert again.to_json()["kueue"]["unresolved"] == [
        {
            "workload": "ml/wait",
            "reason": "kueue-quota-releasing: ml/idle, deactivated for it, still has pods",
        }
    ]
    assert actions(metrics, "deactivate", "enforce") == 1


def test_the_wiring_reads_kueue_from_a_snapshot_file_and_decisions_show_it(clean_env: None) -> None:
    example = Path(__file__).parents[1] / "fixtures" / "kueue_example"
    args = cli.build_parser().parse_args(
        ["run", "--cluster-snapshot", str(example / "cluster.yaml"), "--kueue", "deactivate"]
    )
    wiring = main.build(settings.service_settings(args, {}))
    assert wiring.service.kueue is not None and wiring.service.kueue.writer is None  # a file: dry-run only
    wiring.service.prom = FakePrometheus(load_usage(example / "usage.yaml"))
    wiring.service.clock = lambda: datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    assert wiring.service.run_once() is not None
    body = wiring.service.decisions()
    assert body["kueue"]["deactivate"] == [
        {"workload": "team-a/job-train-idle-1a2b3", "for": "team-a/job-urgent-7e8f9", "gpus": 8}
    ]
    assert body["actions"] == []
    off = main.build(
        settings.service_settings(
            cli.build_parser().parse_args(["run", "--cluster-snapshot", str(example / "cluster.yaml")]), {}
        )
    )
    assert off.service.kueue is None


def test_the_hourly_budget_left_bounds_the_kueue_writes() -> None:
    state = ActuatorState()
    state.evictions.extend([k8s.NOW] * 59)  # 59 of the hour's 60 spent: 1 left, the boost counts 2 pods
    with FakeApiServer(cluster(), kueue_apis=[V2]).start() as kube:
        adapter = KubernetesAdapter(client.ApiClient(client.Configuration(host=kube.url)), kueue=True)
        step = KueueStep(adapter, KueueSettings(KueueMode.BOOST), state, None, lambda: True)
        result = run_pass(
            adapter, FakePrometheus(USAGE), PlannerConfig(), Mode.ENFORCE, k8s.NOW, state=state,
            max_evictions_per_hour=60, kueue=step,
        )  # fmt: skip
        assert patches(kube) == []
    assert result.to_json()["kueue"]["unresolved"] == [
        {
            "workload": "ml/wait",
            "reason": "eviction-budget: boosting ml/idle counts 2 pod(s), 1 left this pass",
        }
    ]
    assert state.evictions_last_hour(k8s.NOW) == 59


def test_a_v1beta1_only_cluster_is_written_in_v1beta1() -> None:
    objs = [o for o in cluster()]
    for o in objs:
        if str(o.get("apiVersion", "")).startswith("kueue.x-k8s.io/"):
            o["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    with FakeApiServer(objs, kueue_apis=["kueue.x-k8s.io/v1beta1"]).start() as kube:
        run(kube, Mode.ENFORCE, KueueMode.DEACTIVATE)
        paths = [c.path for c in kube.writes() if c.method == "PATCH"]
    assert paths == ["/apis/kueue.x-k8s.io/v1beta1/namespaces/ml/workloads/idle"]
