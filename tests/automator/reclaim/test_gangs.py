"""Gangs in the planner: membership keys, victim gangs evicted whole, preemptor gangs placed whole or not."""

from __future__ import annotations

from typing import Any

import pytest

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.reclaim.model import Plan, PlannerConfig, PodUsage
from automator.reclaim.planner import plan
from automator.reclaim.report import explain, plan_to_json, plan_to_text
from steward_common.conventions import (
    GANG_COSCHEDULING_LABEL,
    GANG_JOBSET_LABEL,
    GANG_KAI_ANNOTATION,
    GANG_KUEUE_COUNT_ANNOTATION,
    GANG_KUEUE_LABEL,
    GANG_LWS_LABEL,
    GANG_LWS_SIZE_ANNOTATION,
    GANG_VOLCANO_ANNOTATION,
    LAST_RECLAIM_ANNOTATION,
    UnresolvedReason,
)
from tests.automator import k8s

PG = {GANG_COSCHEDULING_LABEL: "big"}


def run(state: ClusterState, usage: dict[ObjectKey, PodUsage], **config: Any) -> Plan:
    return plan(state, usage, PlannerConfig(**config), k8s.NOW)


def evicted(result: Plan) -> dict[str, list[str]]:
    return {str(d.preemptor): [str(v.pod) for v in d.victims] for d in result.decisions}


def unresolved(result: Plan) -> dict[str, str]:
    return {str(u.preemptor): u.reason for u in result.unresolved}


def why_cluster(*extra: dict[str, Any]) -> ClusterState:
    """The issue's case: two 8-GPU nodes, an idle and a busy 8-GPU pod, a pending gang of two 8-GPU pods."""
    return k8s.cluster(
        k8s.node("n1"),
        k8s.node("n2"),
        k8s.pod("idle-a", gpus=8, node_name="n1", namespace="research"),
        k8s.pod("busy-b", gpus=8, node_name="n2", namespace="research"),
        k8s.preemptor("big-0", gpus=8, namespace="prod", labels=PG),
        k8s.preemptor("big-1", gpus=8, namespace="prod", labels=PG),
        *extra,
    )


USAGE = {
    **k8s.idle("idle-a", namespace="research"),
    **k8s.busy("busy-b", namespace="research"),
}


def test_a_gang_that_cannot_start_evicts_nothing() -> None:
    result = run(why_cluster(), USAGE)
    assert result.decisions == [] and result.already_fit == []
    reasons = unresolved(result)
    assert set(reasons) == {"prod/big-0", "prod/big-1"}
    for reason in reasons.values():
        assert reason.startswith("gang-does-not-fit: gang prod/big: 1 of 2 pending member(s) could be placed")
        assert "prod/big-1: no node fits" in reason  # the first member that could not, and its closest node
    assert {u.kind for u in result.unresolved} == {UnresolvedReason.GANG_DOES_NOT_FIT}
    body = plan_to_json(result)
    assert [u["gang"] for u in body["unresolved"]] == ["prod/big", "prod/big"]
    # no group object listed: needed counted from the members, with one warning
    assert [w["gang"] for w in body["warnings"]] == ["prod/big"]


def test_a_gang_that_fits_is_decided_whole() -> None:
    usage = {**USAGE, **k8s.idle("busy-b", namespace="research")}
    result = run(why_cluster(k8s.pod_group("big", 2, namespace="prod")), usage)
    assert evicted(result) == {"prod/big-0": ["research/idle-a"], "prod/big-1": ["research/busy-b"]}
    assert [d.node for d in result.decisions] == ["n1", "n2"]
    assert {d.gang for d in result.decisions} == {"prod/big"}
    assert result.unresolved == [] and result.gang_warnings == []
    assert "[gang prod/big: 2 needed, 0 running]" in plan_to_text(result)


def test_without_gang_keys_the_members_are_single_pods() -> None:
    state = k8s.cluster(
        k8s.node("n1"),
        k8s.node("n2"),
        k8s.pod("idle-a", gpus=8, node_name="n1", namespace="research"),
        k8s.pod("busy-b", gpus=8, node_name="n2", namespace="research"),
        k8s.preemptor("big-0", gpus=8, namespace="prod"),
        k8s.preemptor("big-1", gpus=8, namespace="prod"),
    )
    result = run(state, USAGE)
    assert evicted(result) == {"prod/big-0": ["research/idle-a"]}
    assert "gang" not in plan_to_json(result)["decisions"][0]


def test_a_basic_podgroup_is_no_gang() -> None:
    basic = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "big", "namespace": "prod"},
        "spec": {"schedulingPolicy": {"basic": {}}},
    }
    members = [
        k8s.preemptor(f"big-{i}", gpus=8, namespace="prod", schedulingGroup={"podGroupName": "big"})
        for i in (0, 1)
    ]
    state = k8s.cluster(
        k8s.node("n1"),
        k8s.node("n2"),
        k8s.pod("idle-a", gpus=8, node_name="n1", namespace="research"),
        k8s.pod("busy-b", gpus=8, node_name="n2", namespace="research"),
        *members,
        basic,
    )
    assert evicted(run(state, USAGE)) == {"prod/big-0": ["research/idle-a"]}


def _member(name: str, key: str, **kw: Any) -> dict[str, Any]:
    return k8s.preemptor(name, gpus=8, namespace="prod", **kw)


MEMBERSHIP = [
    pytest.param(
        lambda n: _member(n, "", schedulingGroup={"podGroupName": "big"}),
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "big", "namespace": "prod"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        },
        "prod/big",
        id="schedulingGroup",
    ),
    pytest.param(
        lambda n: _member(
            n, "", workloadRef={"name": "js", "podGroup": "workers", "podGroupReplicaKey": "r1"}
        ),
        {
            "apiVersion": "scheduling.k8s.io/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": "js", "namespace": "prod"},
            "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 2}}}]},
        },
        "prod/js/workers/r1",
        id="workloadRef",
    ),
    pytest.param(
        lambda n: _member(n, "", labels={GANG_COSCHEDULING_LABEL: "big"}),
        k8s.pod_group("big", 2, namespace="prod"),
        "prod/big",
        id="coscheduling",
    ),
    pytest.param(
        lambda n: _member(n, "", annotations={GANG_VOLCANO_ANNOTATION: "big"}),
        k8s.pod_group("big", 2, namespace="prod", api="scheduling.volcano.sh/v1beta1"),
        "prod/big",
        id="volcano",
    ),
    pytest.param(
        lambda n: _member(n, "", annotations={GANG_KAI_ANNOTATION: "big"}),
        k8s.pod_group("big", 2, namespace="prod", api="scheduling.run.ai/v2alpha2"),
        "prod/big",
        id="kai",
    ),
    pytest.param(
        lambda n: _member(
            n, "", labels={GANG_KUEUE_LABEL: "big"}, annotations={GANG_KUEUE_COUNT_ANNOTATION: "2"}
        ),
        None,
        "prod/big",
        id="kueue",
    ),
    pytest.param(
        lambda n: _member(n, "", labels={GANG_LWS_LABEL: "abc"}, annotations={GANG_LWS_SIZE_ANNOTATION: "2"}),
        None,
        "prod/abc",
        id="lws",
    ),
    pytest.param(lambda n: _member(n, "", labels={GANG_JOBSET_LABEL: "js"}), None, "prod/js", id="jobset"),
]


@pytest.mark.parametrize(("member", "group", "name"), MEMBERSHIP)
def test_every_membership_key_makes_a_gang(member: Any, group: dict[str, Any] | None, name: str) -> None:
    objs = [
        k8s.node("n1"),
        k8s.node("n2"),
        k8s.pod("idle-a", gpus=8, node_name="n1", namespace="research"),
        k8s.pod("busy-b", gpus=8, node_name="n2", namespace="research"),
        member("big-0"),
        member("big-1"),
    ]
    result = run(k8s.cluster(*objs, *([group] if group else [])), USAGE)
    assert result.decisions == []
    assert {u.gang for u in result.unresolved} == {name}
    assert all(u.reason.startswith("gang-does-not-fit") for u in result.unresolved)
    assert result.gang_warnings == []  # the count came from the group object or the pods' own keys


@pytest.mark.parametrize("count", [0, -1, "two", "1_0", True, None])
def test_a_malformed_count_protects_and_leaves_unresolved(count: Any) -> None:
    members = [_member(f"big-{i}", "", labels={GANG_COSCHEDULING_LABEL: "big"}) for i in (0, 1)]
    victims = [
        k8s.pod(
            f"v-{i}", gpus=8, node_name=f"n{i}", namespace="research", labels={GANG_COSCHEDULING_LABEL: "v"}
        )
        for i in (1, 2)
    ]
    state = k8s.cluster(
        k8s.node("n1"),
        k8s.node("n2"),
        *victims,
        *members,
        k8s.pod_group("big", count, namespace="prod"),
        k8s.pod_group("v", count, namespace="research"),
        k8s.preemptor("solo", gpus=8, namespace="prod"),
    )
    result = run(state, k8s.idle("v-1", "v-2", namespace="research"))
    assert result.decisions == []
    kinds = {str(u.preemptor): u.kind for u in result.unresolved}
    assert kinds == {
        "prod/big-0": UnresolvedReason.GANG_MALFORMED,
        "prod/big-1": UnresolvedReason.GANG_MALFORMED,
        "prod/solo": UnresolvedReason.NO_FIT,
    }
    assert all(u.reason.startswith("gang-malformed: gang prod/big") for u in result.unresolved if u.gang)
    text = explain(result, state, ObjectKey("research", "v-1"))
    assert "[gang-malformed] gang-malformed: gang research/v" in text


def _victim_gang(
    usage_busy: str | None = None, wanted: int = 8
) -> tuple[ClusterState, dict[ObjectKey, PodUsage]]:
    """A 2-member idle victim gang on n1 and n2 (4 GPUs each), a single idle 4-GPU pod on n1."""
    gang = {GANG_COSCHEDULING_LABEL: "train"}
    state = k8s.cluster(
        k8s.node("n1"),
        k8s.node("n2"),
        k8s.pod("g-0", gpus=4, node_name="n1", namespace="research", labels=gang),
        k8s.pod("g-1", gpus=4, node_name="n2", namespace="research", labels=gang),
        k8s.pod("solo", gpus=4, node_name="n1", namespace="research"),
        k8s.pod("other", gpus=4, node_name="n2", namespace="research", priority=5000),
        k8s.pod_group("train", 2, namespace="research"),
        k8s.preemptor("p", gpus=wanted),
    )
    usage = k8s.idle("g-0", "g-1", "solo", "other", namespace="research")
    if usage_busy:
        usage.update(k8s.busy(usage_busy, namespace="research"))
    return state, usage


def test_a_victim_gang_is_evicted_whole_across_nodes() -> None:
    state, usage = _victim_gang()
    (decision,) = run(state, usage).decisions
    assert decision.node == "n1"
    assert [(str(v.pod), v.node, v.gang) for v in decision.victims] == [
        ("research/g-0", "n1", "research/train"),
        ("research/g-1", "n2", "research/train"),
        ("research/solo", "n1", None),
    ]
    assert decision.gpus_freed == 12
    body = plan_to_json(run(state, usage))["decisions"][0]
    assert [d["node"] for d in body["victim_details"]] == ["n1", "n2", "n1"]


def test_a_victim_gang_counts_all_members_in_the_order() -> None:
    # 4 GPUs needed: the single pod (1 victim) beats the gang (2 victims) although both free 4 GPUs on n1.
    state, usage = _victim_gang(wanted=4)
    (decision,) = run(state, usage).decisions
    assert [str(v.pod) for v in decision.victims] == ["research/solo"]


def test_one_busy_member_protects_the_whole_gang() -> None:
    state, usage = _victim_gang(usage_busy="g-1")
    result = run(state, usage)
    assert result.decisions == []
    text = explain(result, state, ObjectKey("research", "g-0"))
    assert "gang-member-protected: gang research/train: research/g-1 [6-gpu-busy]" in text


def _two_full_nodes(*objs: dict[str, Any]) -> ClusterState:
    """Two 8-GPU nodes each held by one 8-GPU research pod (a on n1, b on n2), and the objects given."""
    return k8s.cluster(
        k8s.node("n1"),
        k8s.node("n2"),
        k8s.pod("a", gpus=8, node_name="n1", namespace="research"),
        k8s.pod("b", gpus=8, node_name="n2", namespace="research"),
        *objs,
    )


def test_gang_members_in_cooldown_hold_the_whole_gang() -> None:
    members = [
        _member(
            "big-0",
            "",
            labels={GANG_COSCHEDULING_LABEL: "big"},
            annotations={LAST_RECLAIM_ANNOTATION: k8s.ago(10)},
        ),
        _member("big-1", "", labels={GANG_COSCHEDULING_LABEL: "big"}),
    ]
    state = _two_full_nodes(
        *members,
        k8s.pod_group("big", 2, namespace="prod"),
    )
    result = run(state, k8s.idle("a", "b", namespace="research"))
    assert result.decisions == []
    assert {u.kind for u in result.unresolved} == {UnresolvedReason.COOLDOWN}
    assert sorted(map(str, result.skipped_cooldown)) == ["prod/big-0", "prod/big-1"]


def test_the_budget_counts_the_gangs_victims_together() -> None:
    state = _two_full_nodes(
        _member("big-0", "", labels={GANG_COSCHEDULING_LABEL: "big"}),
        _member("big-1", "", labels={GANG_COSCHEDULING_LABEL: "big"}),
        k8s.pod_group("big", 2, namespace="prod"),
    )
    result = run(state, k8s.idle("a", "b", namespace="research"), max_evictions_per_pass=1)
    assert result.decisions == []
    assert {u.kind for u in result.unresolved} == {UnresolvedReason.EVICTION_BUDGET}
    assert all(u.reason.endswith("this gang needs 2") for u in result.unresolved)


def test_members_beyond_the_count_are_served_after_the_gang_as_single_pods() -> None:
    state = _two_full_nodes(
        *[_member(f"big-{i}", "", labels={GANG_COSCHEDULING_LABEL: "big"}) for i in range(3)],
        k8s.pod_group("big", 2, namespace="prod"),
    )
    result = run(state, k8s.idle("a", "b", namespace="research"))
    assert evicted(result) == {"prod/big-0": ["research/a"], "prod/big-1": ["research/b"]}
    assert unresolved(result)["prod/big-2"].startswith("no node fits")


def test_a_gang_beside_single_pods_keeps_its_place_by_its_lowest_priority() -> None:
    # the single preemptor (priority 900) comes before the gang (lowest member priority 800)
    state = _two_full_nodes(
        _member("big-0", "", priority=1000, labels={GANG_COSCHEDULING_LABEL: "big"}),
        _member("big-1", "", priority=800, labels={GANG_COSCHEDULING_LABEL: "big"}),
        k8s.preemptor("solo", gpus=8, namespace="prod", priority=900),
        k8s.pod_group("big", 2, namespace="prod"),
    )
    result = run(state, k8s.idle("a", "b", namespace="research"))
    assert evicted(result) == {"prod/solo": ["research/a"]}
    assert all(u.reason.startswith("gang-does-not-fit") for u in result.unresolved)
