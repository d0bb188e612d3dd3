"""A Pod record's requests: the scheduler's formula over the amounts decoded once; a literal parsed before
(a memo of amounts) answers as reading it again does, and a malformed spec is refused every time."""

from __future__ import annotations

from typing import Any

import pytest

from automator.objects.node import node_record
from automator.objects.pod import pod_record
from automator.objects.resources import FieldError, Requests

GPU = ("nvidia.com/gpu",)


def pod_requests(pod: dict[str, Any], names: tuple[str, ...]) -> Requests:
    return pod_record(pod).requests(names)


def node_allocatable(node: dict[str, Any], names: tuple[str, ...]) -> Requests:
    return node_record(node).offers(names)


def _pod(limits: dict[str, Any], requests: dict[str, Any], **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "resources": {"limits": limits, "requests": requests}}
    return {"spec": {"containers": [container], **spec}}


def test_a_literal_of_another_type_is_not_answered_from_the_cache() -> None:
    assert pod_requests(_pod({"nvidia.com/gpu": 1}, {"cpu": 1}), GPU) == Requests(1, 1000, 0)
    with pytest.raises(FieldError):
        pod_requests(_pod({"nvidia.com/gpu": True}, {"cpu": 1}), GPU)
    with pytest.raises(FieldError):
        pod_requests(_pod({"nvidia.com/gpu": 1}, {"cpu": True}), GPU)
    assert pod_requests(_pod({"nvidia.com/gpu": 1.0}, {"cpu": "1"}), GPU) == Requests(1, 1000, 0)


def test_the_same_spec_gives_the_same_requests_and_other_specs_their_own() -> None:
    first = pod_requests(_pod({"nvidia.com/gpu": "2"}, {"cpu": "500m", "memory": "1Gi"}), GPU)
    assert first == Requests(2, 500, 2**30)
    assert pod_requests(_pod({"nvidia.com/gpu": "2"}, {"cpu": "500m", "memory": "1Gi"}), GPU) == first
    assert pod_requests(_pod({"nvidia.com/gpu": "2"}, {"cpu": "500m", "memory": "1Gi"}), ("other/gpu",)) == (
        Requests(0, 500, 2**30)
    )
    # init containers and overhead are read each time (the formula of docs/reclaim.md)
    overhead = _pod({"nvidia.com/gpu": "2"}, {"cpu": "500m", "memory": "1Gi"}, overhead={"cpu": "250m"})
    assert pod_requests(overhead, GPU) == Requests(2, 750, 2**30)


@pytest.mark.parametrize(
    "pod",
    [
        _pod({"nvidia.com/gpu": ["1"]}, {}),
        {"spec": {"containers": [{"resources": {"limits": ["nvidia.com/gpu"]}}]}},
        _pod({"nvidia.com/gpu": "1.5"}, {}),
    ],
    ids=["list-literal", "list-limits", "fraction"],
)
def test_malformed_specs_are_refused_every_time(pod: dict[str, Any]) -> None:
    for _ in range(2):
        with pytest.raises(FieldError):
            pod_requests(pod, GPU)


def _node(allocatable: Any) -> dict[str, Any]:
    return {"status": {"allocatable": allocatable}}


def test_node_allocatable_is_what_reading_it_again_gives() -> None:
    usual = {"nvidia.com/gpu": "8", "cpu": "127900m", "memory": "1Ti", "pods": "110"}
    expected = Requests(8, 127_900, 2**40)
    assert node_allocatable(_node(dict(usual)), GPU) == expected
    assert node_allocatable(_node(dict(usual)), GPU) == expected
    assert node_allocatable(_node(dict(usual)), ("other/gpu",)) == Requests(0, 127_900, 2**40)
    assert node_allocatable(_node({**usual, "cpu": "1.5"}), GPU) == Requests(8, 1_500, 2**40)
    # an absent GPU resource is none; a null one is malformed, every time
    assert node_allocatable(_node({"cpu": "2", "memory": "1Gi"}), GPU) == Requests(0, 2_000, 2**30)
    assert node_allocatable(_node({**usual, "nvidia.com/gpu": 1}), GPU) == Requests(1, 127_900, 2**40)
    for _ in range(2):
        with pytest.raises(FieldError):
            node_allocatable(_node({**usual, "nvidia.com/gpu": None}), GPU)
        with pytest.raises(FieldError):
            node_allocatable(_node({**usual, "nvidia.com/gpu": True}), GPU)
        with pytest.raises(FieldError):
            node_allocatable(_node({**usual, "cpu": ["1"]}), GPU)
