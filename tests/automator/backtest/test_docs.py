"""docs/backtest.md against the code: the kube-state-metrics it reads, the JSON totals it explains, the
query load it states, and its worked example, rerun on the same history."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import pytest

from automator import cli, settings
from automator.backtest.cli import MAX_POLICIES, SWEEP_ALIASES
from automator.backtest.cluster import KSM_QUERIES
from automator.backtest.history import CHUNK_STEPS
from tests.automator.backtest.test_backtest_prometheus import (  # noqa: F401 (fixtures)
    WINDOW,
    F,
    classes_file,
    prometheus,
)
from tools.fakes.promserver import Prometheus

DOC = Path(__file__).resolve().parents[3] / "docs" / "backtest.md"
EXAMPLE_FROM = "2026-12-02T13:00:00Z"
TOTALS = (
    "evictions",
    "regret_evictions",
    "gpu_hours_reclaimed",
    "wait_saved_seconds",
    "steps",
    "steps_without_data",
)


def _doc() -> str:
    return DOC.read_text()


def test_every_metric_read_is_listed() -> None:
    doc = _doc()
    assert [m for m in KSM_QUERIES if f"`{m}`" not in doc] == []
    assert f"one range query per\n  kube-state-metrics metric ({len(KSM_QUERIES)})" in doc
    assert f"Per chunk of {CHUNK_STEPS} steps" in doc and f"at most {CHUNK_STEPS} points per series" in doc


def test_every_total_and_sweep_name_is_explained() -> None:
    doc = _doc()
    for key in TOTALS:
        assert f"| `{key}` |" in doc, key
    for key in ("busy_again_after_seconds", "by_namespace", "settings", "warnings"):
        assert f"`{key}`" in doc, key
    for alias in SWEEP_ALIASES:
        assert f"`{alias}`" in doc
    assert f"at most {MAX_POLICIES} policies" in doc


def _stamp(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@pytest.mark.integration
def test_worked_example_is_what_the_command_prints(
    prometheus: Prometheus,  # noqa: F811
    classes_file: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["backtest", "--prometheus", prometheus.url, "--from", str(F), "--to", str(F + WINDOW), "--step",
            "5m", "--priority-classes", str(classes_file), "--sweep", "threshold=0.3,0.7"]  # fmt: skip
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    # the example's times are those of one run; this run's history starts at F
    shift = int(time.mktime(time.strptime(EXAMPLE_FROM, "%Y-%m-%dT%H:%M:%SZ"))) - time.timezone - F
    out = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", lambda m: _shifted(m.group(0), shift), out)
    block = _doc().split("--sweep threshold=0.3,0.7\n", 1)[1].split("```", 1)[0]
    assert out == block


def _shifted(stamp: str, shift: int) -> str:
    t = int(time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))) - time.timezone
    return _stamp(t + shift)


def _synopsis_flags(text: str) -> set[str]:
    synopsis = text.split("```\ngpu-automator backtest", 1)[1].split("```", 1)[0]
    return set(re.findall(r"--[a-z][-a-z]*", synopsis))


def test_the_synopsis_lists_every_flag_but_the_planners() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    backtest = {o for a in sub.choices["backtest"]._actions for o in a.option_strings if o.startswith("--")}
    planner_parser = argparse.ArgumentParser()
    settings.add_planner_arguments(planner_parser)
    planner = {o for a in planner_parser._actions for o in a.option_strings}
    assert _synopsis_flags(_doc()) == backtest - planner - {"--help"}
    # The one approximation that can evict more is named, with the flag that turns it off.
    approximations = _doc().split("## Approximations", 1)[1].split("\n## ", 1)[0]
    assert "evict *more*" in approximations and "--strict-placement" in approximations
