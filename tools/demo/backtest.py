"""The demo's last part: `gpu-automator backtest` over the demo's own history (docs/demo.md).

Once its stories are told the demo asks the backtest what the policy it ran would have done over the same
time, read back from its Prometheus alone: the GPU Steward series its exporters and rules wrote and the
kube-state-metrics series of its fake cluster (tools/fakes/ksm.py). The PriorityClasses come from a file, as
`kubectl get priorityclasses -o yaml` writes it. Three runs of the real command line: the JSON report (to
set each eviction beside the live automator's), the text table, printed, and the self-contained HTML
report, whose path is printed. An automator without the `backtest` subcommand skips this part, saying so;
a backtest that fails fails the demo.

The history holds the live automator's own eviction: the backtest finds it only at a step between the
moment the policy allows it and the first kube-state-metrics scrape that shows the victim terminating,
which is why the demo steps at the exporters' scrape interval rather than the pass interval.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.fakes.fakesim import rfc3339
from tools.fakes.promserver import ROOT

SUBCOMMAND = "backtest"
REPORT = "backtest.html"
REPORT_JSON = "backtest.json"
CLASSES = "priorityclasses.yaml"


@dataclass(frozen=True)
class Backtest:
    """What the closing backtest did: its table, JSON report and HTML report, or why it was skipped or
    failed."""

    command: tuple[str, ...] = ()
    table: str = ""
    report: Mapping[str, Any] = field(default_factory=dict)  # the JSON report (docs/backtest.md)
    html: Path | None = None
    skipped: str = ""
    failed: str = ""

    @property
    def evictions(self) -> list[Mapping[str, Any]]:
        """The evictions of the (one) replayed policy."""
        policies = self.report.get("policies") or [{}]
        return list(policies[0].get("evictions") or [])

    def lines(self, live: Mapping[str, str]) -> str:
        """What the demo prints of it: the command, the table, each eviction beside what the live automator
        did (`live`: victim "ns/name" -> when it evicted it), the report's path."""
        if self.skipped:
            return f"Backtest over the demo's own history: skipped: {self.skipped}"
        head = (
            "Backtest: what the automator's policy would have done over the demo's own history, read back "
            f"from Prometheus:\n  gpu-automator {' '.join(self.command)}"
        )
        if self.failed:
            return f"{head}\n  FAILED: {self.failed}"
        compared = []
        for e in self.evictions:
            victim = str(e.get("victim"))
            did = (
                f"the live automator did at {live[victim]}"
                if victim in live
                else "the live automator did not"
            )
            compared.append(
                f"  it would have evicted {victim} for {e.get('preemptor')} at {e.get('at')}"
                f"{' (regret)' if e.get('regret') else ''}; {did}"
            )
        missed = [v for v in live if v not in {str(e.get("victim")) for e in self.evictions}]
        compared += [f"  it would not have evicted {v}; the live automator did at {live[v]}" for v in missed]
        beside = ["", "beside the live automator:", *compared] if compared else []
        return "\n".join([head, self.table.rstrip(), *beside, f"  HTML report: {self.html}"])


def write_priority_classes(path: Path, classes: Sequence[Mapping[str, Any]]) -> Path:
    """The PriorityClasses as `kubectl get priorityclasses -o yaml` prints them: a v1 List."""
    items = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", **dict(c)} for c in classes]
    doc = {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _automator(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "automator", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def backtest_help() -> str | None:
    """`gpu-automator backtest --help`, or None when this automator has no such subcommand."""
    try:
        done = _automator(SUBCOMMAND, "--help", timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def run_backtest(
    prometheus_url: str,
    start: float,
    end: float,
    step_seconds: float,
    classes: Path,
    policy: Sequence[tuple[str, str]],
    workdir: Path,
    timeout: float,
) -> Backtest:
    """The backtest of [start, end] in steps of `step_seconds`, with the policy flags the demo's automator
    runs with (those the backtest takes): its JSON and HTML reports under workdir, and its text table."""
    usage = backtest_help()
    if usage is None:
        return Backtest(skipped=f"this gpu-automator has no `{SUBCOMMAND}` subcommand (docs/backtest.md)")
    flags = [part for flag, value in policy if flag in usage for part in (flag, value)]
    command = (
        SUBCOMMAND,
        "--prometheus", prometheus_url,
        "--from", rfc3339(start),
        "--to", rfc3339(end),
        "--step", f"{step_seconds:g}s",
        "--priority-classes", str(classes),
        *flags,
    )  # fmt: skip
    html, report = workdir / REPORT, workdir / REPORT_JSON
    try:
        as_json = _automator(*command, "--output", "json", "--out", str(report), timeout=timeout)
        if as_json.returncode != 0:
            return Backtest(command, failed=_why(as_json))
        parsed = json.loads(report.read_text(encoding="utf-8"))
        text = _automator(*command, "--output", "text", timeout=timeout)
        if text.returncode != 0:
            return Backtest(command, report=parsed, failed=_why(text))
        page = _automator(*command, "--output", "html", "--out", str(html), timeout=timeout)
        if page.returncode != 0 or not html.is_file():
            return Backtest(command, text.stdout, parsed, failed=_why(page))
    except subprocess.TimeoutExpired:
        return Backtest(command, failed=f"not done after {timeout:g} s")
    except (OSError, ValueError) as e:
        return Backtest(command, failed=f"its JSON report {report}: {e}")
    return Backtest(command, text.stdout, parsed, html)


def _why(done: subprocess.CompletedProcess[str]) -> str:
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return f"exit {done.returncode}: " + " / ".join(tail)
