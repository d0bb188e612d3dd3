"""`dra-check`'s typed reader (automator/dra/read_typed.py) against the general reader it stands in for.

Whatever JSON List the typed reader accepts must load into the records (findings included) the general
reader (reclaim/snapshot.py's documents + flatten, then load_objects) gives; whatever it does not accept
goes to the general reader. Realistic objects must take it (else it is dead code); every realistic claim
and pod with one field deleted or replaced by a value of another type either takes it with the same
records, or is left to the general reader."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from automator.dra.load import load_cluster_file, load_objects
from automator.dra.model import UNPARSABLE, Records
from automator.dra.read_typed import read_typed
from automator.reclaim.snapshot import documents, flatten
from tests.automator.fixtures.dra import builders as b
from tests.automator.test_dra_fast_path import realistic_claims, realistic_pods, variants

Obj = dict[str, Any]
FIXTURES = Path(__file__).parent / "fixtures" / "dra"


def general(path: Path) -> Records:
    pairs = [pair for d, doc in enumerate(documents(path)) for pair in flatten(doc, f"{path} document {d}")]
    return load_objects(pairs)


def write(tmp_path: Path, objects: list[Obj], name: str = "cluster.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(b.as_list(objects), indent=2))
    return path


def base() -> list[Obj]:
    device_class = {
        "kind": "DeviceClass",
        "metadata": {"name": "hami-gpu"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]},
    }
    return [
        b.node("n1", {"nvidia.com/gpu": "2"}),
        b.resource_slice("n1", [b.hami_device("n1", 0), b.hami_device("n1", 1, multiple=None)]),
        device_class,
    ]


def realistic() -> list[Obj]:
    hami = yaml.safe_load((FIXTURES / "hami-cluster.yaml").read_text())["items"]
    return [*base(), *realistic_claims(), *realistic_pods(), *hami]


def test_realistic_objects_take_the_typed_reader_and_load_the_same(tmp_path: Path) -> None:
    path = write(tmp_path, realistic())
    assert read_typed(path) is not None
    typed = load_cluster_file(path)
    assert typed == general(path)
    assert typed.claims and typed.pods and typed.devices and typed.nodes


def test_what_the_records_need_more_of_goes_to_the_general_reader_object_by_object(tmp_path: Path) -> None:
    objects = realistic()
    claim, pod = copy.deepcopy(objects[3]), copy.deepcopy(objects[-1])
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"memory": "lots"}
    del pod["metadata"]["namespace"]
    nameless = b.node("x")
    nameless["metadata"] = {}
    path = write(tmp_path, [*objects, claim, pod, nameless, {"kind": "Node", "metadata": None}])
    assert read_typed(path) is not None
    typed = load_cluster_file(path)
    assert typed == general(path)
    messages = [f.message for f in typed.findings if f.kind == UNPARSABLE]
    assert any("consumedCapacity.memory" in m for m in messages)
    where = f"{path} document 0 items[{len(objects) + 1}]"
    assert f"Pod at {where}: metadata.namespace: missing" in messages


def test_every_one_field_variant_loads_as_the_general_reader_does(tmp_path: Path) -> None:
    taken = left = 0
    for obj in [*realistic_claims(), *realistic_pods()]:
        for what, variant in variants(obj):
            path = write(tmp_path, [*base(), variant])
            if read_typed(path) is None:
                left += 1
            else:
                taken += 1
            assert load_cluster_file(path) == general(path), what
    assert taken and left  # both sides exercised


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(b.as_list([*base(), {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}])),
        json.dumps(b.as_list([*base(), b.as_list([b.node("n2")])])),  # a nested List
        json.dumps(b.node("n1")),  # one object
        json.dumps({"kind": "List"}),  # a List without items: an object of kind List
        json.dumps({"kind": "List", "items": [None]}),
        json.dumps({"kind": "NodeList", "items": None}),
        yaml.safe_dump(b.as_list(base())),
        json.dumps(b.as_list(base())) + "\n---\n",
    ],
)
def test_other_files_go_to_the_general_reader(tmp_path: Path, text: str) -> None:
    path = tmp_path / "odd.json"
    path.write_text(text)
    if text.startswith('{"kind": "NodeList"'):
        assert read_typed(path) is not None
    else:
        assert read_typed(path) is None
    assert load_cluster_file(path) == general(path)
