"""bench_records' section: verdicts follow the figures (no timing here)."""

from __future__ import annotations

from tests.bench.bench_records import Measured, Pass, Run, best, ratio_line, section


def _measured(first_s: float, unchanged_s: float, plan_cpu: float, load_cpu: float) -> Measured:
    return Measured(
        first=Pass(first_s - 1.0, 1.0, 40_500, 40_500, 10),
        unchanged=Pass(unchanged_s - 1.0, 1.0, 40_500, 0, 10),
        counts={"Node": 5000, "Pod": 40_500},
        plan=Run(plan_cpu, plan_cpu + 0.1),
        load=Run(load_cpu, load_cpu + 0.1),
        dump_mb=111.0,
        load_before=1.0,
        load_after=2.0,
    )


def test_the_verdicts_are_computed_from_the_ratios() -> None:
    text = section(_measured(first_s=4.0, unchanged_s=1.8, plan_cpu=3.0, load_cpu=2.5))
    assert "Measured: 0.45x: **met**." in text  # 1.8 / 4.0, goal 0.5
    assert "Measured: 1.20x: **NOT met**." in text  # 3.0 / 2.5, goal 1.0
    text = section(_measured(first_s=4.0, unchanged_s=2.4, plan_cpu=2.0, load_cpu=2.5))
    assert "Measured: 0.60x: **NOT met**." in text
    assert "Measured: 0.80x: **met**." in text


def test_a_ratio_equal_to_its_goal_meets_it() -> None:
    assert ratio_line("x", 0.5, 0.5).endswith("**met**.")
    assert ratio_line("x", 0.51, 0.5).endswith("**NOT met**.")


def test_the_best_pass_is_the_least_total_with_its_own_parts() -> None:
    slow_read, slow_plan = Pass(0.5, 2.0, 1, 1, 1), Pass(1.0, 1.0, 1, 1, 1)
    assert best([slow_read, slow_plan]) is slow_plan


def test_the_section_has_the_heading_run_all_replaces_and_the_command_to_run_it_alone() -> None:
    text = section(_measured(4.0, 1.8, 3.0, 2.5))
    assert text.startswith("## Typed records")
    assert "python -m tests.bench.run_all bench_records" in text
    assert (
        "| first (a new adapter: empty record cache) | 40,500 | 40,500 | 3.00 s | 1.00 s | 4.00 s | 10 |"
        in text
    )
