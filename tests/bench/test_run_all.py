"""run_all rewrites only the sections of the benchmarks it ran (no timing here)."""

from __future__ import annotations

from tests.bench.run_all import merge, split_sections

DOC = """# Benchmarks

intro

## Exporter

old exporter figures

## CLI start-up (hand-written)

kept figures

## Reclaim planner

old planner figures
"""


def test_only_the_sections_run_are_replaced_and_the_others_kept() -> None:
    head, old = split_sections(DOC)
    assert head == "# Benchmarks\n\nintro\n\n"
    merged = merge(old, ["## Reclaim planner\n\nnew planner figures", "## Loading\n\nnew loading"])
    assert merged == [
        "## Exporter\n\nold exporter figures",
        "## CLI start-up (hand-written)\n\nkept figures",
        "## Reclaim planner\n\nnew planner figures",
        "## Loading\n\nnew loading",
    ]


def test_a_section_that_fails_to_match_is_never_dropped() -> None:
    _, old = split_sections(DOC)
    assert merge(old, []) == old
