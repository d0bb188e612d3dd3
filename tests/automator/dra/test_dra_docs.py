"""docs/dra.md and alerts/dra.yaml against the code: kinds, severities, metric names, reasons, the example."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from automator import cli
from automator.dra import report
from automator.dra.load import parse_usage
from automator.dra.metrics import DraCheckMetrics
from automator.dra.model import KINDS, SEVERITY, CheckOutcome, EventOutcome

REPO = Path(__file__).resolve().parents[3]
DOC = (REPO / "docs" / "dra.md").read_text()
ALERTS = yaml.safe_load((REPO / "alerts" / "dra.yaml").read_text())["groups"][0]["rules"]


def fenced(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC, re.DOTALL)


def rows(first_cell: str) -> dict[str, list[str]]:
    """Markdown table rows whose first cell is a `code` span, keyed by it."""
    out: dict[str, list[str]] = {}
    for line in DOC.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and re.fullmatch(first_cell, cells[0].strip("`")):
            out[cells[0].strip("`")] = cells[1:]
    return out


def test_findings_table_lists_every_kind_with_its_severity() -> None:
    table = rows(r"[a-z-]+")
    assert {k: v[0] for k, v in table.items() if k in KINDS} == SEVERITY
    assert set(KINDS) <= set(table)


def test_metrics_table_is_the_exported_names_and_labels() -> None:
    table = rows(r"gpu_steward_dra_[a-z_]+")
    registry = CollectorRegistry()
    DraCheckMetrics(registry)
    check_metrics = {m.name + ("_total" if m.type == "counter" else "") for m in registry.collect()}
    assert check_metrics == {
        report.CHECKS_METRIC + "_total",
        report.EVENTS_METRIC + "_total",
        report.LAST_SUCCESS_METRIC,
        report.CHECK_DURATION_METRIC,
        report.USAGE_CHECKED_METRIC,
    }
    assert (
        set(table) == {report.CAPACITY_METRIC, report.CONSUMED_METRIC, report.FINDINGS_METRIC} | check_metrics
    )
    types = {m.name + ("_total" if m.type == "counter" else ""): m.type for m in registry.collect()}
    for name, kind in types.items():
        assert table[name][0] == kind, name
    assert re.findall(r"`([a-z]+)`", table[report.CHECKS_METRIC + "_total"][1]) == ["result"]
    assert re.findall(r"`([a-z_]+)`", table[report.CHECKS_METRIC + "_total"][2]) == [
        o.value for o in CheckOutcome
    ]
    assert re.findall(r"`([a-z_]+)`", table[report.EVENTS_METRIC + "_total"][2])[:3] == [
        o.value for o in EventOutcome
    ]
    for name in (report.CAPACITY_METRIC, report.CONSUMED_METRIC):
        assert re.findall(r"`([a-z]+)`", table[name][1]) == list(report.DEVICE_LABELS)
    assert re.findall(r"`([a-z]+)`", table[report.FINDINGS_METRIC][1]) == ["kind"]


def test_every_event_reason_is_documented() -> None:
    for reason in report.REASONS.values():
        assert f"`{reason}`" in DOC, reason


def test_json_example_is_the_real_output(capsys: pytest.CaptureFixture[str]) -> None:
    (example,) = fenced("json")
    demo = REPO / "deploy" / "demo"
    argv = ["dra-check", "--cluster", str(demo / "dra-cluster.yaml"), "--usage", str(demo / "dra-usage.yaml")]
    assert cli.main([*argv, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(example)


def test_usage_example_parses() -> None:
    (example,) = fenced("yaml")
    (entry,) = parse_usage(yaml.safe_load(example), "docs/dra.md")
    assert entry.container == "server"


def _alert_kinds(expr: str) -> set[str]:
    kinds: set[str] = set()
    for op, value in re.findall(r'kind(=~|=)"([^"]+)"', expr):
        kinds.update(value.split("|") if op == "=~" else [value])
    return kinds


def test_alerts_read_the_findings_metric_and_cover_every_kind_at_its_severity() -> None:
    covered: set[str] = set()
    for rule in ALERTS:
        names = set(re.findall(r"gpu_steward_[a-z_]+", rule["expr"]))
        if rule["alert"] == "GpuStewardDraCheckFailing":  # the check itself, not its findings
            assert names == {report.CHECKS_METRIC + "_total"}
            assert set(re.findall(r'result=~?"([^"]+)"', rule["expr"])) == {
                f"{CheckOutcome.KUBERNETES_ERROR}|{CheckOutcome.ERROR}",
                CheckOutcome.OK.value,
            }
            assert rule["alert"] in DOC
            continue
        assert names == {report.FINDINGS_METRIC}, rule["alert"]
        kinds = _alert_kinds(rule["expr"])
        assert kinds and kinds <= set(KINDS), rule["alert"]
        assert {SEVERITY[k] for k in kinds} == {rule["labels"]["severity"]}, rule["alert"]
        assert not kinds & covered, f"{rule['alert']}: a kind alerted twice"
        covered |= kinds
        assert rule["alert"] in DOC
    assert covered == set(KINDS)
