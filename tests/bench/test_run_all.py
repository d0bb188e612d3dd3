"""run_all replaces only the marked sections of the benchmarks it ran; everything else survives."""

from __future__ import annotations

import pytest

from tests.bench.run_all import BENCHES, DOC, merge_sections

DOC_TEXT = """# Benchmarks

Header by hand.

<!-- bench:a -->
## A
old a
<!-- /bench:a -->

## CLI start-up (by hand)

kept

<!-- bench:b -->
## B
old b
<!-- /bench:b -->
"""


def test_only_the_sections_run_are_replaced() -> None:
    out = merge_sections(DOC_TEXT, {"b": "## B\nnew b\n"})
    assert "old b" not in out and "new b" in out
    assert "old a" in out and "## CLI start-up (by hand)\n\nkept" in out and "Header by hand." in out
    assert out.index("## A") < out.index("## CLI start-up") < out.index("## B")


def test_a_section_without_markers_is_appended_and_then_replaced() -> None:
    once = merge_sections(DOC_TEXT, {"c": "## C\nfirst"})
    assert once.rstrip().endswith("<!-- bench:c -->\n## C\nfirst\n<!-- /bench:c -->")
    twice = merge_sections(once, {"c": "## C\nsecond"})
    assert "first" not in twice and twice.count("<!-- bench:c -->") == 1
    assert twice.replace("second", "first") == once


def test_a_replacement_with_backslashes_is_taken_literally() -> None:
    assert "\\1 \\g<0>" in merge_sections(DOC_TEXT, {"a": "\\1 \\g<0>"})


@pytest.mark.parametrize("broken", ["<!-- bench:a -->\nx\n", "x\n<!-- /bench:a -->\n"])
def test_an_unpaired_marker_is_an_error(broken: str) -> None:
    with pytest.raises(ValueError, match="unpaired"):
        merge_sections(broken, {"a": "y"})


def test_the_real_document_marks_each_benchmark_section_once_and_keeps_the_cli_section() -> None:
    text = DOC.read_text()
    for module in BENCHES:
        assert text.count(f"<!-- bench:{module} -->") == 1, module
        assert text.count(f"<!-- /bench:{module} -->") == 1, module
    rerun = merge_sections(text, {m: "## replaced" for m in BENCHES})
    assert "## CLI start-up" in rerun and rerun.startswith("# Benchmarks")
