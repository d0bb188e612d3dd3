"""The automator's NetworkPolicy admits each client on the ports it uses, in every overlay: Prometheus on the
port the ServiceMonitor scrapes, KEDA's operator on the metrics-api, gRPC and TLS ports that are served, and
each served port is in the Service. An overlay changes a client's namespace with one patch."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_manifests import DEPLOY, render

OVERLAYS = ["", "overlays/enforce", "overlays/keda-grpc", "overlays/keda-tls", "overlays/no-operator"]


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def _container_ports(objects: list[dict[str, Any]]) -> dict[str, int]:
    deployment = _one(objects, "Deployment", "gpu-steward-automator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def _admitted(policy: dict[str, Any], namespace: str, pod_labels: dict[str, str]) -> set[str]:
    """The named ports a pod with these labels in this namespace may reach (NetworkPolicy semantics)."""
    ports: set[str] = set()
    for rule in policy["spec"].get("ingress", []):
        for peer in rule.get("from", []):
            ns = peer.get("namespaceSelector", {}).get("matchLabels", {})
            pods = peer.get("podSelector", {}).get("matchLabels", {})
            if "namespaceSelector" not in peer:
                ns = {"kubernetes.io/metadata.name": policy["metadata"]["namespace"]}
            if ns.items() <= {"kubernetes.io/metadata.name": namespace}.items() and (
                pods.items() <= pod_labels.items()
            ):
                ports |= {str(p["port"]) for p in rule.get("ports", [])}
    return ports


PROMETHEUS = ("monitoring", {"app.kubernetes.io/name": "prometheus", "prometheus": "k8s"})
KEDA = ("keda", {"app.kubernetes.io/name": "keda-operator", "app": "keda-operator"})


@pytest.mark.parametrize("path", OVERLAYS)
def test_each_client_reaches_the_ports_it_uses_and_no_other(path: str) -> None:
    objects = render(path)
    policy = _one(objects, "NetworkPolicy", "gpu-steward-automator")
    # The probe port is the kubelet's alone: not on the Service; NetworkPolicy always admits the node.
    served = {name: port for name, port in _container_ports(objects).items() if name != "probe"}
    service = _one(objects, "Service", "gpu-steward-automator")
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(served)
    keda_ports = {"http"} | ({"grpc", "keda-tls"} & set(served))
    assert _admitted(policy, *KEDA) == keda_ports
    assert _admitted(policy, *PROMETHEUS) == {"http"}
    for monitor in [o for o in objects if o["kind"] == "ServiceMonitor"]:
        if monitor["metadata"]["name"] == "gpu-steward-automator":
            assert {e["port"] for e in monitor["spec"]["endpoints"]} <= _admitted(policy, *PROMETHEUS)
    # Anyone else: nothing (another tenant's pod, or a pod in KEDA's namespace that is not the operator).
    assert _admitted(policy, "team-a", {"app.kubernetes.io/name": "prometheus"}) == set()
    assert _admitted(policy, "keda", {"app.kubernetes.io/name": "keda-admission-webhooks"}) == set()


def test_tls_overlay_serves_tls_from_a_secret() -> None:
    objects = render("overlays/keda-tls")
    deployment = _one(objects, "Deployment", "gpu-steward-automator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPU_STEWARD_KEDA_TLS_PORT"] == str(_container_ports(objects)["keda-tls"])
    mount = container["volumeMounts"][0]["mountPath"]
    assert env["GPU_STEWARD_KEDA_TLS_CERT_FILE"].startswith(mount + "/")
    assert env["GPU_STEWARD_KEDA_TLS_KEY_FILE"].startswith(mount + "/")


def test_an_overlay_changes_the_namespaces_with_one_patch(tmp_path: Path) -> None:
    # The example of docs/install.md ("Network"), on top of both KEDA components.
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    docs = (Path(__file__).resolve().parents[2] / "docs" / "install.md").read_text()
    patch = docs.split("<!-- network-patch -->\n```yaml\n", 1)[1].split("```", 1)[0]
    doc = yaml.safe_load(patch)
    for component in ("stack", "keda-grpc", "keda-tls"):
        doc.setdefault("components", []).append(os.path.relpath(DEPLOY / "components" / component, overlay))
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    objects = render(str(overlay))
    policy = _one(objects, "NetworkPolicy", "gpu-steward-automator")
    assert _admitted(policy, "prometheus", PROMETHEUS[1]) == {"http"}
    assert _admitted(policy, "autoscaling", KEDA[1]) == {"http", "grpc", "keda-tls"}
    assert _admitted(policy, *PROMETHEUS) == _admitted(policy, *KEDA) == set()
