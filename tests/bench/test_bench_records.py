"""bench_records' section: verdicts follow the figures (no timing here)."""

from __future__ import annotations

from tests.bench.bench_records import Measured, Pass, Run, best, least, ratio_line, section


def _measured(
    first_s: list[float], unchanged_s: list[float], plan_cpu: list[float], load_cpu: list[float]
) -> Measured:
    return Measured(
        firsts=[Pass(s - 1.0, 1.0, 40_500, 40_500, 10) for s in first_s],
        unchanged=[Pass(s - 1.0, 1.0, 40_500, 0, 10) for s in unchanged_s],
        counts={"Node": 5000, "Pod": 40_500},
        plans=[Run(s, s + 0.1) for s in plan_cpu],
        loads=[Run(s, s + 0.1) for s in load_cpu],
        dump_mb=111.0,
        with_memo=[0.5, 0.45],
        without_memo=[0.6, 0.55],
        load_before=1.0,
        load_after=2.0,
    )


def test_the_verdicts_are_the_ratios_of_the_best_of_each_side() -> None:
    text = section(_measured([4.0, 5.0], [2.4, 1.8], [3.0, 3.6], [2.5, 3.0]))
    assert "The best of each side: 0.45x, **met**." in text  # 1.8 / 4.0, goal 0.5
    assert "The best of each side: 1.20x, **NOT met**." in text  # 3.0 / 2.5, goal 1.0
    # the rounds: 2.4 / 4.0 and 1.8 / 5.0; 3.0 / 2.5 and 3.6 / 3.0
    assert (
        "Round by round (each side against the other side of its round): 0.36x to 0.60x, median 0.48x."
        in text
    )
    assert "1.20x to 1.20x, median 1.20x." in text
    # 0.45 / 0.55, goal 0.9; the rounds 0.5 / 0.6 and 0.45 / 0.55
    assert (
        "decoding with the memo against without it at most 0.9x. The best of each side: 0.82x, **met**."
        in text
    )
    assert "0.82x to 0.83x, median 0.83x." in text
    text = section(_measured([4.0], [2.4], [2.0], [2.5]))
    assert "The best of each side: 0.60x, **NOT met**." in text
    assert "The best of each side: 0.80x, **met**." in text


def test_a_ratio_equal_to_its_goal_meets_it() -> None:
    assert ratio_line("x", 0.5, 0.5).endswith("**met**.")
    assert ratio_line("x", 0.51, 0.5).endswith("**NOT met**.")


def test_the_best_pass_is_the_least_total_with_its_own_parts() -> None:
    slow_read, slow_plan = Pass(0.5, 2.0, 1, 1, 1), Pass(1.0, 1.0, 1, 1, 1)
    assert best([slow_read, slow_plan]) is slow_plan
    assert least([Run(2.0, 2.5), Run(2.2, 2.3)]) == Run(2.0, 2.3)


def test_the_section_has_the_heading_run_all_replaces_and_the_command_to_run_it_alone() -> None:
    text = section(_measured([4.0], [1.8], [3.0], [2.5]))
    assert text.startswith("## Typed records")
    assert "python -m tests.bench.run_all bench_records" in text
    assert (
        "| first (a new adapter: empty record cache) | 40,500 | 40,500 | 3.00 s | 1.00 s | 4.00 s | 10 |"
        in text
    )
