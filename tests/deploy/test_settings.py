"""docs/install.md's "Settings" table, row by row: each example overlay renders (with kubectl's kustomize),
validates, and does what its row says. Each row names an example block; a row without a block, a block
without a row and a row without a check here all fail. The KEDA components are followed end to end: the
files their variables name lie in the Secrets they mount, and the automator's own settings accept them."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from automator import cli
from automator.keda.settings import keda_settings
from tests.automator.keda.certs import make_certs
from tests.deploy.test_manifests import DEPLOY, _validate, render

DOCS = DEPLOY.parent / "docs" / "install.md"
IMAGE = "ghcr.io/gpu-steward/gpu-steward:0.1.0"
Objects = list[dict[str, Any]]


@dataclass(frozen=True)
class Context:
    """What a row's check may need besides the rendered objects."""

    tmp_path: Path
    capsys: pytest.CaptureFixture[str]


Check = Callable[[Objects, Context], None]


def _section() -> str:
    return DOCS.read_text().split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]


def table_rows() -> dict[str, str]:
    """Example id -> the row's "component or patch" cell, for rows whose example is a block."""
    rows = {}
    for line in _section().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`[a-z0-9-]+`", cells[2]):
            rows[cells[2].strip("`")] = cells[1]
    return rows


def examples() -> dict[str, dict[str, Any]]:
    found = re.findall(r"<!-- setting: ([a-z0-9-]+) -->\n```yaml\n(.*?)```", _section(), re.S)
    return {name: yaml.safe_load(body) for name, body in found}


def render_example(tmp_path: Path, name: str) -> Objects:
    doc = examples()[name] | {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    root = tmp_path / name
    root.mkdir()
    doc["components"] = [os.path.relpath(DEPLOY / p.split("/deploy/", 1)[1], root) for p in doc["components"]]
    (root / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    return render(str(root))


def _one(objects: Objects, kind: str) -> dict[str, Any]:
    (obj,) = [o for o in objects if o["kind"] == kind]
    return obj


def _pod(objects: Objects, kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = _one(objects, kind)["spec"]["template"]["spec"]
    return spec


def _env(objects: Objects, kind: str = "Deployment") -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in _pod(objects, kind)["containers"][0]["env"]}


def _default() -> Objects:
    return render("")


def _placement(runtime: str | None, selector: dict[str, str]) -> Check:
    def check(objects: Objects, _: Context | None = None) -> None:
        pod = _pod(objects, "DaemonSet")
        assert pod.get("runtimeClassName") == runtime
        assert pod["nodeSelector"] == selector

    return check


def _resources(objects: Objects, _: Context) -> None:
    patches = {
        p["target"]["kind"]: yaml.safe_load(p["patch"])[0]["value"]
        for p in examples()["resources"]["patches"]
    }
    assert set(patches) == {"DaemonSet", "Deployment"}
    for kind, wanted in patches.items():
        assert _pod(objects, kind)["containers"][0]["resources"] == wanted


def _prometheus_labels(objects: Objects, _: Context) -> None:
    selected = [o for o in objects if o["kind"] in ("ServiceMonitor", "PrometheusRule")]
    assert len(selected) == 3
    assert {o["metadata"]["labels"]["release"] for o in selected} == {"kube-prometheus-stack"}


def _env_check(name: str, value: str) -> Check:
    def check(objects: Objects, _: Context) -> None:
        env = _env(objects)
        assert env[name] == value
        # Only that variable changed.
        assert {k: v for k, v in env.items() if k != name} == {
            k: v for k, v in _env(_default()).items() if k != name
        }

    return check


def _mode(objects: Objects, _: Context) -> None:
    assert _env(objects)["GPU_STEWARD_MODE"] == "enforce"


def _mounted_files(objects: Objects, root: Path, contents: dict[tuple[str, str], bytes]) -> dict[str, str]:
    """Lay the automator's Secret volumes out under `root` as the kubelet would (`contents`: (Secret, key)
    -> bytes), and return its environment with every path under a mount moved under `root`."""
    pod = _pod(objects, "Deployment")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    env = _env(objects)
    for mount in pod["containers"][0].get("volumeMounts", []):
        secret = volumes[mount["name"]]["secret"]
        assert mount.get("readOnly") is True, mount
        items = secret.get("items") or [
            {"key": k, "path": k} for (s, k) in contents if s == secret["secretName"]
        ]
        for item in items:
            path = root / mount["mountPath"].lstrip("/") / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(contents[(secret["secretName"], item["key"])])
        for name, value in env.items():
            if value.startswith(mount["mountPath"] + "/"):
                env[name] = str(root / value.lstrip("/"))
    return env


SECRETS = {("gpu-steward-keda-token", "token"): b"s3cret-token\n"}


def _keda(objects: Objects, tmp_path: Path) -> Any:
    # The service checks the certificates it is given at start: the Secrets hold real ones.
    (tmp_path / "certs").mkdir()
    certs = make_certs(tmp_path / "certs")
    secrets = {
        **SECRETS,
        ("gpu-steward-keda-client-ca", "ca.crt"): certs.ca.read_bytes(),
        ("gpu-steward-automator-tls", "tls.crt"): certs.server_cert.read_bytes(),
        ("gpu-steward-automator-tls", "tls.key"): certs.server_key.read_bytes(),
    }
    env = _mounted_files(objects, tmp_path / "pod", secrets)
    for name, value in env.items():
        if name.endswith("_FILE"):
            assert Path(value).is_file(), (name, value)
    return keda_settings(argparse.Namespace(), env)


def _keda_token(objects: Objects, ctx: Context) -> None:
    settings = _keda(objects, ctx.tmp_path)
    assert Path(settings.keda_bearer_token_file).read_bytes() == SECRETS[("gpu-steward-keda-token", "token")]


def _keda_mtls(objects: Objects, ctx: Context) -> None:
    settings = _keda(objects, ctx.tmp_path)
    assert settings.keda_tls_client_ca_file and settings.keda_tls_cert_file and settings.keda_tls_key_file
    # KEDA's side, as `gpu-automator keda scaledobject --auth tls` prints it, reaches the TLS port the
    # Service serves and the NetworkPolicy admits.
    service = [
        o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "gpu-steward-automator"
    ]
    (tls_port,) = [p["port"] for p in service[0]["spec"]["ports"] if p["name"] == "keda-tls"]
    assert tls_port == settings.keda_tls_port
    argv = ["keda", "scaledobject", "--namespace", "ml", "--deployment", "api", "--profile", "training"]
    assert cli.main([*argv, "--auth", "tls"]) == 0
    docs = list(yaml.safe_load_all(ctx.capsys.readouterr().out))
    (scaled,) = [d for d in docs if d and d["kind"] == "ScaledObject"]
    url = scaled["spec"]["triggers"][0]["metadata"]["url"]
    assert url.startswith(f"https://gpu-steward-automator.gpu-steward.svc:{tls_port}/")
    assert scaled["spec"]["triggers"][0]["metadata"]["authMode"] == "tls"


def _kueue(objects: Objects, _: Context) -> None:
    assert _env(objects)["GPU_STEWARD_KUEUE"] == "deactivate"
    writes = [
        rule
        for role in objects
        if role["kind"] == "ClusterRole"
        for rule in role["rules"]
        if "kueue.x-k8s.io" in rule["apiGroups"] and set(rule["verbs"]) - {"list", "get", "watch"}
    ]
    assert [(r["resources"], r["verbs"]) for r in writes] == [(["workloads"], ["patch"])]


def _keda_grpc(objects: Objects, _: Context) -> None:
    assert _env(objects)["GPU_STEWARD_KEDA_GRPC_PORT"] == "9000"


def _no_operator(objects: Objects, _: Context) -> None:
    assert not [o for o in objects if o["apiVersion"].startswith("monitoring.coreos.com/")]


def _image(objects: Objects, _: Context) -> None:
    (wanted,) = examples()["image"]["images"]
    for kind in ("Deployment", "DaemonSet"):
        images = {c["image"] for c in _pod(objects, kind)["containers"]}
        assert images == {f"{wanted['newName']}:{wanted['newTag']}"}


CHECKS: dict[str, Check] = {
    "gpu-operator": _placement("nvidia", {"nvidia.com/gpu.present": "true"}),
    "hami": _placement(None, {"gpu": "on"}),
    "plain": _placement(None, {"node-role.example.com/gpu": "true"}),
    "resources": _resources,
    "prometheus-labels": _prometheus_labels,
    "prometheus-url": _env_check("GPU_STEWARD_PROMETHEUS_URL", "http://prometheus-server.prometheus.svc:80"),
    "victim-namespaces": _env_check("GPU_STEWARD_VICTIM_NAMESPACES", "batch,research"),
    "enforce": _mode,
    "keda-token": _keda_token,
    "keda-mtls": _keda_mtls,
    "keda-grpc": _keda_grpc,
    "kueue": _kueue,
    "no-operator": _no_operator,
    "image": _image,
}


def test_every_row_has_an_example_and_a_check() -> None:
    assert set(table_rows()) == set(examples()) == set(CHECKS)
    for name, cell in table_rows().items():
        # A component the row names is one its example lists.
        for component in re.findall(r"`components/([a-z0-9-]+)`", cell):
            assert any(p.endswith(f"/components/{component}") for p in examples()[name]["components"]), name


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_setting_renders_and_does_what_its_row_says(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = render_example(tmp_path, name)
    for obj in objects:
        _validate(obj)
    CHECKS[name](objects, Context(tmp_path, capsys))


def test_the_plain_component_alone_selects_its_own_label(tmp_path: Path) -> None:
    root = tmp_path / "plain-alone"
    root.mkdir()
    doc = {
        "components": [os.path.relpath(DEPLOY / "components" / c, root) for c in ("stack", "placement-plain")]
    }
    (root / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    _placement(None, {"gpu-steward.io/gpu-node": "true"})(render(str(root)))


def test_the_mtls_component_without_its_secret_fails_the_settings(tmp_path: Path) -> None:
    # The check above can fail: without the client CA's file the automator's settings refuse to start.
    objects = render_example(tmp_path, "keda-mtls")
    secrets = {k: v for k, v in SECRETS.items() if k[0] != "gpu-steward-keda-client-ca"}
    env = _mounted_files(
        [o for o in objects if o["kind"] != "Deployment"] + [_strip_ca(_one(objects, "Deployment"))],
        tmp_path / "pod",
        secrets,
    )
    with pytest.raises(Exception, match="keda-tls-client-ca-file"):
        keda_settings(argparse.Namespace(), env)


def _strip_ca(deployment: dict[str, Any]) -> dict[str, Any]:
    """The Deployment with the client CA's volume gone (the variable still names the file)."""
    pod = deployment["spec"]["template"]["spec"]
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "keda-client-ca"]
    container = pod["containers"][0]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "keda-client-ca"]
    return deployment


def test_every_component_is_documented_and_in_an_example() -> None:
    text = DOCS.read_text()
    used = {p.rsplit("/", 1)[1] for example in examples().values() for p in example["components"]}
    for component in sorted(p.name for p in (DEPLOY / "components").iterdir() if p.is_dir()):
        assert f"`deploy/components/{component}`" in text, component
        assert component in used, component
