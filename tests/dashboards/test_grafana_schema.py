"""The generated dashboards against Grafana's own schema (npm @grafana/schema 13, as JSON Schema in
../shared/reference/schemas/grafana/): the current schemaVersion, no field the Dashboard type does not have,
and each stat, table and timeseries panel's options and field config against that panel type's types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dashboards.house import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO.parent / "shared" / "reference" / "schemas" / "grafana"
pytestmark = pytest.mark.skipif(not SCHEMAS.is_dir(), reason=f"Grafana's schema not found at {SCHEMAS}")
CURRENT_SCHEMA_VERSION = 42  # Grafana 13 (schemas README)
DASHBOARDS = sorted((REPO / "dashboards" / "json").glob("*.json"))


def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / name).read_text())
    return schema


def _errors(schema: dict[str, Any], data: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
        for e in jsonschema.Draft7Validator(schema).iter_errors(data)
    ]


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for p in dashboard["panels"]:
        panels.append(p)
        panels.extend(p.get("panels", []))
    return panels


def test_schema_version_is_grafanas_current() -> None:
    assert SCHEMA_VERSION == CURRENT_SCHEMA_VERSION
    assert DASHBOARDS


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_validates_against_grafanas_dashboard_schema(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert dashboard["schemaVersion"] == CURRENT_SCHEMA_VERSION
    assert not {"rows", "sharedCrosshair", "style", "hideControls"} & set(dashboard)
    assert dashboard["graphTooltip"] == 1  # shared crosshair, the current field for it
    assert _errors(_schema("dashboard.schema.json"), dashboard) == []


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panel_options_and_field_config_validate_per_panel_type(path: Path) -> None:
    checked = 0
    for panel in _panels(json.loads(path.read_text())):
        kind = panel["type"]
        if kind == "row":
            continue
        options, field_config = SCHEMAS / f"opt-{kind}.json", SCHEMAS / f"fc-{kind}.json"
        assert options.exists(), f"{panel['title']}: no schema for panel type {kind}"
        assert _errors(_schema(options.name), panel.get("options", {})) == [], panel["title"]
        if field_config.exists():
            custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
            assert _errors(_schema(field_config.name), custom) == [], panel["title"]
        checked += 1
    assert checked


def test_the_schema_check_can_fail() -> None:
    dashboard = json.loads(DASHBOARDS[0].read_text())
    assert _errors(_schema("dashboard.schema.json"), {**dashboard, "sharedCrosshair": True})
