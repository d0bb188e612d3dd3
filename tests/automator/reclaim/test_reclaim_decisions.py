"""Issue 15's four contract decisions, each from both sides."""

from __future__ import annotations

from typing import Any

import pytest

from automator.objects.cluster import ClusterState
from automator.objects.keys import JsonObj, ObjectKey
from automator.reclaim.model import Plan, PlannerConfig, PodUsage
from automator.reclaim.planner import plan
from automator.reclaim.report import plan_to_json
from steward_common.conventions import RECLAIM_ANNOTATION
from tests.automator import k8s


def run(state: ClusterState, usage: dict[ObjectKey, PodUsage]) -> Plan:
    return plan(state, usage, PlannerConfig(), k8s.NOW)


# 1. A preemptor that already fits reserves nothing for the rest of the pass.


def test_1_already_fitting_preemptors_share_the_same_free_gpus() -> None:
    # Evicting for `second` on the assumption that `first` binds to the free GPUs is not allowed
    # (test_planner asserted the opposite before issue 15); both count the same free GPUs.
    state = k8s.cluster(
        k8s.node("n1", gpus=8),
        k8s.pod("idle", gpus=4, node_name="n1"),
        k8s.preemptor("first", created_ago=100),
        k8s.preemptor("second", created_ago=50),
    )
    result = run(state, k8s.idle("idle"))
    assert [(str(d.preemptor), d.node, d.free_gpus_before) for d in result.already_fit] == [
        ("ml/first", "n1", 4),
        ("ml/second", "n1", 4),
    ]
    assert result.decisions == []  # nothing evicted on the assumption that `first` binds


def test_1_a_later_preemptor_is_not_moved_elsewhere_by_one_that_fits() -> None:
    state = k8s.cluster(
        k8s.node("n1", gpus=4),
        *k8s.held_node("n2", "v"),
        k8s.preemptor("first", created_ago=100),
        k8s.preemptor("second", created_ago=50),
    )
    result = run(state, k8s.idle("v"))
    assert [str(d.preemptor) for d in result.already_fit] == ["ml/first", "ml/second"]
    assert result.decisions == []


def test_1_gpus_freed_by_evictions_stay_reserved() -> None:
    # The other side: a preemptor served with victims takes its GPUs and the freed surplus.
    state = k8s.cluster(
        *k8s.held_node("n1", "v"),
        k8s.preemptor("first", gpus=2, created_ago=100),
        k8s.preemptor("second", gpus=2, created_ago=50),
    )
    result = run(state, k8s.idle("v"))
    assert [(str(d.preemptor), [str(v.pod) for v in d.victims]) for d in result.decisions] == [
        ("ml/first", ["ml/v"])
    ]
    # The other 2 freed GPUs are reserved for `first` in this pass: `second` does not reuse its victim.
    assert result.already_fit == [] and [str(u.preemptor) for u in result.unresolved] == ["ml/second"]


# 2. A pod with a deletionTimestamp is never a preemptor.


@pytest.mark.parametrize("terminating", [True, False])
def test_2_a_terminating_pending_pod_is_never_a_preemptor(terminating: bool) -> None:
    state = k8s.cluster(
        *k8s.held_node("n1", "v"),
        k8s.preemptor("p", terminating=terminating),
    )
    result = run(state, k8s.idle("v"))
    if terminating:
        assert result.decisions == [] and result.unresolved == [] and result.already_fit == []
        assert ObjectKey("ml", "v") not in result.verdicts
    else:
        assert [str(d.preemptor) for d in result.decisions] == ["ml/p"]


# 3. The opt-in value is exactly "true"; anything but "true"/"false" is warned about.


def _opt_in(value: Any) -> tuple[Plan, dict[str, Any]]:
    pc = k8s.priority_class("reclaim", 1000, {RECLAIM_ANNOTATION: value})
    state = k8s.cluster(pc, *k8s.held_node("n1", "v"), k8s.preemptor("p"))
    result = run(state, k8s.idle("v"))
    return result, plan_to_json(result)


def test_3_exactly_true_opts_in_without_warning() -> None:
    result, out = _opt_in("true")
    assert [str(d.preemptor) for d in result.decisions] == ["ml/p"]
    assert out["warnings"] == []


def test_3_false_does_not_opt_in_and_is_not_warned_about() -> None:
    result, out = _opt_in("false")
    assert result.decisions == [] and result.unresolved == [] and out["warnings"] == []


@pytest.mark.parametrize("value", ["TRUE", "True", " true", "yes", "1", True])
def test_3_any_other_value_does_not_opt_in_and_is_warned_about(value: Any) -> None:
    result, out = _opt_in(value)
    assert result.decisions == [] and result.unresolved == [] and result.already_fit == []
    (warning,) = out["warnings"]
    assert warning["priority_class"] == "reclaim" and warning["annotation"] == RECLAIM_ANNOTATION
    assert warning["value"] == str(value) and "does not opt in" in warning["message"]


# 4. Requests follow the scheduler's formula, sidecar init containers included.


def _container(name: str, gpus: int, cpu: str, restart: str | None = None) -> JsonObj:
    obj: JsonObj = {"name": name, "resources": {"limits": {k8s.GPU: gpus}, "requests": {"cpu": cpu}}}
    if restart:
        obj["restartPolicy"] = restart
    return obj


@pytest.mark.parametrize(
    ("init", "expected_gpus"),
    [
        ([_container("sidecar", 2, "1", "Always")], 4),  # a sidecar runs alongside: 2 + 2
        ([_container("setup", 2, "1")], 2),  # a plain init container ends first: max(2, 2)
        ([_container("setup", 3, "1")], 3),  # ... and its peak counts: max(2, 3)
        ([_container("sidecar", 1, "1", "Always"), _container("setup", 2, "1")], 3),  # max(1 + 2, 1 + 2)
    ],
)
def test_4_requests_follow_the_scheduler_formula(init: list[JsonObj], expected_gpus: int) -> None:
    pre = k8s.preemptor("p", gpus=2, initContainers=init)
    state = k8s.cluster(
        k8s.node("n1", gpus=4),
        k8s.pod("a", gpus=1, node_name="n1", scheduled_ago=3600),
        k8s.pod("b", gpus=1, node_name="n1", scheduled_ago=3700),
        k8s.pod("c", gpus=1, node_name="n1", scheduled_ago=3800),
        k8s.pod("d", gpus=1, node_name="n1", scheduled_ago=3900),
        pre,
    )
    result = run(state, k8s.idle("a", "b", "c", "d"))
    (decision,) = result.decisions
    assert decision.gpus_requested == expected_gpus
    assert len(decision.victims) == expected_gpus  # the most recently scheduled first: a, b, c, d
    assert [v.pod.name for v in decision.victims] == ["a", "b", "c", "d"][:expected_gpus]


def test_4_a_sidecar_victim_frees_its_sidecar_gpus_too() -> None:
    victim = k8s.pod("v", gpus=2, node_name="n1", initContainers=[_container("sidecar", 2, "1", "Always")])
    state = k8s.cluster(k8s.node("n1", gpus=4), victim, k8s.preemptor("p", gpus=4))
    (decision,) = run(state, k8s.idle("v")).decisions
    assert (decision.gpus_freed, [v.gpus for v in decision.victims]) == (4, [4])
