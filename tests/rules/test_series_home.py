"""The recorded-series home (steward_common/series.py) and the rule files must not drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from automator.prom import gpu_query
from automator.reclaim.model import PlannerConfig
from steward_common import series

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


def test_each_group_records_what_the_home_says_in_that_order() -> None:
    by_group = {
        group["name"]: tuple(r["record"] for r in group["rules"] if "record" in r)  # type: ignore[attr-defined]
        for group in _groups()
    }
    assert by_group == series.RECORDED_BY_GROUP


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


def test_group_intervals_are_the_home_values() -> None:
    intervals = {str(group["name"]): group["interval"] for group in _groups()}
    assert intervals == {
        name: f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"
        for name, seconds in series.GROUP_INTERVALS.items()
    }
    assert series.GROUP_INTERVALS[series.FAST_GROUP] == series.RULE_INTERVAL_SECONDS


def test_raw_readings_span_one_fast_interval_less_1ms() -> None:
    # Burst-proof and fresh: every raw range is the fast interval less 1 ms.
    window = f"[{series.RULE_INTERVAL_SECONDS - 1}s999ms]"
    for rule in _rules():
        for rng in re.findall(r"gpu_steward_[a-z_]+\[[^\]]+\]", rule["expr"]):
            assert rng.endswith(window), f"{rule.get('record')}: {rng}"


def test_freshness_veto_is_the_home_value() -> None:
    vetoes = [int(n) for rule in _rules() for n in re.findall(r"snapshot_age_seconds >= (\d+)", rule["expr"])]
    assert vetoes and set(vetoes) == {series.FRESHNESS_SECONDS}


def test_every_aggregation_and_join_keeps_the_outer_labels() -> None:
    # `by (...)` and `on (...)` clauses; `on ()` joins against a single series (the interval).
    for rule in _rules():
        if "record" not in rule:
            continue
        for clause in re.findall(r"\b(?:by|on) \(([^)]*)\)", rule["expr"]):
            labels = [label.strip() for label in clause.split(",") if label.strip()]
            if labels:
                assert labels[: len(series.OUTER_LABELS)] == list(series.OUTER_LABELS), (
                    f"{rule['record']}: ({clause})"
                )


def test_pod_level_series_are_keyed_by_the_pod_key() -> None:
    key = ", ".join((*series.OUTER_LABELS, *series.POD_KEY))
    for rule in _rules():
        if rule.get("record", "").startswith("namespace_pod:"):
            assert f"by ({key})" in rule["expr"], rule["record"]


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
