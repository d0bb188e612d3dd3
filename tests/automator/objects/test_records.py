"""Pod list pages (the API's JSON bytes) decoded into Pod records: the continue token, the fields kept, a
malformed item a record naming its error, and a page that is not a list answer a ValueError."""

from __future__ import annotations

import json
from typing import Any

import pytest

from automator.objects.cache import RecordCache
from automator.objects.pod import Pod, decode_one_pod, pod_page_decoder
from tests.bench.bench_automator_memory import realistic_pod


def page(items: list[Any], cont: str = "") -> bytes:
    return json.dumps(
        {"kind": "PodList", "apiVersion": "v1", "metadata": {"continue": cont}, "items": items}
    ).encode()


def decode(data: bytes) -> tuple[list[Pod], str | None]:
    return pod_page_decoder(RecordCache[Pod]())(data)


WITH_INIT = {
    "metadata": {
        "name": "p",
        "namespace": "ml",
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


def test_a_page_gives_its_records_and_its_continue_token() -> None:
    records, token = decode(
        page([realistic_pod(1, "gpu-00000"), WITH_INIT, {"metadata": {"name": "bare"}}], "next")
    )
    assert token == "next"
    assert [r.key.name for r in records] == [
        realistic_pod(1, "gpu-00000")["metadata"]["name"],
        "p",
        "bare",
    ]
    pod = records[1]
    assert (pod.phase, pod.nominated_node, pod.terminating) == ("Pending", "n", False)
    assert pod.requests(("nvidia.com/gpu",)).gpus == 1 and pod.requests(()).cpu_m == 1000


def test_the_last_page_has_no_token_and_a_missing_items_key_is_empty() -> None:
    assert decode(b'{"metadata": {}}') == ([], None)
    assert decode(page([WITH_INIT]))[1] is None


@pytest.mark.parametrize(
    "odd",
    [
        {"metadata": {"name": "q"}, "spec": {"containers": "not a list"}},
        {"metadata": {"name": "q"}, "spec": {"containers": [1, {"name": "c"}]}},
        {"metadata": {"name": "q"}, "spec": ["not", "a", "map"]},
    ],
)
def test_a_malformed_pod_is_a_record_naming_its_error(odd: dict[str, Any]) -> None:
    ((pod,), _) = decode(page([odd]))
    assert pod.requests_error is not None and pod.requests_error.path.startswith("spec")


@pytest.mark.parametrize("data", [b"not json", b"[1, 2]", b'"text"', b'{"items": 3}'])
def test_a_page_that_is_not_a_list_answer_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode(data)


def test_one_pod_decodes_to_its_record() -> None:
    assert decode_one_pod(json.dumps(WITH_INIT).encode()).key.name == "p"
    with pytest.raises(ValueError, match="not an object"):
        decode_one_pod(b"[]")


@pytest.mark.parametrize(("number", "millicores"), [(0.1, 100), (1.1, 1100), (0.3, 300), (2.5e-3, 3)])
def test_a_number_is_read_through_its_text_by_the_objects_and_dra(number: float, millicores: int) -> None:
    """`cpu: 0.1` in a hand-written file is 100 millicores, as "0.1" and "100m" are (read as the binary
    float it is, 0.1000000000000000055..., it was 101); a node's offer rounds down from the same value, and
    the DRA loader reads the same number."""
    from decimal import Decimal

    from automator.dra.load import load_objects
    from automator.objects.node import node_record
    from automator.objects.pod import pod_record
    from tests.automator.fixtures.dra import builders as b

    for cpu in (number, str(number), f"{millicores}m"):
        resources = {"requests": {"cpu": cpu}}
        pod = pod_record({"metadata": {"name": "p"}, "spec": {"containers": [{"resources": resources}]}})
        assert pod.requests(()).cpu_m == millicores
    node = node_record({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": number}}})
    assert node.offers(()).cpu_m == int(Decimal(str(number)) * 1000)
    device = {"name": "gpu-0", "capacity": {"cores": {"value": number}}}
    (loaded,) = load_objects([(b.resource_slice("n", [device]), "test")]).devices.values()
    assert loaded.capacity["cores"].value == Decimal(str(number))


def test_a_long_quantity_is_not_echoed_whole() -> None:
    from automator.dra.load import load_objects
    from automator.objects.pod import pod_record
    from automator.objects.resources import FieldError
    from tests.automator.fixtures.dra import builders as b

    long = "1" * 10_000
    resources = {"requests": {"cpu": long}}
    pod = pod_record({"metadata": {"name": "p"}, "spec": {"containers": [{"resources": resources}]}})
    with pytest.raises(FieldError, match="is not a quantity") as raised:
        pod.requests(())
    assert len(str(raised.value)) < 200
    device = {"name": "gpu-0", "capacity": {"cores": {"value": long}}}
    (finding,) = load_objects([(b.resource_slice("n", [device]), "test")]).findings
    assert "is not a quantity" in finding.message and len(finding.message) < 200
