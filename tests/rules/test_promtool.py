"""promtool checks of the rule files and their unit tests, and the shape every alert must have."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from steward_common import series

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((REPO / "rules").glob("*.yaml")) + sorted((REPO / "alerts").glob("*.yaml"))
TEST_FILES = sorted((REPO / "tests").glob("**/*.test.yaml"))
RUNBOOK_BASE = "https://github.com/gpu-steward/gpu-steward/blob/main/docs/runbooks/"
SEVERITIES = {"critical", "warning", "info"}


def promtool() -> str:
    binary = shutil.which("promtool")
    assert binary, "promtool not on PATH (make deps installs Debian's prometheus)"
    return binary


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), path
    return doc


def groups(path: Path) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = load(path)["groups"]
    return result


def alerts() -> list[tuple[Path, dict[str, Any]]]:
    return [
        (path, rule)
        for path in RULE_FILES
        for group in groups(path)
        for rule in group["rules"]
        if "alert" in rule
    ]


def test_there_are_rule_and_test_files() -> None:
    assert (REPO / "rules" / "gpu-steward.yaml") in RULE_FILES
    assert (REPO / "alerts" / "gpu-steward.yaml") in RULE_FILES
    assert len(TEST_FILES) >= 4


def test_check_rules_lint_clean() -> None:
    proc = subprocess.run(
        [promtool(), "check", "rules", "--lint=all", "--lint-fatal", *map(str, RULE_FILES)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == len(RULE_FILES), proc.stdout


@pytest.mark.integration  # a promtool process per suite: `make test`, not `make unit`
@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_promtool_unit_tests(test_file: Path) -> None:
    proc = subprocess.run(
        [promtool(), "test", "rules", str(test_file)], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_group_evaluates_every_30s_but_the_slow_group(path: Path) -> None:
    # The automator and the idle clock count on one activity sample per pod every 30 s; the slow
    # group (waste, GPU-hours, coverage) has its own interval, tied to steward_common/series.py.
    for group in groups(path):
        expected = "2m" if group["name"] == series.SLOW_GROUP else "30s"
        assert group.get("interval") == expected, f"{path.name}: group {group['name']}"


def test_recording_rule_names_follow_level_metric_operations() -> None:
    for path in RULE_FILES:
        for group in groups(path):
            for rule in group["rules"]:
                if "record" in rule:
                    assert re.fullmatch(r"[a-z_]*:[a-z_]+:[a-z0-9_]+", rule["record"]), rule["record"]


def test_every_alert_is_complete() -> None:
    found = alerts()
    assert found
    for path, rule in found:
        name = rule["alert"]
        assert re.fullmatch(r"GpuSteward[A-Z][A-Za-z0-9]+", name), name
        assert rule.get("labels", {}).get("severity") in SEVERITIES, f"{path.name}: {name} severity"
        annotations = rule.get("annotations", {})
        for key in ("summary", "description", "runbook_url"):
            assert annotations.get(key), f"{path.name}: {name} lacks {key}"
        assert annotations["runbook_url"] == f"{RUNBOOK_BASE}{name}.md", name
        assert (REPO / "docs" / "runbooks" / f"{name}.md").is_file(), f"no runbook for {name}"


def test_alert_names_are_unique() -> None:
    names = [rule["alert"] for _, rule in alerts()]
    assert len(names) == len(set(names))


def _alert_cases() -> dict[str, set[bool]]:
    """Alert name -> which outcomes the unit tests assert: True firing, False not firing."""
    cases: dict[str, set[bool]] = {}
    for test_file in TEST_FILES:
        for test in load(test_file).get("tests", []):
            for case in test.get("alert_rule_test", []):
                cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    return cases


def test_every_alert_is_unit_tested_on_both_sides() -> None:
    cases = _alert_cases()
    for path, rule in alerts():
        name = rule["alert"]
        assert True in cases.get(name, set()), f"{path.name}: no test where {name} fires"
        # An always-firing alert (the watchdog) has no other side.
        if rule["expr"].strip() != "vector(1)":
            assert False in cases.get(name, set()), f"{path.name}: no test where {name} stays quiet"


def test_every_recorded_series_and_alert_is_documented() -> None:
    rules_doc = (REPO / "docs" / "rules.md").read_text()
    alerts_doc = (REPO / "docs" / "alerts.md").read_text()
    for path in RULE_FILES:
        for group in groups(path):
            for rule in group["rules"]:
                if "record" in rule:
                    assert f"`{rule['record']}`" in rules_doc, f"docs/rules.md lacks {rule['record']}"
                else:
                    assert rule["alert"] in alerts_doc, f"docs/alerts.md lacks {rule['alert']}"
