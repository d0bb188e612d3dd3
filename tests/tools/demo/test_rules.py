"""The demo's time-compressed copies of the rules, alerts, cluster and scenario (tools/demo/rules.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.sources.scenario import parse_scenario
from steward_common.conventions import ANN_GPU_IDLE_SECONDS, ANN_TOLERATION_SECONDS
from steward_common.series import POD_IDLE_SECONDS, RULE_INTERVAL_SECONDS
from tools.demo.rules import (
    DRA_ALERT,
    IDLE_ALERT,
    DemoRulesError,
    alert_for,
    compress_rules,
    duration_ms,
    scale_cluster,
    scale_scenario,
    write_rule_files,
)
from tools.demo.run import FAST, NORMAL
from tools.fakes.fakesim import LOAD_ANNOTATION, parse_load
from tools.fakes.kubeapi import load_objects
from tools.fakes.promserver import ROOT

RULES = ROOT / "rules" / "gpu-steward.yaml"
ALERTS = ROOT / "alerts" / "gpu-steward.yaml"


def intervals(text: str) -> list[str]:
    return re.findall(r"^\s*interval:\s*(\S+)", text, re.MULTILINE)


def test_durations() -> None:
    assert [duration_ms(d) for d in ("30s", "2m", "29s999ms", "1h1s")] == [30_000, 120_000, 29_999, 3_601_000]
    with pytest.raises(DemoRulesError):
        duration_ms("30 s")


def test_fast_rules_run_ten_times_faster_and_read_one_interval() -> None:
    text = compress_rules(RULES.read_text(), FAST, recording=True)
    assert intervals(text) == ["3s", "12s"]
    assert "[2s999ms]" in text and f"[{RULE_INTERVAL_SECONDS - 1}s999ms]" not in text
    assert "offset 1h1s" in text and "/ 3600" in text  # reporting windows and units kept


def test_the_idle_alert_fires_within_the_demo() -> None:
    for scale in (NORMAL, FAST):
        text = compress_rules(ALERTS.read_text(), scale, idle_alert=True)
        assert f"{POD_IDLE_SECONDS} >= {scale.idle_alert_seconds}" in text
    assert IDLE_ALERT in ALERTS.read_text()


def test_normal_speed_changes_only_the_idle_alert() -> None:
    assert compress_rules(RULES.read_text(), NORMAL, recording=True) == RULES.read_text()
    changed = compress_rules(ALERTS.read_text(), NORMAL, idle_alert=True).splitlines()
    diff = [(a, b) for a, b in zip(ALERTS.read_text().splitlines(), changed, strict=True) if a != b]
    assert diff == [(f"        expr: {POD_IDLE_SECONDS} >= 3600", f"        expr: {POD_IDLE_SECONDS} >= 60")]


def test_drift_is_an_error() -> None:
    with pytest.raises(DemoRulesError, match="raw series"):
        compress_rules(RULES.read_text().replace("[29s999ms]", "[30s]"), FAST, recording=True)
    with pytest.raises(DemoRulesError, match=IDLE_ALERT):
        compress_rules(ALERTS.read_text().replace(">= 3600", "> 3600"), FAST, idle_alert=True)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (make deps)")
def test_compressed_files_pass_promtool(tmp_path: Path) -> None:
    files = write_rule_files(ROOT, tmp_path, FAST)
    assert {f.name for f in files} >= {"rules-gpu-steward.yaml", "alerts-gpu-steward.yaml"}
    result = subprocess.run(["promtool", "check", "rules", *map(str, files)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cluster_and_scenario_scale() -> None:
    objects = scale_cluster(load_objects(ROOT / "deploy" / "demo" / "cluster.yaml"), FAST)
    (low,) = [o for o in objects if o["metadata"]["name"] == "research-low"]
    assert low["metadata"]["annotations"][ANN_GPU_IDLE_SECONDS] == "12"
    assert low["metadata"]["annotations"][ANN_TOLERATION_SECONDS] == "6"
    assert {o["spec"]["terminationGracePeriodSeconds"] for o in objects if o["kind"] == "Pod"} == {1}
    doc = yaml.safe_load((ROOT / "deploy" / "demo" / "scenario.yaml").read_text())
    scenario = parse_scenario(scale_scenario(doc, FAST))
    batch = scenario.gpus[4].processes[0]
    assert [p.start for p in batch.phases] == [0, 6]


def test_the_dra_usage_alert_fires_after_the_demos_seconds_and_nothing_else_changes() -> None:
    text = (ROOT / "alerts" / "dra.yaml").read_text()
    out = yaml.safe_load(compress_rules(text, FAST, dra_alert=True))
    waits = {r["alert"]: r["for"] for g in out["groups"] for r in g["rules"]}
    original = {r["alert"]: r["for"] for g in yaml.safe_load(text)["groups"] for r in g["rules"]}
    assert waits.pop(DRA_ALERT) == f"{FAST.dra_alert_seconds}s" and original.pop(DRA_ALERT) == "10m"
    assert waits == original
    assert alert_for(ROOT, DRA_ALERT) == "10m"
    with pytest.raises(DemoRulesError, match=DRA_ALERT):
        compress_rules(text.replace(f"alert: {DRA_ALERT}", "alert: Renamed"), FAST, dra_alert=True)


def test_the_load_phases_and_template_grace_periods_are_scaled() -> None:
    objects = scale_cluster(load_objects(ROOT / "deploy" / "demo" / "cluster.yaml"), FAST)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    phases = parse_load(deployment["metadata"]["annotations"][LOAD_ANNOTATION])
    assert [start for start, _ in phases] == [0, 3, 30]
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 1
