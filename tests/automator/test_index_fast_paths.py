"""The index reads each pod's fields once (issue 14: 40,000 pods a pass): a one-container spec's requests
from spec_requests' memo by a key it makes inline, the scheduling time through parse_time's memo. Whatever
the shape, the index must read what pod_requests and scheduled_at read, the first time and again from the
memos."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from automator.objects.model import JsonObj, PlannerConfig
from automator.objects.resources import FieldError, pod_requests, scheduled_at
from automator.reclaim.cluster_index import index_cluster
from tests.automator.k8s import GPU, NOW, ago, cluster, node, pod


def _spec(change: Callable[[JsonObj], None]) -> JsonObj:
    obj = pod("p", gpus="2", node_name="n1", cpu="2", memory="4Gi")
    change(obj)
    return obj


def _resources(obj: JsonObj) -> dict[str, Any]:
    resources: dict[str, Any] = obj["spec"]["containers"][0]["resources"]
    return resources


def _second_container(obj: JsonObj) -> None:
    obj["spec"]["containers"].append({"name": "side", "resources": {"limits": {GPU: "1"}}})


def _conditions(*conditions: Any) -> Callable[[JsonObj], None]:
    def change(obj: JsonObj) -> None:
        obj["status"]["conditions"] = list(conditions)

    return change


SCHEDULED = {"type": "PodScheduled", "status": "True", "lastTransitionTime": ago(7200)}
VARIANTS: dict[str, Callable[[JsonObj], None]] = {
    "usual": lambda obj: None,
    "no-requests": lambda obj: _resources(obj).pop("requests"),
    "null-limits": lambda obj: _resources(obj).update(limits=None),
    "no-resources": lambda obj: obj["spec"]["containers"][0].pop("resources"),
    "int-literals": lambda obj: _resources(obj).update(limits={GPU: 2}, requests={"cpu": 2}),
    "cpu-limit-only": lambda obj: _resources(obj).update(limits={GPU: "1", "cpu": "3"}, requests={}),
    "empty-init-containers": lambda obj: obj["spec"].update(initContainers=[]),
    "init-container": lambda obj: obj["spec"].update(
        initContainers=[{"name": "i", "resources": {"requests": {"cpu": "8"}}}]
    ),
    "overhead": lambda obj: obj["spec"].update(overhead={"cpu": "250m", "memory": "1Gi"}),
    "two-containers": _second_container,
    "list-literal": lambda obj: _resources(obj).update(limits={GPU: ["1"]}),
    "fraction": lambda obj: _resources(obj).update(limits={GPU: "1.5"}),
    "list-requests": lambda obj: _resources(obj).update(requests=["cpu"]),
    "not-scheduled": _conditions({"type": "PodScheduled", "status": "False"}),
    "no-conditions": _conditions(),
    "other-condition-first": _conditions({"type": "Ready", "status": "True"}, SCHEDULED),
    "text-condition-first": _conditions("PodScheduled", SCHEDULED),
    "bad-time": _conditions({"type": "PodScheduled", "status": "True", "lastTransitionTime": "yesterday"}),
    "numeric-time": _conditions({"type": "PodScheduled", "status": "True", "lastTransitionTime": 1}),
    "no-time": _conditions({"type": "PodScheduled", "status": "True"}),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_index_reads_what_the_readers_read(variant: str) -> None:
    obj = _spec(VARIANTS[variant])
    try:
        expected_req: Any = pod_requests(obj, (GPU,))
    except FieldError:
        expected_req = None
    try:
        expected_time: Any = scheduled_at(obj)
    except FieldError:
        expected_time = "malformed"
    # the usual pod's literals and time are in the memos first: a variant must not be answered from them
    index_cluster(cluster(node("n1"), _spec(VARIANTS["usual"])), {}, PlannerConfig(), NOW)
    for _ in range(2):  # the second index reads from the memos the first one filled
        state = cluster(node("n1", gpus=8, cpu="64"), copy.deepcopy(obj))
        index = index_cluster(state, {}, PlannerConfig(), NOW)
        n1 = index.nodes["n1"]
        if expected_req is None:
            assert n1.error is not None and "ml/p" in n1.error
            assert n1.candidates == []
            continue
        assert n1.error is None
        assert (n1.used_gpus, n1.used_cpu, n1.used_mem) == (
            expected_req.gpus,
            expected_req.cpu_m,
            expected_req.memory,
        )
        assert [c.req for c in n1.candidates] == ([expected_req] if expected_req.gpus else [])
        if not expected_req.gpus:
            continue
        (candidate,) = n1.candidates
        if expected_time == "malformed":
            assert candidate.assessment.blocked is not None
            assert candidate.assessment.blocked[0] == "resources-malformed"
        else:
            assert candidate.scheduled == expected_time
