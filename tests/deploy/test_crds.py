"""Every custom resource the project ships (deploy/) or generates (`gpu-automator keda scaledobject`, the
PrometheusRule generator) against upstream's own CRDs in ../shared/reference/schemas/, strictly: an object
schema without `x-kubernetes-preserve-unknown-fields` accepts no field it does not list, as the API server
prunes or (kubectl --validate=strict) rejects them. KEDA's admission rules that no schema shows are replayed
from the notes in that folder's README."""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from automator import cli
from tests.deploy.test_manifests import DEPLOY, KUSTOMIZATIONS, render

SCHEMAS = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "schemas"
pytestmark = pytest.mark.skipif(not SCHEMAS.is_dir(), reason=f"upstream CRDs not found at {SCHEMAS}")
CUSTOM_GROUPS = ("monitoring.coreos.com", "keda.sh")
KEDA_MAX_NAME = 54  # KEDA 2.20+: the HPA is keda-hpa-<name>
KEDA_VALUE_WITH_FALLBACK = (2, 18)  # earlier webhooks reject fallback with metricType Value


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected wherever the CRD does not preserve them."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items() if k not in ("properties", "additionalProperties")}
    if "properties" in schema:
        out["properties"] = {k: _strict(v) for k, v in schema["properties"].items()}
    if "additionalProperties" in schema:
        out["additionalProperties"] = _strict(schema["additionalProperties"])
    elif "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    return out


def _crds() -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for path in sorted(SCHEMAS.glob("*/*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = _strict(version["schema"]["openAPIV3Schema"])
                # metadata is the API server's ObjectMeta; the CRD only says "object".
                schema.setdefault("properties", {})["metadata"] = {"type": "object"}
                found[(f"{group}/{version['name']}", kind)] = schema
    return found


def shipped() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in KUSTOMIZATIONS:
        for obj in render(path):
            yield f"kustomize {path or '.'}", obj
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or "demo" in path.parts:
            continue
        for obj in yaml.safe_load_all(path.read_text()):
            if obj and "apiVersion" in obj:
                yield str(path.relative_to(DEPLOY)), obj


def generated(capsys: pytest.CaptureFixture[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """`gpu-automator keda scaledobject` for every profile, trigger, auth mode and workload kind."""
    profiles = ["vllm-inference", "triton-inference", "training", "batch"]
    workloads = [
        ["--deployment", "api"],
        ["--statefulset", "db"],
        ["--selector", "app=x", "--scale-target", "Deployment/x"],
    ]
    triggers = [
        *itertools.product(["metrics-api"], ["none", "bearer", "apiKey", "basic", "tls"]),
        *itertools.product(["external"], ["none", "tls"]),  # KEDA sends external scalers no token
    ]
    for profile, (trigger, auth), workload in itertools.product(profiles, triggers, workloads):
        argv = ["keda", "scaledobject", "--namespace", "ml", *workload, "--profile", profile]
        argv += ["--trigger", trigger, "--auth", auth]
        assert cli.main(argv) == 0, capsys.readouterr().err
        for obj in yaml.safe_load_all(capsys.readouterr().out):
            yield " ".join(argv), obj


def _check(where: str, obj: dict[str, Any], crds: dict[tuple[str, str], dict[str, Any]]) -> bool:
    key = (obj["apiVersion"], obj["kind"])
    if not obj["apiVersion"].startswith(CUSTOM_GROUPS):
        return False
    assert key in crds, f"{where}: no upstream CRD for {key}"
    errors = sorted(jsonschema.Draft7Validator(crds[key]).iter_errors(obj), key=str)
    assert not errors, f"{where}: {obj['kind']} {obj['metadata']['name']}: " + "; ".join(
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5]
    )
    if obj["kind"] == "ScaledObject":
        _keda_admission(where, obj)
    return True


def minimum_keda(obj: dict[str, Any]) -> tuple[int, int]:
    """The oldest KEDA whose admission webhook accepts this ScaledObject."""
    spec = obj["spec"]
    if "fallback" in spec and any(t.get("metricType") == "Value" for t in spec["triggers"]):
        return KEDA_VALUE_WITH_FALLBACK
    return (2, 0)


def _keda_admission(where: str, obj: dict[str, Any]) -> None:
    name, spec = obj["metadata"]["name"], obj["spec"]
    assert len(name) <= KEDA_MAX_NAME, f"{where}: {name} is longer than KEDA's {KEDA_MAX_NAME} characters"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
    assert spec.get("minReplicaCount", 0) <= spec.get("maxReplicaCount", 100), where
    if "fallback" in spec:
        # KEDA: fallback needs a trigger that is not cpu/memory, and is refused with metricType Value
        # before 2.18; docs/keda.md states the minimum KEDA for what the command generates.
        assert all(t["type"] not in ("cpu", "memory") for t in spec["triggers"]), where
        assert spec["fallback"]["failureThreshold"] >= 0 and spec["fallback"]["replicas"] >= 0, where


def test_every_shipped_custom_resource_validates_against_its_upstream_crd() -> None:
    crds = _crds()
    checked = {(o["kind"], w.split(" ")[0]) for w, o in shipped() if _check(w, o, crds)}
    kinds = {k for k, _ in checked}
    assert {"ServiceMonitor", "PrometheusRule", "ScaledObject", "TriggerAuthentication"} <= kinds


def test_every_generated_keda_object_validates_against_keda_crds(capsys: pytest.CaptureFixture[str]) -> None:
    crds = _crds()
    kinds = [o["kind"] for w, o in generated(capsys) if _check(w, o, crds)]
    assert {"ScaledObject", "TriggerAuthentication"} <= set(kinds)
    assert kinds.count("ScaledObject") == 4 * (5 + 2) * 3  # profiles x (trigger, auth) x workloads


def test_strict_validation_rejects_an_unknown_field() -> None:
    # The check can fail: a field the CRD does not list, deep inside a ServiceMonitor endpoint.
    crds = _crds()
    (monitor,) = [o for o in render("exporter") if o["kind"] == "ServiceMonitor"]
    broken = copy.deepcopy(monitor)
    broken["spec"]["endpoints"][0]["honourLabels"] = True
    with pytest.raises(AssertionError, match="honourLabels"):
        _check("test", broken, crds)
    long = copy.deepcopy(monitor) | {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject"}
    with pytest.raises(AssertionError):
        _check("test", long, crds)


@pytest.mark.parametrize("version", ["2.17", "2.18", "2.20"])
def test_generated_scaled_objects_are_accepted_by_the_keda_they_name(
    capsys: pytest.CaptureFixture[str], version: str
) -> None:
    crds = _crds()
    wanted = tuple(int(p) for p in version.split("."))
    for profile, trigger in itertools.product(["vllm-inference", "training"], ["metrics-api", "external"]):
        argv = ["keda", "scaledobject", "--namespace", "ml", "--deployment", "api", "--profile", profile]
        assert cli.main([*argv, "--trigger", trigger, "--keda-version", version]) == 0
        for obj in yaml.safe_load_all(capsys.readouterr().out):
            if _check(version, obj, crds) and obj["kind"] == "ScaledObject":
                assert minimum_keda(obj) <= wanted, (version, profile, trigger)
