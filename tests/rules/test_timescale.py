"""The time-compressed rule copy of the portability test scales every time and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward_common import series
from tests.rules.timescale import scale_expr, scaled_rules

ROOT = Path(__file__).resolve().parents[2]


def test_ranges_offsets_and_time_constants_scale_and_the_rest_stays() -> None:
    expr = (
        "max_over_time(x[29s999ms] offset 1s) + last_over_time(y[5m]) - z offset 24h1s "
        "+ (a >= 60) * (b <= bool 120) / 3600 + (c <= bool 0.05) * 2"
    )
    assert scale_expr(expr, 10) == (
        "max_over_time(x[2s999ms] offset 1s) + last_over_time(y[30s]) - z offset 2h24m1s "
        "+ (a >= 6) * (b <= bool 12) / 360 + (c <= bool 0.05) * 2"
    )


def test_an_unknown_large_constant_fails_the_generation() -> None:
    with pytest.raises(ValueError, match="unknown constant 86400"):
        scale_expr("x / 86400", 10)


def test_the_rules_scale_to_a_tenth() -> None:
    doc = scaled_rules(ROOT / "rules" / "gpu-steward.yaml", 10)
    intervals = {g["name"]: g["interval"] for g in doc["groups"]}
    assert intervals == {
        series.FAST_GROUP: f"{series.RULE_INTERVAL_SECONDS // 10}s",
        series.SLOW_GROUP: f"{series.SLOW_INTERVAL_SECONDS // 10}s",
    }
    exprs = "\n".join(r["expr"] for g in doc["groups"] for r in g["rules"])
    assert "[29s999ms]" not in exprs and "[2s999ms]" in exprs
    assert f">= {series.FRESHNESS_SECONDS // 10})" in exprs
