"""Object text with control characters, ANSI escapes or newlines is escaped wherever it is shown (plan,
explain and dra-check text, Events, log lines); JSON stays JSON; printable text is left as it was."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from automator.objects.resources import parse_time
from automator.reclaim import report
from automator.reclaim.model import PlannerConfig
from automator.reclaim.planner import plan
from automator.reclaim.snapshot import load_cluster, load_usage
from steward_common.printable import PrintableFormatter, printable
from tests.automator.cli_run import run_cli

FIXTURES = Path(__file__).parents[1] / "fixtures" / "docs_example"
NOW = "2025-06-01T12:00:00Z"
HOSTILE = r'"train-a\e[2J\n  evict forged\t\x07"'  # a YAML double-quoted name
SHOWN = r"train-a\x1b[2J\n  evict forged\t\x07"
RAW = "train-a\x1b[2J\n  evict forged\t\x07"  # the name as the planner reads it


def hostile_files(tmp_path: Path) -> tuple[str, str]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text((FIXTURES / "cluster.yaml").read_text().replace("name: train-a", f"name: {HOSTILE}"))
    usage = tmp_path / "usage.yaml"
    usage.write_text((FIXTURES / "usage.yaml").read_text().replace("name: train-a", f"name: {HOSTILE}"))
    return str(cluster), str(usage)


def _clean(text: str) -> None:
    for char in "\x1b\x07\t\r":
        assert char not in text, repr(text)


def test_printable_escapes_only_what_is_not_printable() -> None:
    assert printable("a\x1b[31mb\nc\td\x00e\u200bf\x7f") == r"a\x1b[31mb\nc\td\x00e\u200bf\x7f"
    plain = "jürgen/日本-ノード ü ß (priority 1000, 4 GPUs) -> gpu-a: 'x' \"y\" \\z"
    assert printable(plain) is plain


def test_plan_and_explain_text_escape_object_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, usage = hostile_files(tmp_path)
    code, out, _ = run_cli(capsys, "plan", "--cluster", cluster, "--usage", usage, "--now", NOW)
    assert code == 0 and f"  evict ml/{SHOWN}: 4 GPUs" in out
    _clean(out)
    assert not any(line.startswith("  evict forged") for line in out.splitlines())
    code, out, _ = run_cli(
        capsys,
        "explain",
        f"ml/{RAW}",
        "--cluster",
        cluster,
        "--usage",
        usage,
        "--now",
        NOW,
    )
    assert code == 0 and f"Pod ml/{SHOWN}: phase Running" in out
    _clean(out)
    code, out, _ = run_cli(
        capsys, "plan", "--cluster", cluster, "--usage", usage, "--now", NOW, "--output", "json"
    )
    assert code == 0
    (decision,) = json.loads(out)["decisions"]
    assert decision["victims"] == [f"ml/{RAW}"]  # JSON carries the real name


def test_events_escape_object_names(tmp_path: Path) -> None:
    cluster_file, usage_file = hostile_files(tmp_path)
    config = PlannerConfig()
    cluster = load_cluster(Path(cluster_file), config.gpu_resources)
    result = plan(cluster, load_usage(Path(usage_file)), config, parse_time(NOW, "now"))
    (decision,) = result.decisions
    (victim,) = decision.victims
    for message in (
        report.preemptor_event(decision, {}, True),
        report.victim_event(decision, victim, None),
        report.eviction_failed_event(victim.pod, "refused", "x\ny"),
    ):
        _clean(message)
        assert "\n" not in message
    assert SHOWN in report.preemptor_event(decision, {}, True)


def test_dra_check_text_escapes_object_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dra.yaml"
    path.write_text(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: resource.k8s.io/v1\n  kind: ResourceSlice\n"
        '  metadata: {name: "x\\e[2J\\nforged finding"}\n  spec: {}\n'
    )
    code, out, _ = run_cli(capsys, "dra-check", "--cluster", str(path))
    assert code == 0 and r"ResourceSlice x\x1b[2J\nforged finding" in out
    _clean(out)
    assert len(out.splitlines()) == 2  # the finding and the summary


def test_log_lines_are_escaped_tracebacks_are_not() -> None:
    formatter = PrintableFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "evicting %s", ("ml/a\nINFO forged",), None)
    assert formatter.format(record) == r"INFO evicting ml/a\nINFO forged"
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    text = formatter.format(record)
    assert text.startswith("ERROR failed\nTraceback") and "ValueError: boom" in text


def test_error_messages_escape_object_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, usage = hostile_files(tmp_path)
    entry = f"- {{namespace: ml, name: {HOSTILE}, gpu_activity: 0.0}}\n"
    Path(usage).write_text("pods:\n" + entry + entry)
    code, _, err = run_cli(capsys, "plan", "--cluster", cluster, "--usage", usage, "--now", NOW)
    assert code == 2 and f"ml/{SHOWN}" in err and "listed twice" in err
    _clean(err)
    assert len(err.splitlines()) == 1
