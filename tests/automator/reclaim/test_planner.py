"""Issue 4 planner scenarios: victim choice, across nodes, preemptor order, cooldown, pass bookkeeping."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.reclaim.model import Plan, PlannerConfig, PodUsage
from automator.reclaim.planner import plan
from automator.reclaim.report import plan_to_json
from steward_common.conventions import LAST_RECLAIM_ANNOTATION
from tests.automator import k8s


def run(state: ClusterState, usage: dict[ObjectKey, PodUsage], **config: Any) -> Plan:
    return plan(state, usage, PlannerConfig(**config), k8s.NOW)


def victims(result: Plan) -> dict[str, list[str]]:
    return {str(d.preemptor): [str(v.pod) for v in d.victims] for d in result.decisions}


def test_busy_four_gpu_pod_is_protected() -> None:
    state = k8s.cluster(*k8s.held_node("n1", "busy"), k8s.preemptor("p"))
    result = run(state, k8s.busy("busy", activity=0.7))
    assert result.decisions == []
    (unresolved,) = result.unresolved
    assert "n1 needs 4 GPUs, 0 free + 0 reclaimable" in unresolved.reason
    assert "1 busy" in unresolved.reason


def test_idle_pod_is_evicted_and_decision_is_complete() -> None:
    state = k8s.cluster(*k8s.held_node("n1", "idle"), k8s.preemptor("p"))
    (decision,) = run(state, k8s.idle("idle", activity=0.01)).decisions
    assert (decision.node, decision.gpus_freed, decision.gpus_requested) == ("n1", 4, 4)
    assert (decision.preemptor_priority, decision.free_gpus_before) == (1000, 0)
    (victim,) = decision.victims
    assert (victim.pod, victim.gpus, victim.priority, victim.gpu_activity) == (
        ObjectKey("ml", "idle"),
        4,
        100,
        0.01,
    )
    assert victim.scheduled_at == k8s.NOW - timedelta(seconds=7200)


def test_preemptor_that_already_fits_evicts_nothing() -> None:
    state = k8s.cluster(k8s.node("n1", gpus=8), k8s.pod("idle", gpus=4, node_name="n1"), k8s.preemptor("p"))
    result = run(state, k8s.idle("idle"))
    assert result.decisions == []  # decisions only hold evictions
    (fit,) = result.already_fit
    assert fit.preemptor == ObjectKey("ml", "p") and fit.node == "n1"
    assert fit.victims == () and fit.gpus_freed == 0 and fit.free_gpus_before == 4
    assert plan_to_json(result)["already_fit"] == [
        {"preemptor": "ml/p", "node": "n1", "gpus_requested": 4, "free_gpus_before": 4}
    ]


@pytest.mark.parametrize(
    "ages",
    [(7200, 3600, 3600), (3600, 7200, 7200), (3000, 9000, 2000), (2000, 2000, 2000), (9000, 2000, 2000)],
)
def test_single_four_gpu_victim_beats_two_twos_whatever_the_ages(ages: tuple[int, int, int]) -> None:
    a, b, c = ages
    state = k8s.cluster(
        k8s.node("n1", gpus=8),
        k8s.pod("a", gpus=4, node_name="n1", scheduled_ago=a),
        k8s.pod("b", gpus=2, node_name="n1", scheduled_ago=b),
        k8s.pod("c", gpus=2, node_name="n1", scheduled_ago=c),
        k8s.preemptor("p", gpus=4),
    )
    result = run(state, k8s.idle("a", "b", "c"))
    assert victims(result) == {"ml/p": ["ml/a"]}


def test_fewest_gpus_freed_then_lowest_priority_then_most_recent() -> None:
    pods = [
        k8s.pod("big", gpus=4, node_name="n1", priority=10),
        k8s.pod("two-high", gpus=2, node_name="n1", priority=500),
        k8s.pod("two-old", gpus=2, node_name="n2", priority=10, scheduled_ago=90000),
        k8s.pod("two-new", gpus=2, node_name="n3", priority=10, scheduled_ago=3000),
    ]
    nodes = [k8s.node(n, gpus=6) for n in ("n1", "n2", "n3")]
    fillers = [k8s.pod(f"busy-{n}", gpus=4, node_name=n) for n in ("n2", "n3")]
    state = k8s.cluster(*nodes, *pods, *fillers, k8s.preemptor("p", gpus=2))
    usage = k8s.idle("big", "two-high", "two-old", "two-new") | k8s.busy("busy-n2", "busy-n3")
    # n1's 2-GPU pod frees fewer GPUs than the 4-GPU one but has priority 500; n2/n3 have priority 10:
    # equal count and GPUs, then lowest highest priority, then least work lost (most recently scheduled).
    assert victims(run(state, usage)) == {"ml/p": ["ml/two-new"]}


def test_pdb_protected_pod_is_skipped_for_another_node() -> None:
    state = k8s.cluster(
        k8s.node("a-node", gpus=4),
        k8s.node("b-node", gpus=4),
        k8s.pod("guarded", gpus=4, node_name="a-node", labels={"app": "g"}),
        k8s.pod("free", gpus=4, node_name="b-node", scheduled_ago=90000),
        k8s.pdb("g", {"matchLabels": {"app": "g"}}, 0),
        k8s.preemptor("p"),
    )
    result = run(state, k8s.idle("guarded", "free"))
    assert [(d.node, [str(v.pod) for v in d.victims]) for d in result.decisions] == [("b-node", ["ml/free"])]
    assert result.verdicts[ObjectKey("ml", "guarded")][0].rule == "0-pdb"


def test_pdb_budget_limits_victims_of_one_set_and_of_the_pass() -> None:
    pods = [k8s.pod(f"w{i}", gpus=2, node_name="n1", labels={"app": "w"}) for i in range(4)]
    state = k8s.cluster(
        k8s.node("n1", gpus=8),
        *pods,
        k8s.pdb("w", {"matchLabels": {"app": "w"}}, 1),
        k8s.preemptor("p4", gpus=4, created_ago=100),
        k8s.preemptor("p2", gpus=2, created_ago=50),
        k8s.preemptor("p2b", gpus=2, created_ago=10),
    )
    result = run(state, k8s.idle(*(f"w{i}" for i in range(4))))
    # p4 would need two pods of a budget allowing one eviction; p2 takes the only disruption.
    assert [str(d.preemptor) for d in result.decisions] == ["ml/p2"]
    assert {str(u.preemptor) for u in result.unresolved} == {"ml/p4", "ml/p2b"}


def test_equal_priority_never_preempts() -> None:
    state = k8s.cluster(
        k8s.node("n1", gpus=4), k8s.pod("v", gpus=4, node_name="n1", priority=1000), k8s.preemptor("p")
    )
    assert run(state, k8s.idle("v")).decisions == []


def test_second_preemptor_gets_other_victims_and_sees_the_first_placed() -> None:
    state = k8s.cluster(
        *k8s.held_node("n1", "v1"),
        *k8s.held_node("n2", "v2"),
        k8s.preemptor("first", created_ago=100),
        k8s.preemptor("second", created_ago=50),
    )
    result = run(state, k8s.idle("v1", "v2"))
    assert victims(result) == {"ml/first": ["ml/v1"], "ml/second": ["ml/v2"]}
    assert [d.node for d in result.decisions] == ["n1", "n2"]


def test_preemptors_ordered_by_priority_then_creation_time() -> None:
    state = k8s.cluster(
        *k8s.held_node("n1", "v"),
        k8s.preemptor("young-high", priority=2000, created_ago=10),
        k8s.preemptor("old-low", priority=1000, created_ago=9000),
        k8s.preemptor("old-high", priority=2000, created_ago=500),
    )
    result = run(state, k8s.idle("v"))
    assert [str(d.preemptor) for d in result.decisions] == ["ml/old-high"]
    assert [str(u.preemptor) for u in result.unresolved] == ["ml/young-high", "ml/old-low"]


def test_tie_across_nodes_goes_to_the_first_name() -> None:
    state = k8s.cluster(
        k8s.node("zeta", gpus=4),
        k8s.node("alpha", gpus=4),
        k8s.pod("vz", gpus=4, node_name="zeta", scheduled_ago=7200),
        k8s.pod("va", gpus=4, node_name="alpha", scheduled_ago=7200),
        k8s.preemptor("p"),
    )
    assert [d.node for d in run(state, k8s.idle("va", "vz")).decisions] == ["alpha"]


def test_terminating_pods_count_against_free_gpus_and_are_not_victims() -> None:
    state = k8s.cluster(
        k8s.node("n1", gpus=8),
        k8s.pod("leaving", gpus=4, node_name="n1", terminating=True),
        k8s.pod("v", gpus=4, node_name="n1"),
        k8s.preemptor("p", gpus=4),
    )
    result = run(state, k8s.idle("leaving", "v"))
    assert victims(result) == {"ml/p": ["ml/v"]}
    assert result.decisions[0].free_gpus_before == 0


def test_finished_pods_do_not_hold_gpus() -> None:
    state = k8s.cluster(
        k8s.node("n1", gpus=4), k8s.pod("done", gpus=4, node_name="n1", phase="Succeeded"), k8s.preemptor("p")
    )
    result = run(state, {})
    (fit,) = result.already_fit
    assert result.decisions == [] and fit.free_gpus_before == 4


@pytest.mark.parametrize(("elapsed", "in_cooldown"), [(100, True), (299, True), (300, False), (4000, False)])
def test_cooldown(elapsed: int, in_cooldown: bool) -> None:
    pre = k8s.preemptor("p", annotations={LAST_RECLAIM_ANNOTATION: k8s.ago(elapsed)})
    state = k8s.cluster(*k8s.held_node("n1", "v"), pre)
    result = run(state, k8s.idle("v"))
    assert (result.skipped_cooldown == [ObjectKey("ml", "p")]) is in_cooldown
    assert (result.decisions == []) is in_cooldown
    if in_cooldown:
        assert f"{300 - elapsed} s of the 300 s cooldown remain" in result.unresolved[0].reason


def test_cooldown_length_is_configurable_and_malformed_timestamp_fails_safe() -> None:
    pre = k8s.preemptor("p", annotations={LAST_RECLAIM_ANNOTATION: k8s.ago(100)})
    state = k8s.cluster(*k8s.held_node("n1", "v"), pre)
    assert run(state, k8s.idle("v"), cooldown_seconds=60).decisions
    pre["metadata"]["annotations"][LAST_RECLAIM_ANNOTATION] = "yesterday"
    result = run(state, k8s.idle("v"))
    assert (
        result.skipped_cooldown == [ObjectKey("ml", "p")]
        and "not an RFC 3339 time" in result.unresolved[0].reason
    )


def test_only_unschedulable_pods_of_reclaim_classes_are_preemptors() -> None:
    plain = k8s.pod("plain", gpus=4, node_name=None, priority=1000, priority_class="other")
    waiting = k8s.preemptor("waiting")
    waiting["status"]["conditions"] = []  # not yet tried by the scheduler
    state = k8s.cluster(
        *k8s.held_node("n1", "v"),
        k8s.priority_class("other", 1000),
        plain,
        waiting,
    )
    result = run(state, k8s.idle("v"))
    assert result.decisions == [] and result.unresolved == []


def test_excluded_pod_is_not_chosen() -> None:
    state = k8s.cluster(
        *k8s.held_node("n1", "v1"),
        *k8s.held_node("n2", "v2"),
        k8s.preemptor("p"),
    )
    result = plan(
        state, k8s.idle("v1", "v2"), PlannerConfig(), k8s.NOW, exclude=frozenset({ObjectKey("ml", "v1")})
    )
    assert victims(result) == {"ml/p": ["ml/v2"]}


def test_malformed_preemptor_is_unresolved_and_malformed_victim_protected() -> None:
    bad_pre = k8s.preemptor("p", gpus=1)
    bad_pre["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1.5"
    bad_victim = k8s.pod("v", gpus=4, node_name="n1")
    bad_victim["status"]["conditions"][0]["lastTransitionTime"] = "not a time"
    state = k8s.cluster(k8s.node("n1", gpus=4), bad_victim, bad_pre, k8s.preemptor("q"))
    result = run(state, k8s.idle("v"))
    reasons = {str(u.preemptor): u.reason for u in result.unresolved}
    assert "whole number" in reasons["ml/p"] and "spec.containers[0]" in reasons["ml/p"]
    assert result.verdicts[ObjectKey("ml", "v")][0].rule == "resources-malformed"


def test_gpu_count_uses_init_containers_and_sidecars() -> None:
    pre = k8s.preemptor("p", gpus=1)
    pre["spec"]["initContainers"] = [
        {"name": "side", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "3"}}},
    ]
    # sidecar 1 + main 1 = 2 during the run; sidecar 1 + init 3 = 4 during init: the pod needs 4.
    state = k8s.cluster(k8s.node("n1", gpus=4), k8s.pod("v", gpus=3, node_name="n1"), pre)
    result = run(state, k8s.idle("v"))
    assert result.decisions[0].gpus_requested == 4


def test_several_gpu_resource_names() -> None:
    gpu_node, victim = k8s.held_node("n1", "v")
    gpu_node["status"]["allocatable"]["example.com/gpu"] = "2"
    preemptor = k8s.preemptor("p")
    preemptor["spec"]["containers"][0]["resources"]["limits"] = {"example.com/gpu": 2, "nvidia.com/gpu": 4}
    state = k8s.cluster(gpu_node, victim, preemptor)
    result = run(state, k8s.idle("v"), gpu_resources=("nvidia.com/gpu", "example.com/gpu"))
    assert result.decisions[0].gpus_requested == 6 and result.decisions[0].free_gpus_before == 2


def test_json_shape() -> None:
    state = k8s.cluster(
        *k8s.held_node("n1", "v"),
        k8s.preemptor("p"),
        k8s.preemptor("q", gpus=16, created_ago=1),
    )
    out = plan_to_json(
        run(state, {ObjectKey("ml", "v"): PodUsage(0.01234, cpu_cores=0.5, gpu_recent_max=0.02)})
    )
    assert out["decisions"] == [
        {
            "preemptor": "ml/p",
            "node": "n1",
            "victims": ["ml/v"],
            "gpus_freed": 4,
            "gpus_requested": 4,
            "preemptor_priority": 1000,
            "free_gpus_before": 0,
            "victim_details": [
                {"pod": "ml/v", "gpus": 4, "priority": 100, "gpu_activity": 0.0123, "cpu_cores": 0.5}
            ],
        }
    ]
    assert [u["preemptor"] for u in out["unresolved"]] == ["ml/q"]
    assert "allocatable 4 GPUs < 16" in out["unresolved"][0]["reason"]
    assert out["warnings"] == [] and out["skipped_cooldown"] == [] and out["already_fit"] == []


def test_many_small_pods_stay_bounded_and_still_find_a_set() -> None:
    pods = [k8s.pod(f"s{i:02}", gpus=1, node_name="n1", scheduled_ago=3000 + i) for i in range(40)]
    state = k8s.cluster(k8s.node("n1", gpus=40), *pods, k8s.preemptor("p", gpus=8))
    result = run(state, k8s.idle(*(f"s{i:02}" for i in range(40))))
    chosen = victims(result)["ml/p"]
    # The 8 most recently scheduled (least work lost) of equal-priority 1-GPU pods.
    assert chosen == [f"ml/s{i:02}" for i in range(8)]


def test_a_priority_class_name_that_is_a_list_protects_the_pod_and_the_pass_goes_on() -> None:
    listed = k8s.pod("v", gpus=4, node_name="n1", priority=None)
    listed["spec"]["priorityClassName"] = ["batch"]
    odd_preemptor = k8s.preemptor("q", gpus=4)
    odd_preemptor["spec"]["priorityClassName"] = ["reclaim"]
    state = k8s.cluster(k8s.node("n1", gpus=4), listed, k8s.preemptor("p", gpus=4), odd_preemptor)
    result = run(state, k8s.idle("v"))
    assert result.decisions == [] and [u.preemptor for u in result.unresolved] == [ObjectKey("ml", "p")]
    (verdict,) = result.verdicts[ObjectKey("ml", "v")]
    assert verdict.rule == "resources-malformed" and not verdict.eligible
    assert "spec.priorityClassName: ['batch'] is not a string" in verdict.reason
