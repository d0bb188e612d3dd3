"""docs/keda.md against the code: signals, profiles, settings, metrics, routes, the CLI's options."""

from __future__ import annotations

import re
from pathlib import Path

from flask import Flask
from prometheus_client import CollectorRegistry

from automator.cli import build_parser
from automator.keda.auth import AuthConfig
from automator.keda.cache import KedaCache
from automator.keda.http import blueprint
from automator.keda.metrics import KedaMetrics
from automator.keda.request import METRICS_PATH, PROFILES_PATH, VALUE_LOCATION
from automator.keda.settings import KEDA_SETTINGS
from automator.keda.signals import AGGREGATIONS, PROFILES, SIGNALS
from tests.automator.keda.fakes import FakePrometheus, cluster

DOC = (Path(__file__).resolve().parents[3] / "docs" / "keda.md").read_text()


def section(heading: str) -> str:
    start = DOC.index(heading + "\n")
    end = DOC.find("\n#", start + len(heading))
    return DOC[start : end if end >= 0 else len(DOC)]


def rows(text: str) -> list[list[str]]:
    out = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            out.append([c.strip() for c in line.strip().strip("|").split("|")])
    return out[1:]


def spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def test_signals_table() -> None:
    table = {spans(r[0])[0]: (r[1], r[2]) for r in rows(section("### Signals"))}
    assert table == {s.name: (s.unit, s.help) for s in SIGNALS.values()}


def test_profiles_table() -> None:
    table = {spans(r[0])[0]: [spans(c)[0] for c in r[1:7]] for r in rows(section("### Profiles"))}
    expected = {
        p.name: [
            p.signal,
            p.aggregation,
            f"{p.window_seconds}s",
            f"{p.target:g}",
            f"{p.activation:g}",
            p.metric_type,
        ]
        for p in PROFILES.values()
    }
    assert table == expected


def test_settings_table() -> None:
    table = {spans(r[0])[0]: (spans(r[1])[0], r[2], r[3]) for r in rows(section("## Settings"))}
    expected = {s.flag: (s.env, f"`{s.default}`" if s.default else "none", s.help) for s in KEDA_SETTINGS}
    assert table == expected


def test_metrics_table_is_the_registry() -> None:
    registry = CollectorRegistry()
    KedaMetrics(registry).workload_available.labels("inference", "deployment/api").set(1)  # labelled
    real = {}
    for family in registry.collect():
        name = family.name + "_total" if family.type == "counter" else family.name
        real[name] = {k for s in family.samples for k in s.labels if k != "le"}
    table = {}
    for r in rows(section("## Metrics and alerts")):
        name, _, labels = spans(r[0])[0].partition("{")
        table[name] = set(filter(None, labels.rstrip("}").split(",")))
    assert table == real


def test_routes_and_value_location() -> None:
    app = Flask("t")
    app.register_blueprint(blueprint(KedaCache(FakePrometheus(), cluster()), AuthConfig()))
    routes = {r.rule for r in app.url_map.iter_rules() if r.endpoint != "static"}
    assert routes == {METRICS_PATH, PROFILES_PATH}
    for route in routes:
        assert f"`{route}`" in DOC or f"`GET {route}`" in DOC
    assert f"**`{VALUE_LOCATION}`**" in DOC
    for aggregation in AGGREGATIONS:
        assert f"`{aggregation}`" in DOC


def test_every_option_of_the_command_is_documented() -> None:
    parser = build_parser()
    keda = next(a for a in parser._actions if hasattr(a, "choices") and a.choices and "keda" in a.choices)
    sub = keda.choices["keda"]  # type: ignore[index]
    scaledobject = next(a for a in sub._actions if hasattr(a, "choices") and a.choices).choices[
        "scaledobject"
    ]
    text = section("## `gpu-automator keda scaledobject`")
    for action in scaledobject._actions:
        for flag in action.option_strings:
            if flag not in ("-h", "--help"):
                assert f"`{flag}" in text, flag


def test_availability_series_are_kept_for_the_alerts_for_window() -> None:
    import yaml

    from automator.keda.metrics import AVAILABILITY_ALERT_SECONDS
    from automator.keda.request import duration_seconds

    repo = Path(__file__).resolve().parents[3]
    rules = yaml.safe_load((repo / "alerts" / "keda.yaml").read_text())["groups"][0]["rules"]
    (rule,) = [r for r in rules if r["alert"] == "GpuStewardKedaWorkloadUnavailable"]
    assert duration_seconds(rule["for"]) == AVAILABILITY_ALERT_SECONDS
