"""Issue 14: snapshot loading at fleet scale. JSON told by content, libyaml's loader for YAML, only the
fields the planner reads kept (managedFields dropped while parsing), errors naming the file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from automator.objects import files as snapshot
from automator.objects.files import InputError, documents, is_json
from automator.objects.keys import JsonObj
from automator.reclaim.model import PlannerConfig
from automator.reclaim.planner import plan
from automator.reclaim.snapshot import load_cluster, load_usage
from tests.automator import k8s

MANAGED = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _dump_like_kubectl(*objs: JsonObj) -> dict[str, Any]:
    items = []
    for obj in objs:
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["managedFields"] = MANAGED
        obj["metadata"].setdefault("annotations", {})[LAST_APPLIED] = json.dumps(obj)
        if obj["kind"] == "Pod" and isinstance(obj["spec"]["containers"], list):
            obj["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
            obj["spec"]["containers"][0].update(image="trainer:1", env=[{"name": "A", "value": "1"}])
            obj["status"]["containerStatuses"] = [{"name": "main", "ready": True}]
        items.append(obj)
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _objs() -> list[JsonObj]:
    return [
        k8s.reclaim_class(),
        k8s.node("n1", gpus=4),
        k8s.pod("v", gpus=4, node_name="n1"),
        k8s.preemptor("p"),
    ]


@pytest.mark.parametrize("name", ["cluster.txt", "cluster.yaml", "cluster"])
def test_json_is_told_by_content_not_by_file_name(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("\n  " + json.dumps(_dump_like_kubectl(*_objs())))
    assert is_json(path.read_bytes())
    state = load_cluster(path)
    assert len(state.pods) == 2 and len(state.nodes) == 1


def test_yaml_named_json_still_loads_as_yaml(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(yaml.safe_dump(_dump_like_kubectl(*_objs())))
    assert not is_json(path.read_bytes())
    assert len(load_cluster(path).pods) == 2


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_managed_fields_and_unread_fields_are_dropped(tmp_path: Path, fmt: str) -> None:
    dump = _dump_like_kubectl(*_objs())
    path = tmp_path / "c"
    path.write_text(json.dumps(dump) if fmt == "json" else yaml.safe_dump(dump))
    state = load_cluster(path)
    pod = next(p for p in state.pods if p.key.name == "v")
    assert pod.requests((k8s.GPU,)).gpus == 4
    assert pod.uid == "uid-ml-v" and pod.node_name == "n1"
    # Decisions are those of the full objects.
    usage = k8s.idle("v")
    assert plan(state, usage, PlannerConfig(), k8s.NOW) == plan(
        k8s.cluster(*_objs()), usage, PlannerConfig(), k8s.NOW
    )


def test_managed_fields_are_never_built_by_the_yaml_loader(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("metadata:\n  name: x\n  managedFields:\n  - !!python/object:os.system {}\n")
    # The unsafe tag sits under managedFields: dropped before construction, so no error either.
    (doc,) = documents(path)
    assert doc == {"metadata": {"name": "x"}}


def test_yaml_uses_libyaml_when_available() -> None:
    assert issubclass(snapshot._PruningLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def test_a_wrong_shape_is_named(tmp_path: Path) -> None:
    pod = k8s.pod("a", node_name="n1")
    pod["spec"]["containers"] = {"name": "main"}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(_dump_like_kubectl(k8s.node("n1"), pod)))
    with pytest.raises(InputError, match=r"Pod ml/a: spec.containers: expected a list, got dict"):
        load_cluster(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"kind": "List", "items": {"a": 1}}', r"c.json document 0: items: expected a list"),
        ("{not json: [", r"c.json: not valid YAML/JSON"),
        ("[1, 2]", r"c.json document 0 items|c.json document 0: expected a Kubernetes object, got list"),
    ],
)
def test_errors_name_the_file_and_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_cluster(path)


def test_a_bad_field_in_a_json_dump_names_the_object_and_field(tmp_path: Path) -> None:
    node = k8s.node("n1")
    node["status"]["allocatable"]["cpu"] = "lots"
    path = tmp_path / "c"
    path.write_text(json.dumps(_dump_like_kubectl(node)))
    with pytest.raises(InputError, match=r"Node n1: status.allocatable.cpu: 'lots' is not a quantity"):
        load_cluster(path)


def test_usage_file_may_be_json(tmp_path: Path) -> None:
    path = tmp_path / "usage"
    path.write_text(json.dumps({"pods": [{"namespace": "ml", "name": "v", "gpu_activity": 0.01}]}))
    assert [str(k) for k in load_usage(path)] == ["ml/v"]
