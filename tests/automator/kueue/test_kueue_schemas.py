"""The Kueue objects the tests and docs/kueue.md's example feed the automator are what Kueue's own CRDs
accept (v1beta2 and v1beta1, strictly), so the records read real shapes."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.automator import k8s
from tests.deploy.test_crds import SCHEMAS, _crds

CRDS = functools.cache(_crds)  # parsed once: the Workload CRD is 1.4 MB

pytestmark = pytest.mark.skipif(not SCHEMAS.is_dir(), reason=f"upstream CRDs not found at {SCHEMAS}")
EXAMPLE = Path(__file__).parents[1] / "fixtures" / "kueue_example" / "cluster.yaml"


def _objects() -> list[dict[str, Any]]:
    built: list[dict[str, Any]] = []
    for api in ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"):
        built += [
            k8s.kueue_workload("wait", priority=200, api=api, requests={"nvidia.com/gpu": "8"}),
            k8s.kueue_workload("held", admitted_in="cq", job_uid="j", api=api, annotations={"a": "b"}),
            k8s.cluster_queue("cq", cohort="research", reclaim="Any", api=api),
            k8s.local_queue("q", "cq", api=api),
        ]
    example = yaml.safe_load(EXAMPLE.read_text())["items"]
    return built + [o for o in example if str(o["apiVersion"]).startswith("kueue.x-k8s.io/")]


@pytest.mark.parametrize(
    "obj", _objects(), ids=lambda o: f"{o['apiVersion']} {o['kind']} {o['metadata']['name']}"
)
def test_kueue_objects_validate_against_kueues_crds(obj: dict[str, Any]) -> None:
    schema = CRDS()[(obj["apiVersion"], obj["kind"])]
    jsonschema.validate(obj, schema)


def test_the_check_can_fail() -> None:
    bad = k8s.kueue_workload("w")
    bad["spec"]["queueNmae"] = "typo"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, CRDS()[(bad["apiVersion"], "Workload")])
