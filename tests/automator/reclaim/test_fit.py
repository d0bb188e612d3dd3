"""Node fit: cordon, readiness, taints, nodeSelector, required node affinity, cpu and memory."""

from __future__ import annotations

from typing import Any

import pytest

from automator.objects.keys import JsonObj
from automator.objects.node import node_record
from automator.objects.pod import pod_record
from automator.reclaim.fit import affinity_matches, static_misfit, untolerated_taint
from automator.reclaim.model import PlannerConfig
from automator.reclaim.planner import plan
from tests.automator import k8s


def chosen_node(pre: JsonObj, *nodes: JsonObj, **victim_kw: Any) -> str | None:
    """Each node holds one idle 4-GPU victim; where does the 4-GPU preemptor go?"""
    victims = [
        k8s.pod(f"v-{n['metadata']['name']}", gpus=4, node_name=n["metadata"]["name"], **victim_kw)
        for n in nodes
    ]
    state = k8s.cluster(*nodes, *victims, pre)
    result = plan(state, k8s.idle(*(v["metadata"]["name"] for v in victims)), PlannerConfig(), k8s.NOW)
    return result.decisions[0].node if result.decisions else None


NO_SCHEDULE = {"key": "gpu", "value": "a100", "effect": "NoSchedule"}


def test_cordoned_node_is_ruled_out() -> None:
    assert (
        chosen_node(k8s.preemptor("p"), k8s.node("a", gpus=4, unschedulable=True), k8s.node("b", gpus=4))
        == "b"
    )
    state = k8s.cluster(
        k8s.node("a", gpus=4, unschedulable=True), k8s.pod("v", gpus=4, node_name="a"), k8s.preemptor("p")
    )
    result = plan(state, k8s.idle("v"), PlannerConfig(), k8s.NOW)
    assert "1 cordoned" in result.unresolved[0].reason


@pytest.mark.parametrize(
    ("ready", "usable"), [("True", True), ("False", False), ("Unknown", False), (None, True)]
)
def test_not_ready_node_is_ruled_out(ready: str | None, usable: bool) -> None:
    assert (chosen_node(k8s.preemptor("p"), k8s.node("a", gpus=4, ready=ready)) == "a") is usable


@pytest.mark.parametrize(
    ("tolerations", "taint", "tolerated"),
    [
        ([], NO_SCHEDULE, False),
        ([], {"key": "gpu", "effect": "PreferNoSchedule"}, True),
        ([], {"key": "gpu", "value": "x", "effect": "NoExecute"}, False),
        ([{"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}], NO_SCHEDULE, True),
        ([{"key": "gpu", "value": "a100"}], NO_SCHEDULE, True),  # Equal by default, any effect
        ([{"key": "gpu", "operator": "Equal", "value": "h100"}], NO_SCHEDULE, False),
        ([{"key": "gpu", "operator": "Exists"}], NO_SCHEDULE, True),
        ([{"operator": "Exists"}], NO_SCHEDULE, True),  # empty key with Exists tolerates everything
        ([{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}], NO_SCHEDULE, False),
        ([{"key": "other", "operator": "Exists"}], NO_SCHEDULE, False),
    ],
)
def test_taints(tolerations: list[dict[str, str]], taint: dict[str, str], tolerated: bool) -> None:
    pod = k8s.preemptor("p", tolerations=tolerations)
    node = k8s.node("a", taints=[taint])
    assert (untolerated_taint(pod_record(pod), node_record(node)) is None) is tolerated
    assert (chosen_node(pod, k8s.node("a", gpus=4, taints=[taint])) == "a") is tolerated


def test_node_selector() -> None:
    pre = k8s.preemptor("p", nodeSelector={"gpu": "h100"})
    nodes = (k8s.node("a", gpus=4, labels={"gpu": "a100"}), k8s.node("b", gpus=4, labels={"gpu": "h100"}))
    assert chosen_node(pre, *nodes) == "b"


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(
    ("terms", "matches"),
    [
        ([{"matchExpressions": [_expr("gpu", "In", "h100", "a100")]}], True),
        ([{"matchExpressions": [_expr("gpu", "NotIn", "h100")]}], False),
        ([{"matchExpressions": [_expr("zone", "Exists")]}], False),
        ([{"matchExpressions": [_expr("zone", "DoesNotExist")]}], True),
        ([{"matchExpressions": [_expr("mem", "Gt", "40")]}], True),
        ([{"matchExpressions": [_expr("mem", "Gt", "80")]}], False),
        ([{"matchExpressions": [_expr("mem", "Lt", "81")]}], True),
        ([{"matchExpressions": [_expr("gpu", "In", "h100"), _expr("mem", "Gt", "100")]}], False),  # ANDed
        (
            [
                {"matchExpressions": [_expr("gpu", "In", "x")]},
                {"matchExpressions": [_expr("mem", "Lt", "99")]},
            ],
            True,
        ),
        ([{"matchFields": [_expr("metadata.name", "In", "a")]}], True),
        ([{"matchFields": [_expr("metadata.name", "NotIn", "a")]}], False),
        ([{}], False),  # an empty term matches nothing
    ],
)
def test_required_node_affinity(terms: list[dict[str, Any]], matches: bool) -> None:
    pre = k8s.preemptor("p", affinity=_affinity(*terms))
    node = k8s.node("a", gpus=4, labels={"gpu": "h100", "mem": "80"})
    assert affinity_matches(pod_record(pre), node_record(node)) is matches
    assert (chosen_node(pre, node) == "a") is matches


def test_cpu_and_memory_must_fit_after_eviction() -> None:
    pre = k8s.preemptor("p", cpu="16", memory="64Gi")
    small_cpu = k8s.node("a", gpus=4, cpu="8")
    small_mem = k8s.node("b", gpus=4, memory="32Gi")
    enough = k8s.node("c", gpus=4, cpu="16", memory="64Gi")
    assert chosen_node(pre, small_cpu, small_mem, enough, cpu="8", memory="16Gi") == "c"


def test_victim_set_grows_when_the_smallest_set_lacks_cpu() -> None:
    # Two idle pods: a 4-GPU pod with no cpu and a 2-GPU + 2-GPU pair holding the cpu the preemptor needs.
    state = k8s.cluster(
        k8s.node("n1", gpus=8, cpu="10"),
        k8s.pod("big", gpus=4, node_name="n1", cpu="1"),
        k8s.pod("b", gpus=2, node_name="n1", cpu="4"),
        k8s.pod("c", gpus=2, node_name="n1", cpu="4"),
        k8s.preemptor("p", gpus=4, cpu="8"),
    )
    result = plan(state, k8s.idle("big", "b", "c"), PlannerConfig(), k8s.NOW)
    assert [str(v.pod) for v in result.decisions[0].victims] == ["ml/b", "ml/c"]


def test_cpu_shortfall_is_named_in_unresolved_reason() -> None:
    state = k8s.cluster(
        k8s.node("n1", gpus=4, cpu="4"),
        k8s.pod("v", gpus=4, node_name="n1", cpu="1"),
        k8s.preemptor("p", cpu="8"),
    )
    result = plan(state, k8s.idle("v"), PlannerConfig(), k8s.NOW)
    assert "enough GPUs but cpu: needs 8000m" in result.unresolved[0].reason


def test_static_misfit_order_and_details() -> None:
    pre = k8s.preemptor("p", nodeSelector={"gpu": "h100"})
    assert static_misfit(pod_record(pre), node_record(k8s.node("a", labels={"gpu": "h100"}))) is None
    misfit = static_misfit(pod_record(pre), node_record(k8s.node("a")))
    assert misfit is not None and misfit[0] == "nodeSelector/affinity mismatch"
    taint = static_misfit(pod_record(k8s.preemptor("p")), node_record(k8s.node("a", taints=[NO_SCHEDULE])))
    assert taint is not None and "gpu=a100:NoSchedule" in taint[1]
