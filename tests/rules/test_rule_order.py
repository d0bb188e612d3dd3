"""Finding 8 of issue 13: no rule may depend on the order of the rules in its group.

Prometheus' `concurrent-rule-eval` feature (2.53+, 3.x) runs the rules that read no series of their own
group first, whatever their place in the file. Every promtool suite is rerun here on a copy of the rules
reordered that way and must give the same answers.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "rules" / "gpu-steward.yaml"
# The suites that load the recording rules (automator.test.yaml tests alerts only).
SUITES = [
    p
    for p in sorted((REPO / "tests" / "rules").glob("*.test.yaml"))
    if "- ../../rules/gpu-steward.yaml" in p.read_text()
]


def _reads(expr: str, names: set[str]) -> set[str]:
    tokens = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return tokens & names


def concurrent_order(group: dict[str, Any]) -> list[dict[str, Any]]:
    """The rules of `group` as concurrent evaluation schedules them: independent rules first."""
    rules: list[dict[str, Any]] = group["rules"]
    recorded = {r["record"] for r in rules if "record" in r}
    independent = [r for r in rules if not _reads(r["expr"], recorded)]
    return independent + [r for r in rules if r not in independent]


def test_reordering_moves_rules() -> None:
    # The check below only means something if the reordering changes the file.
    doc = yaml.safe_load(RULES.read_text())
    assert any(concurrent_order(g) != g["rules"] for g in doc["groups"])


@pytest.mark.integration  # a promtool process per suite: `make test`, not `make unit`
@pytest.mark.parametrize("suite", SUITES, ids=lambda p: p.name)
def test_suite_passes_with_independent_rules_first(suite: Path, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not installed (make deps installs Debian's prometheus)")
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        group["rules"] = concurrent_order(group)
    reordered = tmp_path / "reordered.yaml"
    reordered.write_text(yaml.safe_dump(doc, sort_keys=False))
    # Text, not a YAML round trip: PyYAML would read values such as 0x60 as hexadecimal numbers.
    text = suite.read_text()
    assert "- ../../rules/gpu-steward.yaml" in text, suite.name
    text = text.replace("- ../../rules/gpu-steward.yaml", f"- {reordered}")
    text = text.replace("- ../../alerts/", f"- {REPO / 'alerts'}/")
    copy = tmp_path / suite.name
    copy.write_text(text)
    proc = subprocess.run([promtool, "test", "rules", str(copy)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
