"""The msgspec reader of JSON dumps (automator/dra/read_json.py) against the general reader it stands in for.

Whatever file the msgspec reader accepts must give the same report, findings included, as the general
reader (reclaim/snapshot.py's documents + flatten); whatever it does not accept goes to the general reader.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from automator.dra.checks import check
from automator.dra.load import load_objects, read_objects
from automator.dra.model import Report
from automator.dra.read_json import read_json_objects
from automator.reclaim.snapshot import InputError, documents, flatten
from tests.automator.fixtures.dra import builders as b

Obj = dict[str, Any]


def cluster() -> list[Obj]:
    objects: list[Obj] = [
        b.node("n1", {"nvidia.com/gpu": "2"}),
        b.resource_slice("n1", [b.hami_device("n1", 0), b.hami_device("n1", 1, multiple=None)]),
        b.shared_claim("ml", "a-gpu", "n1", 0, "60", "40Gi", "a"),
        b.shared_claim("ml", "b-gpu", "n1", 0, "60", "50Gi", "b"),
        b.claim("ml", "gone", [b.result("n1", 1, None)], ["nobody"]),
        b.pod("ml", "a", "n1", {"gpu": "a-gpu"}),
        b.pod("ml", "b", "n1", {"gpu": "b-gpu"}),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ml"}, "data": {}},
    ]
    for obj in objects:  # what kubectl adds, which the msgspec reader never builds
        obj["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
        obj["metadata"]["labels"] = {"app": "x"}
    return objects


def general(path: Path) -> list[tuple[Any, str]]:
    return [pair for d, doc in enumerate(documents(path)) for pair in flatten(doc, f"{path} document {d}")]


def report(pairs: list[tuple[Any, str]]) -> Report:
    return check(load_objects(pairs))


def broken_claim(objects: list[Obj]) -> None:
    objects[2]["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"] = {"x": 1}


def odd_metadata(objects: list[Obj]) -> None:
    objects[3]["metadata"]["name"] = 7
    del objects[4]["metadata"]["namespace"]
    objects[5]["spec"] = ["not", "a", "map"]


def nested(objects: list[Obj]) -> None:
    inner = b.as_list(objects[5:])
    del objects[5:]
    objects.append(inner)


def no_metadata(objects: list[Obj]) -> None:
    objects[0]["metadata"] = None
    del objects[1]["metadata"]


@pytest.mark.parametrize("change", [lambda o: None, broken_claim, odd_metadata, nested, no_metadata])
def test_same_report_as_the_general_reader(tmp_path: Path, change: Callable[[list[Obj]], None]) -> None:
    objects = cluster()
    change(objects)
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(b.as_list(objects), indent=2))
    fast = read_json_objects(path)
    assert fast is not None
    slow = general(path)
    assert [where for _, where in fast] == [where for _, where in slow]
    assert report(fast) == report(slow)
    assert report(fast).findings  # the comparison is not between two empty reports


def test_a_single_object_and_an_empty_list(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps(cluster()[2]))
    assert report(read_objects(path)) == report(general(path))
    path.write_text(json.dumps({"kind": "List", "items": None}))
    assert read_objects(path) == general(path) == []


@pytest.mark.parametrize(
    "text",
    [
        '{"kind": "List", "items": [{"kind": "Node", "metadata": "n1"}]}',  # metadata not a map
        '{"kind": "List", "items": ["not an object"]}',
        '{"kind": "List", "items": {"a": 1}}',
        '{"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": NaN}}}',
        '{"kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": 1e400}}}',
        "kind: List\nitems: []\n",  # YAML
        '[{"kind": "Node"}]',
    ],
)
def test_other_shapes_go_to_the_general_reader(tmp_path: Path, text: str) -> None:
    path = tmp_path / "odd.json"
    path.write_text(text)
    assert read_json_objects(path) is None
    try:
        expected: Any = report(general(path))
    except InputError as exc:
        with pytest.raises(InputError) as got:
            read_objects(path)
        assert str(got.value) == str(exc)
    else:
        assert report(read_objects(path)) == expected


def test_objects_carry_only_what_the_loader_reads(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    objects = cluster()
    path.write_text(json.dumps(b.as_list(copy.deepcopy(objects))))
    fast = read_json_objects(path)
    assert fast is not None
    node = fast[0][0]
    assert set(node) == {"kind", "metadata", "spec", "status"}
    assert node["metadata"] == {"name": "n1", "namespace": None, "uid": None}
    assert node["status"] == objects[0]["status"]
