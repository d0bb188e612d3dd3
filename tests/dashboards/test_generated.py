"""The committed dashboard JSON and ConfigMaps are what `make dashboards` generates now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dashboards import generate


def test_committed_files_are_up_to_date() -> None:
    assert generate.stale(generate.expected()) == [], "run `make dashboards`"
    assert generate.main(["--check"]) == 0


def test_check_names_changed_missing_and_orphaned_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(generate, "JSON_DIR", tmp_path / "json")
    monkeypatch.setattr(generate, "DEPLOY_DIR", tmp_path / "deploy")
    assert generate.main([]) == 0
    assert generate.main(["--check"]) == 0
    changed = tmp_path / "json" / "gpu-steward-fleet.json"
    changed.write_text(changed.read_text().replace("Allocated but idle", "Allocated"))
    (tmp_path / "deploy" / "gpu-steward-node.yaml").unlink()
    (tmp_path / "deploy" / "old-dashboard.yaml").write_text("{}\n")
    assert sorted(p.name for p in generate.stale(generate.expected())) == [
        "gpu-steward-fleet.json",
        "gpu-steward-node.yaml",
        "old-dashboard.yaml",
    ]
    assert generate.main(["--check"]) == 1
    assert "make dashboards" in capsys.readouterr().err
    assert generate.main([]) == 0  # regenerating repairs all three, the orphan removed
    assert generate.main(["--check"]) == 0
    assert not (tmp_path / "deploy" / "old-dashboard.yaml").exists()


def test_configmaps_carry_the_json_unchanged_for_the_sidecar() -> None:
    json_files = sorted(generate.JSON_DIR.glob("*.json"))
    assert [p.stem for p in json_files] == sorted(generate.DASHBOARDS)
    for path in json_files:
        manifest = yaml.safe_load((generate.DEPLOY_DIR / f"{path.stem}.yaml").read_text())
        assert manifest["kind"] == "ConfigMap" and manifest["apiVersion"] == "v1"
        assert manifest["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert manifest["data"] == {path.name: path.read_text()}
        assert json.loads(manifest["data"][path.name])["uid"] == path.stem
    kustomization = yaml.safe_load((generate.DEPLOY_DIR / "kustomization.yaml").read_text())
    assert kustomization["resources"] == [f"{p.stem}.yaml" for p in json_files]
