"""The recorded-series home (automator/series.py) and the rule files must not drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from automator import series
from automator.model import PlannerConfig
from automator.prom import gpu_query

ROOT = Path(__file__).resolve().parents[2]


def _groups() -> list[dict[str, object]]:
    groups: list[dict[str, object]] = []
    for path in sorted((ROOT / "rules").glob("*.yaml")):
        groups.extend(yaml.safe_load(path.read_text())["groups"])
    return groups


def _rules() -> list[dict[str, str]]:
    return [rule for group in _groups() for rule in group["rules"]]  # type: ignore[attr-defined]


def test_every_recorded_series_is_named_in_the_home_and_nothing_else() -> None:
    recorded = [rule["record"] for rule in _rules() if "record" in rule]
    assert sorted(recorded) == sorted(series.RECORDED)


def test_every_named_series_constant_is_recorded() -> None:
    names = {
        value
        for key, value in vars(series).items()
        if key.isupper() and isinstance(value, str) and ":" in value
    }
    assert names, "the home names no series"
    assert names <= set(series.RECORDED)


def test_idle_threshold_in_the_idle_rule_is_the_home_value() -> None:
    (idle,) = [rule for rule in _rules() if rule.get("record") == series.POD_IDLE]
    numbers = re.findall(r"<= bool ([0-9.]+)", idle["expr"])
    assert [float(n) for n in numbers] == [series.IDLE_THRESHOLD]


def test_group_interval_is_the_home_value() -> None:
    intervals = {group["interval"] for group in _groups()}
    assert intervals == {f"{series.RULE_INTERVAL_SECONDS}s"}


def test_automator_reads_the_home_names() -> None:
    assert series.POD_ACTIVITY in gpu_query(600)
    assert PlannerConfig().default_gpu_idle_threshold == series.IDLE_THRESHOLD


def test_alerts_read_only_recorded_or_exported_series() -> None:
    recorded_like = re.compile(r"\b[a-z_]*:[a-z_]+:[a-z0-9_]+\b")
    for path in sorted((ROOT / "alerts").glob("*.yaml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                for name in recorded_like.findall(rule["expr"]):
                    assert name in series.RECORDED, f"{path.name}: {rule['alert']} reads {name}"
