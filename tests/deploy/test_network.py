"""The NetworkPolicies admit each client on the ports it uses, in every overlay: on the automator, Prometheus
on the port the ServiceMonitor scrapes, KEDA's operator on the metrics-api, gRPC and TLS ports that are
served, and each served port is in the Service; on the exporter, Prometheus alone on `metrics`. An overlay
changes a client's namespace with one patch."""

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
# KEDA's operator pod as each way of installing KEDA labels it (the pod template's labels, not the
# Deployment's): its Helm chart (kedacore/charts keda/templates/manager/deployment.yaml) and its release
# manifests (config/manager/manager.yaml, also what the OLM operator installs), and the other pods of KEDA's
# namespace, which must stay out.
KEDA_OPERATOR_PODS = {
    "helm": {
        "app": "keda-operator",
        "name": "keda-operator",
        "app.kubernetes.io/name": "keda-operator",
        "app.kubernetes.io/component": "operator",
        "app.kubernetes.io/instance": "keda",
        "app.kubernetes.io/part-of": "keda-operator",
        "app.kubernetes.io/managed-by": "Helm",
    },
    "release-manifests": {"app": "keda-operator", "name": "keda-operator"},
}
KEDA_OTHER_PODS = {
    "helm-webhooks": {
        "app": "keda-admission-webhooks",
        "name": "keda-admission-webhooks",
        "app.kubernetes.io/name": "keda-admission-webhooks",
        "app.kubernetes.io/part-of": "keda-operator",
    },
    "helm-metrics-server": {
        "app": "keda-operator-metrics-apiserver",
        "app.kubernetes.io/name": "keda-operator-metrics-apiserver",
        "app.kubernetes.io/part-of": "keda-operator",
    },
    "release-webhooks": {"app": "keda-admission-webhooks", "name": "keda-admission-webhooks"},
    "release-metrics-server": {
        "app": "keda-operator-metrics-apiserver",
        "name": "keda-operator-metrics-apiserver",
    },
}
KEDA = ("keda", KEDA_OPERATOR_PODS["release-manifests"])


@pytest.mark.parametrize("path", OVERLAYS)
def test_each_client_reaches_the_ports_it_uses_and_no_other(path: str) -> None:
    objects = render(path)
    policy = _one(objects, "NetworkPolicy", "gpu-steward-automator")
    # The probe port is the kubelet's alone: not on the Service; NetworkPolicy always admits the node.
    served = {name: port for name, port in _container_ports(objects).items() if name != "probe"}
    service = _one(objects, "Service", "gpu-steward-automator")
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(served)
    keda_ports = {"http"} | ({"grpc", "keda-tls"} & set(served))
    for install, labels in KEDA_OPERATOR_PODS.items():
        assert _admitted(policy, "keda", labels) == keda_ports, install
    for pod, labels in KEDA_OTHER_PODS.items():
        assert _admitted(policy, "keda", labels) == set(), pod
    assert _admitted(policy, *PROMETHEUS) == {"http"}
    for monitor in [o for o in objects if o["kind"] == "ServiceMonitor"]:
        if monitor["metadata"]["name"] == "gpu-steward-automator":
            assert {e["port"] for e in monitor["spec"]["endpoints"]} <= _admitted(policy, *PROMETHEUS)
    # The exporter: Prometheus on the port its scrape jobs name, KEDA and everyone else nothing.
    exporter = _one(objects, "NetworkPolicy", "gpu-steward-exporter")
    (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
    assert exporter["spec"]["podSelector"]["matchLabels"].items() <= (
        daemonset["spec"]["template"]["metadata"]["labels"].items()
    )
    assert _admitted(exporter, *PROMETHEUS) == {"metrics"}
    for labels in KEDA_OPERATOR_PODS.values():
        assert _admitted(exporter, "keda", labels) == set()
    assert _admitted(exporter, "team-a", PROMETHEUS[1]) == set()
    for monitor in [o for o in objects if o["kind"] == "ServiceMonitor"]:
        if monitor["metadata"]["name"] == "gpu-steward-exporter":
            assert {e["port"] for e in monitor["spec"]["endpoints"]} == {"metrics"}
    # Anyone else: nothing (another tenant's pod, or a pod in KEDA's namespace that is not the operator).
    assert _admitted(policy, "team-a", {"app.kubernetes.io/name": "prometheus"}) == set()
    assert _admitted(policy, "team-a", KEDA_OPERATOR_PODS["helm"]) == set()


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
    exporter = _one(objects, "NetworkPolicy", "gpu-steward-exporter")
    assert _admitted(exporter, "prometheus", PROMETHEUS[1]) == {"metrics"}
    assert _admitted(exporter, *PROMETHEUS) == set()


def _shell_blocks(text: str) -> list[list[str]]:
    """The code blocks of a Markdown text (sh or untagged), as stripped lines."""
    blocks = text.split("```")[1::2]
    return [[line.strip() for line in block.splitlines()[1:]] for block in blocks]


def test_the_docs_check_the_automator_through_a_port_forward() -> None:
    # The policy admits no pod but Prometheus and KEDA's operator: a documented `curl` to the automator from
    # inside the cluster would be refused. Each one reaches it through `kubectl port-forward` of that block.
    docs = Path(__file__).resolve().parents[2] / "docs"
    checked = 0
    for path in [*docs.glob("*.md"), docs.parent / "README.md"]:
        for block in _shell_blocks(path.read_text()):
            forwards = [line for line in block if "port-forward" in line]
            forwarded = any("gpu-steward-automator" in line or "$LEADER" in line for line in forwards)
            for line in block:
                if not line.startswith("curl"):
                    continue
                assert "gpu-steward-automator." not in line, (path.name, line)
                if "localhost:8080" in line or "127.0.0.1:8080" in line:
                    assert forwarded, (path.name, line)
                    checked += 1
                if "/decisions" in line:
                    # Only the leader runs passes: the forward goes to the Lease's holder, not to the
                    # Deployment or the Service (either may pick the standby).
                    assert any("holderIdentity" in x and "LEADER=" in x for x in block), (path.name, line)
                    assert any('"pod/$LEADER"' in x for x in forwards), (path.name, line)
    assert checked >= 2  # docs/keda.md's data check and docs/automator.md's /decisions


def test_one_way_to_enforce_that_the_next_apply_keeps() -> None:
    # The enforce component is the documented way; `kubectl set env` of the mode (undone by the next apply
    # of deploy/) is documented nowhere, in the docs or in the manifests' comments.
    repo = Path(__file__).resolve().parents[2]
    texts = [*(repo / "docs").glob("*.md"), repo / "README.md", *(repo / "deploy").rglob("*.yaml")]
    for path in texts:
        for line in path.read_text().splitlines():
            assert not ("set env" in line and "GPU_STEWARD_MODE" in line), (path.name, line)
    automator = (repo / "docs" / "automator.md").read_text()
    assert "kubectl apply -k deploy/overlays/enforce" in automator
