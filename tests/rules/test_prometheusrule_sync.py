"""The PrometheusRule in deploy/ is the plain rule files, wrapped, and is up to date."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "deploy" / "prometheusrule" / "generate.py"
MANIFEST = REPO / "deploy" / "prometheusrule" / "gpu-steward-prometheusrule.yaml"


@pytest.fixture(scope="module")
def generate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_steward_prometheusrule_generate", GENERATOR)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_manifest_is_up_to_date(generate: ModuleType) -> None:
    assert MANIFEST.read_text() == generate.render(), "run python deploy/prometheusrule/generate.py"
    assert generate.main(["--check"]) == 0


def test_manifest_holds_exactly_the_plain_groups() -> None:
    manifest = yaml.safe_load(MANIFEST.read_text())
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert manifest["kind"] == "PrometheusRule"
    assert manifest["metadata"]["labels"]["release"] == "prometheus"
    plain = [
        group
        for folder in ("rules", "alerts")
        for path in sorted((REPO / folder).glob("*.yaml"))
        for group in yaml.safe_load(path.read_text())["groups"]
    ]
    assert manifest["spec"]["groups"] == plain


def test_check_fails_when_out_of_date(generate: ModuleType, tmp_path: Path) -> None:
    stale = tmp_path / "stale.yaml"
    stale.write_text(MANIFEST.read_text().replace("interval: 30s", "interval: 1m", 1))
    assert generate.main(["--check", "--output", str(stale)]) == 1
    assert generate.main(["--check", "--output", str(tmp_path / "missing.yaml")]) == 1


def test_duplicate_group_names_are_rejected(generate: ModuleType, tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    for path in (a, b):
        path.write_text("groups:\n  - name: same\n    rules: []\n")
    with pytest.raises(ValueError, match="'same' already used"):
        generate.load_groups([a, b])


def test_file_without_groups_is_rejected(generate: ModuleType, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: []\n")
    with pytest.raises(ValueError, match="'groups' list"):
        generate.load_groups([bad])
