"""Snapshot adapter: List / multi-document YAML / JSON input, and usage files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from automator.objects.files import InputError
from automator.objects.keys import ObjectKey
from automator.reclaim.model import PodUsage
from automator.reclaim.snapshot import load_cluster, load_usage
from tests.automator import k8s

FIXTURES = Path(__file__).parents[1] / "fixtures" / "docs_example"


def test_fixture_list_is_split_by_kind() -> None:
    state = load_cluster(FIXTURES / "cluster.yaml")
    assert [n.name for n in state.nodes] == ["gpu-a", "gpu-b"]
    assert len(state.pods) == 7 and len(state.priority_classes) == 3 and len(state.pdbs) == 1


def test_multi_document_yaml_nested_lists_and_other_kinds(tmp_path: Path) -> None:
    docs = [
        k8s.node("n1"),
        None,
        {
            "apiVersion": "v1",
            "kind": "PodList",
            "items": [k8s.pod("a", node_name="n1"), k8s.pod("b", node_name="n1")],
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}},
    ]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    state = load_cluster(path)
    assert [p.key for p in state.pods] == [ObjectKey("ml", "a"), ObjectKey("ml", "b")]
    assert len(state.nodes) == 1 and state.priority_classes == [] and state.pdbs == []


def test_json_list(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [k8s.node("n1")]}))
    assert len(load_cluster(path).nodes) == 1


def test_duplicate_and_nameless_objects_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump_all([k8s.pod("a"), k8s.pod("a")]))
    with pytest.raises(InputError, match="Pod ml/a: listed twice"):
        load_cluster(path)
    path.write_text(yaml.safe_dump({"kind": "Node", "metadata": {}}))
    with pytest.raises(InputError, match=r"metadata\.name: missing"):
        load_cluster(path)


def test_gpu_quantities_checked_for_configured_resources_only(tmp_path: Path) -> None:
    pod = k8s.pod("a", node_name="n1")
    pod["spec"]["containers"][0]["resources"]["limits"] = {"example.com/gpu": "1.5"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(pod))
    assert len(load_cluster(path).pods) == 1  # not a GPU resource here: left alone
    with pytest.raises(InputError, match=r"limits\.example\.com/gpu: '1\.5' is not a whole number"):
        load_cluster(path, ("example.com/gpu",))


def test_usage_defaults_and_nulls(tmp_path: Path) -> None:
    path = tmp_path / "u.yaml"
    path.write_text(
        "pods:\n"
        "- {namespace: ml, name: a, gpu_activity: 0.5}\n"
        "- {namespace: ml, name: b, gpu_activity: null, coverage: 0.5, cpu_cores: 2}\n"
    )
    assert load_usage(path) == {
        ObjectKey("ml", "a"): PodUsage(0.5, 1.0, None),
        ObjectKey("ml", "b"): PodUsage(None, 0.5, 2.0),
    }


def test_usage_duplicate_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "u.yaml"
    path.write_text("pods:\n- {namespace: ml, name: a}\n- {namespace: ml, name: a}\n")
    with pytest.raises(InputError, match=r"Pod ml/a .*listed twice"):
        load_usage(path)


@pytest.mark.parametrize(
    "selector",
    [
        {"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]},
        # An earlier requirement that fails on empty labels must not hide a later bad operator.
        {"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "app", "operator": "Bogus"}]},
        {
            "matchExpressions": [
                {"key": "app", "operator": "In", "values": ["x"]},
                {"key": "app", "operator": "Bogus"},
            ]
        },
    ],
)
def test_pdb_unknown_selector_operator_is_an_error(tmp_path: Path, selector: dict[str, object]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(k8s.pdb("guard", selector, 1)))
    with pytest.raises(InputError, match=r"PodDisruptionBudget ml/guard: spec\.selector\.matchExpressions"):
        load_cluster(path)
