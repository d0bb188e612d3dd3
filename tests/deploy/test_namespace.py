"""The namespace is a parameter: the stack rendered by an overlay that sets `namespace:` and lists
deploy/transformers/namespace (docs/install.md, "Another namespace") names that namespace everywhere it names
its own, and nowhere else. Every reference is found by walking every string of every object (and the YAML and
JSON documents inside ConfigMaps): a string that names `gpu-steward` as a namespace in the default render must
name the overlay's namespace in its render; the ones that do not change are the project's name (object names,
labels, dashboard tags, URLs and paths)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_crds import SCHEMAS, _check, _crds
from tests.deploy.test_manifests import DEPLOY, _validate, render
from tests.deploy.test_scope import CLUSTER_SCOPED

DEFAULT = "gpu-steward"
NAMESPACES = ["gpu-ops", "team-gpu-system"]
# Every component: with the Prometheus Operator, and without it (no-operator, with a placement).
SETS = {
    "operator": ["stack", "enforce", "keda-grpc", "keda-tls", "keda-mtls", "keda-token"],
    "no-operator": ["stack", "no-operator", "placement-hami"],
}
# `gpu-steward` as a word of its own (not part of gpu-steward-automator, gpu-steward.io, /gpu-steward/).
WORD = re.compile(r"(?<![\w./-])gpu-steward(?![\w/-]|\.io)")


def overlay(tmp_path: Path, components: list[str], namespace: str | None) -> list[dict[str, Any]]:
    """Render the overlay docs/install.md describes, with these components."""
    root = tmp_path / f"overlay-{namespace}-{'-'.join(components)}"
    root.mkdir()
    doc: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "components": [os.path.relpath(DEPLOY / "components" / c, root) for c in components],
        "transformers": [os.path.relpath(DEPLOY / "transformers" / "namespace", root)],
    }
    if namespace:
        doc["namespace"] = namespace
    (root / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return render(str(root))


def _embedded(text: str) -> Any:
    """A ConfigMap value that is a YAML or JSON document, parsed; else None."""
    try:
        parsed = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return None
    return parsed if isinstance(parsed, (dict, list)) else None


def leaves(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, (*path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from leaves(value, (*path, str(i)))
    elif isinstance(node, str):
        inner = _embedded(node) if path[:1] == ("data",) else None
        if inner is not None:
            yield from leaves(inner, path)
        else:
            yield path, node


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def _project_name(path: tuple[str, ...]) -> bool:
    """Where `gpu-steward` is the project's name, not its namespace."""
    return (
        path[-2:] == ("metadata", "name")
        or path[-1] in ("app.kubernetes.io/part-of", "app.kubernetes.io/name")
        or "tags" in path  # dashboard tags and links
        or path[-1] in ("runbook_url", "summary", "description")
    )


@pytest.mark.parametrize("components", list(SETS.values()), ids=list(SETS))
def test_every_reference_to_the_namespace_follows_the_overlay(tmp_path: Path, components: list[str]) -> None:
    default = {_key(o): o for o in overlay(tmp_path, components, None)}
    # The default namespace's references, each a (object, path) whose string names it.
    references = {
        (key, path)
        for key, obj in default.items()
        for path, text in leaves(obj)
        if WORD.search(text) and not _project_name(path)
    }
    assert len(references) >= 5, references  # objects' namespaces, subjects, the policy's account, ...
    crds = _crds() if SCHEMAS.is_dir() else None  # upstream's CRDs, where ../shared has them
    for namespace in NAMESPACES:
        objects = overlay(tmp_path, components, namespace)
        assert {_key(o) for o in objects} == (set(default) - {("Namespace", DEFAULT)}) | {
            ("Namespace", namespace)
        }
        for obj in objects:
            _validate(obj)
            if crds is not None:
                _check(f"namespace {namespace}", obj, crds)
            assert ("namespace" in obj["metadata"]) != (obj["kind"] in CLUSTER_SCOPED), _key(obj)
            if "namespace" in obj["metadata"]:
                assert obj["metadata"]["namespace"] == namespace, _key(obj)
            got = dict(leaves(obj))
            for path, text in got.items():
                assert not (WORD.search(text) and not _project_name(path)), (_key(obj), path, text)
            if obj["kind"] == "Namespace":
                continue
            for ref_key, path in references:
                if ref_key == _key(obj):
                    before = dict(leaves(default[ref_key]))[path]
                    assert got[path] == WORD.sub(namespace, before), (ref_key, path)


def test_the_references_read_where_their_readers_look(tmp_path: Path) -> None:
    # The places a reader of each object reads the namespace from, checked by name.
    namespace = NAMESPACES[0]
    objects = [o for components in SETS.values() for o in overlay(tmp_path, components, namespace)]
    (policy,) = {json.dumps(o) for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    (condition,) = json.loads(policy)["spec"]["matchConditions"]
    assert condition["expression"] == (
        f'request.userInfo.username == "system:serviceaccount:{namespace}:gpu-steward-automator"'
    )
    for obj in objects:
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == namespace, _key(obj)
        if obj["kind"] == "ServiceMonitor":
            # No selector: the operator reads the ServiceMonitor's own namespace.
            assert "namespaceSelector" not in obj["spec"], _key(obj)
    (config,) = [o for o in objects if _key(o) == ("ConfigMap", "gpu-steward-prometheus")]
    jobs = yaml.safe_load(config["data"]["gpu-steward-scrape.yaml"])["scrape_configs"]
    assert [sd["namespaces"]["names"] for job in jobs for sd in job["kubernetes_sd_configs"]] == [
        [namespace],
        [namespace],
    ]


def test_without_the_transformers_the_references_stay_behind(tmp_path: Path) -> None:
    # Why the overlay lists them: kustomize's `namespace:` alone leaves the policy's account behind and gives
    # the cluster-scoped policy a namespace (the test above can fail).
    root = tmp_path / "plain"
    root.mkdir()
    doc = {"namespace": "gpu-ops", "components": [os.path.relpath(DEPLOY / "components" / "stack", root)]}
    (root / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    (policy,) = [o for o in render(str(root)) if o["kind"] == "ValidatingAdmissionPolicy"]
    assert policy["metadata"].get("namespace") == "gpu-ops"
    assert ":gpu-steward:" in policy["spec"]["matchConditions"][0]["expression"]


def test_the_documented_overlay_installs_into_its_namespace(tmp_path: Path) -> None:
    docs = (DEPLOY.parent / "docs" / "install.md").read_text()
    doc = yaml.safe_load(docs.split("<!-- namespace-overlay -->\n```yaml\n", 1)[1].split("```", 1)[0])
    root = tmp_path / "documented"
    root.mkdir()
    for field in ("components", "transformers"):
        doc[field] = [os.path.relpath(DEPLOY / p.split("/deploy/", 1)[1], root) for p in doc[field]]
    (root / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    objects = render(str(root))
    assert {o["metadata"].get("namespace") for o in objects} == {doc["namespace"], None}
    assert not [p for o in objects for p, text in leaves(o) if WORD.search(text) and not _project_name(p)]
