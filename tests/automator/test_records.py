"""Typed decoding of pod pages (msgspec) gives exactly the records `json.loads` then `record` give."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from automator.objects.records import decode_pod, decode_pods, record
from tests.bench.bench_automator_memory import realistic_pod


def slow(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for item in copy.deepcopy(items):
        item.setdefault("kind", "Pod")
        item.setdefault("apiVersion", "v1")
        out.append(record(item))
    return out


def page(items: list[Any], cont: str = "") -> bytes:
    return json.dumps(
        {"kind": "PodList", "apiVersion": "v1", "metadata": {"continue": cont}, "items": items}
    ).encode()


WITH_INIT = {
    "metadata": {
        "name": "p",
        "namespace": "ml",
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "1"},
        "managedFields": [{"manager": "x"}],
        "deletionTimestamp": None,
    },
    "spec": {
        "initContainers": [{"name": "init", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "containers": [{"name": "main", "restartPolicy": "Always", "env": []}],
        "volumes": [{"name": "v"}],
        "overhead": {"cpu": "1"},
    },
    "status": {"phase": "Pending", "nominatedNodeName": "n", "containerStatuses": []},
}
ODD_SHAPES = [
    {"metadata": ["not", "a", "map"], "spec": {}},
    {"metadata": {"name": "q"}, "spec": {"containers": "not a list"}},
    {"metadata": {"name": "q"}, "spec": {"containers": [1, {"name": "c"}]}},
    {"metadata": {"name": "q"}, "spec": None, "status": 3},
    {"kind": "Node", "metadata": {"name": "not-a-pod"}, "spec": {"x": 1}},
]


@pytest.mark.parametrize(
    "items",
    [
        [realistic_pod(1, "gpu-00000"), realistic_pod(2, None)],
        [WITH_INIT, {"metadata": {"name": "bare"}}, {"kind": "Pod", "apiVersion": "v1"}],
        [],
        *([odd, WITH_INIT] for odd in ODD_SHAPES),
    ],
)
def test_decoded_pages_are_the_records(items: list[dict[str, Any]]) -> None:
    records, token = decode_pods(page(items, "next"))
    assert records == slow(items) and token == "next"
    assert records[:1] != [] or items == []


def test_the_last_page_has_no_token_and_a_missing_items_key_is_empty() -> None:
    assert decode_pods(b'{"metadata": {}}') == ([], None)
    assert decode_pods(page([WITH_INIT]))[1] is None


def test_dropped_fields_are_dropped() -> None:
    ((pod,), _) = decode_pods(page([WITH_INIT]))
    assert pod["metadata"]["annotations"] == {"keep": "1"}
    assert "managedFields" not in pod["metadata"] and "volumes" not in pod["spec"]
    assert pod["spec"]["initContainers"] == [
        {"name": "init", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    ]
    assert "containerStatuses" not in pod["status"]


@pytest.mark.parametrize("data", [b"not json", b"[1, 2]", b'"text"'])
def test_a_page_that_is_not_a_json_object_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_pods(data)


def test_one_pod_decodes_to_its_record() -> None:
    pod = realistic_pod(3, "gpu-00001")
    assert decode_pod(json.dumps(pod).encode()) == slow([pod])[0]
    odd = ODD_SHAPES[1]
    assert decode_pod(json.dumps(odd).encode()) == slow([odd])[0]
    with pytest.raises(ValueError, match="not an object"):
        decode_pod(b"[]")


def test_a_well_formed_page_never_takes_the_slow_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """The typed decoder handles what an API server sends; json.loads is only the fallback."""

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("json.loads called")

    items = [realistic_pod(1, "gpu-00000"), realistic_pod(2, None), WITH_INIT]
    expected = slow(items)
    monkeypatch.setattr("automator.objects.records.json.loads", refuse)
    assert decode_pods(page(items))[0] == expected
    assert decode_pod(json.dumps(items[0]).encode()) == expected[0]
