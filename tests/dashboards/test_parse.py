"""Every panel query parses as PromQL (promtool, offline), with template variables substituted."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.dashboards.queries import panel_queries

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")


def check_exprs(exprs: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    """promtool check rules on a file that records each expression: promtool parses every one."""
    rules = [{"record": f"dashboard_query_{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    return subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)


def test_every_panel_query_parses(tmp_path: Path) -> None:
    queries = panel_queries()
    assert len(queries) > 40
    result = check_exprs([q.expr for q in queries], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


def test_a_syntax_error_fails(tmp_path: Path) -> None:
    result = check_exprs(["sum(rate(x[5m])", "up"], tmp_path)
    assert result.returncode != 0
