"""Scope and privileges of the shipped objects: cluster-scoped objects carry no namespace, the admission
policy holds every metadata field of a pod but the automator's own annotations (whose values it checks),
the exporter's ClusterRole grants the one verb it calls, and the no-operator jobs discover EndpointSlices."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from steward_common import conventions
from tests.deploy.test_manifests import DEPLOY, KUBERNETES_VERSION, KUSTOMIZATIONS, _generator, render

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_cluster_scoped_objects_have_no_namespace_and_the_others_have_one(path: str) -> None:
    for obj in render(path):
        namespaced = "namespace" in obj["metadata"]
        assert namespaced != (obj["kind"] in CLUSTER_SCOPED), (obj["kind"], obj["metadata"])


def _policy() -> dict[str, Any]:
    (policy,) = [o for o in render("automator") if o["kind"] == "ValidatingAdmissionPolicy"]
    return policy


def _object_meta_fields() -> set[str]:
    schemas = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    schema = json.loads((schemas / f"v{KUBERNETES_VERSION}-local" / "objectmeta-meta-v1.json").read_text())
    return set(schema["properties"])


def test_admission_policy_holds_all_of_metadata_but_what_the_api_server_writes() -> None:
    expressions = [v["expression"] for v in _policy()["spec"]["validations"]]
    held = set()
    for field in _object_meta_fields():
        same = f"object.metadata.{field} == oldObject.metadata.{field}"
        presence = f"has(object.metadata.{field}) == has(oldObject.metadata.{field})"
        if any(same in e and presence in e for e in expressions):
            held.add(field)
    # annotations: compared key by key (the written ones aside); managedFields and resourceVersion change on
    # every write, by the API server itself.
    assert _object_meta_fields() - held == {"annotations", "managedFields", "resourceVersion"}
    assert {"ownerReferences", "finalizers", "labels"} <= held


def test_admission_policy_checks_each_written_annotation_value() -> None:
    checks = {}
    for validation in _policy()["spec"]["validations"]:
        for key in conventions.WRITTEN_ANNOTATIONS:
            if f'variables.newAnnotations["{key}"].matches(' in validation["expression"]:
                pattern = re.search(r"matches\('([^']+)'\)", validation["expression"])
                assert pattern
                checks[key] = re.compile(pattern.group(1))
    assert set(checks) == set(conventions.WRITTEN_ANNOTATIONS)
    # What the automator writes passes; other text does not.
    from datetime import UTC, datetime

    from automator.objects.resources import rfc3339

    good: dict[str, str | None] = {
        conventions.LAST_RECLAIM_ANNOTATION: rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        conventions.RECLAIM_NODE_ANNOTATION: "gpu-node-1.example",
        conventions.RECLAIM_VICTIMS_ANNOTATION: "team-a/train-0,team-b/batch-7",
        conventions.RECLAIM_COUNT_ANNOTATION: "12",
    }
    from automator.reclaim.annotations import NOTICE_FOR, notice_annotations

    good |= notice_annotations(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "team-a/train-1")
    for key, value in good.items():
        assert value is not None and checks[key].search(value), key
        assert not checks[key].search(value + "\n$(rm -rf)"), key
    # A gang's name (a Workload's pod group and replica key) passes too; the planner reads the same form.
    key = conventions.RECLAIM_NOTICE_FOR_ANNOTATION
    assert checks[key].search("team-a/train/workers/r-0") and NOTICE_FOR.fullmatch("team-a/train/workers/r-0")
    for bad in ("Team/x", "team-a/", "/x", "team-a/x y", "team-a/x,team-b/y"):
        assert not checks[key].search(bad) and not NOTICE_FOR.fullmatch(bad), bad
    assert checks[key].pattern == f"^{NOTICE_FOR.pattern}$"
    # The owner's objection is not the automator's to write.
    assert conventions.DEFER_UNTIL_ANNOTATION not in conventions.WRITTEN_ANNOTATIONS


def test_exporter_role_grants_only_the_verbs_its_code_calls() -> None:
    (role,) = [o for o in render("exporter") if o["kind"] == "ClusterRole"]
    (rule,) = role["rules"]
    assert rule["resources"] == ["pods"]
    source = (REPO / "exporter" / "attribution" / "kubeapi.py").read_text()
    calls = set(re.findall(r"self\._api\.(\w+)\(", source))
    assert calls == {"list_pod_for_all_namespaces"}
    assert rule["verbs"] == ["list"]


def test_no_operator_jobs_discover_endpointslices() -> None:
    generator = _generator(DEPLOY / "components" / "no-operator" / "generate.py")
    for job in generator.scrape_configs():
        assert [sd["role"] for sd in job["kubernetes_sd_configs"]] == ["endpointslice"]
        labels = {label for r in job["relabel_configs"] for label in r.get("source_labels", [])}
        assert not any(label.startswith("__meta_kubernetes_endpoint_") for label in labels)
        assert "__meta_kubernetes_endpointslice_port_name" in labels
