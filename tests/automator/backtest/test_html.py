"""The backtest's HTML report (automator/backtest/html.py): self-contained, escaped, and its plots drawn.

The page is opened in headless Chromium (tests/browser.py, over the DevTools protocol): every request it
makes and every console message are recorded, and screenshots of the plots are read pixel by pixel.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from automator.backtest.html import render_html
from tests.browser import chromium_binary, open_page

F = 1_777_636_800  # 2026-05-01T12:00:00Z
STEP = 300
HOSTILE = "<script>alert('x')</script>"
MATHTEXT = r"$\frac{$"  # a parse error if it were read as mathtext

# matplotlib's default colours C0.. C2: each policy's lines and point
COLORS = ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E), (0x2C, 0xA0, 0x2C))

needs_chromium = pytest.mark.skipif(
    chromium_binary() is None,
    reason="headless Chromium not installed: `make chromium-bin` installs Debian's chromium",
)


def _stamp(t: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _eviction(at: int, victim: str, regret: bool) -> dict[str, Any]:
    return {
        "at": _stamp(at),
        "victim": victim,
        "gpus": 2,
        "node": "gpu-node-1",
        "preemptor": "research/train-big",
        "regret": regret,
        "busy_again_after_seconds": 600.0 if regret else None,
    }


def sample(
    names: tuple[str, ...] = ("threshold=0.01", "threshold=0.05", "threshold=0.1"),
) -> tuple[dict[str, Any], dict[str, list[tuple[float, int, int, int]]]]:
    """A sweep of three policies over 4 hours: policy i evicts i+1 pods, i of them regret."""
    steps = 48
    policies, timelines = [], {}
    for i, name in enumerate(names):
        evictions = [_eviction(F + STEP * (10 + 5 * k), f"team-a/{HOSTILE}-{k}", k < i) for k in range(i + 1)]
        policies.append(
            {
                "name": name,
                "settings": {"gpu-idle-threshold": 0.01 * (i + 1), "note": HOSTILE},
                "evictions": evictions,
                "totals": {
                    "evictions": i + 1,
                    "regret_evictions": i,
                    "gpu_hours_reclaimed": 3.0 * (i + 1),
                    "wait_saved_seconds": 1800.0 * (i + 1),
                    "steps": steps,
                    "steps_without_data": 2,
                },
                "by_namespace": {
                    "team-a": {
                        "evictions": i + 1,
                        "regret_evictions": i,
                        "gpu_hours_reclaimed": 3.0 * (i + 1),
                    }
                },
            }
        )
        marks = {10 + 5 * k: k < i for k in range(i + 1)}
        timelines[name] = [
            (float(F + STEP * s), 20 + 4 * i - s % 8, int(s in marks), int(marks.get(s, False)))
            for s in range(steps)
        ]
    report = {
        "from": _stamp(F),
        "to": _stamp(F + STEP * steps),
        "step_seconds": STEP,
        "lookahead_seconds": 1800,
        "policies": policies,
        "warnings": [f"a warning naming {HOSTILE}"],
    }
    return report, timelines


def test_text_is_escaped() -> None:
    report, timelines = sample()
    page = render_html(report, timelines)
    assert "<script" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;-0" in page  # the victim's name, escaped
    assert "a warning naming &lt;script&gt;" in page


def test_policy_table_shows_what_the_sweep_varied() -> None:
    """The table names the settings that differ between the policies; each policy's section all of them."""
    report, timelines = sample()
    page = render_html(report, timelines)
    table = page[page.index("<table id='policies'>") :]
    table = table[: table.index("</table>")]
    assert "gpu-idle-threshold=0.01<" in table and "gpu-idle-threshold=0.03<" in table
    assert "note=" not in table
    assert page.count("Settings: gpu-idle-threshold=") == 3
    single, _ = sample(("only",))
    assert "as below, per policy" in render_html(single, {})


def test_self_contained_by_construction() -> None:
    """Nothing refers outside the page: no src, no link, no @import; href and url() only to the page's own
    ids; and a Content-Security-Policy that forbids every load."""
    page = render_html(*sample())
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b", page, re.IGNORECASE)
    assert not re.search(r"\bsrc\s*=|@import", page, re.IGNORECASE)
    for ref in re.findall(r'href="([^"]*)"', page) + re.findall(r"url\(([^)]*)\)", page):
        assert ref.startswith("#"), ref
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "ids repeated across the plots"
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_deterministic() -> None:
    report, timelines = sample()
    assert render_html(report, timelines) == render_html(report, timelines)


def test_names_are_drawn_not_parsed() -> None:
    """A policy named like mathtext renders (drawn as it is) instead of failing."""
    report, timelines = sample((MATHTEXT, "b", "c"))
    assert "&lt;" in render_html(report, timelines)


def test_no_steps_no_timeline_plot() -> None:
    report, _ = sample()
    page = render_html(report, {})
    assert "No steps: nothing to plot over time." in page
    assert "<figure id='sweep'>" in page


def test_import_does_not_load_matplotlib() -> None:
    """Every module of automator.backtest imports without matplotlib (only render_html loads it)."""
    code = (
        "import importlib, pkgutil, sys, automator.backtest as b\n"
        "for m in pkgutil.iter_modules(b.__path__): importlib.import_module(f'automator.backtest.{m.name}')\n"
        "import automator.cli\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'matplotlib'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _pixels(png: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        rgb = image.convert("RGB")
        raw = rgb.tobytes()
        return rgb.width, rgb.height, [(raw[i], raw[i + 1], raw[i + 2]) for i in range(0, len(raw), 3)]


def _near(pixels: list[tuple[int, int, int]], color: tuple[int, int, int], tolerance: int = 24) -> int:
    return sum(1 for p in pixels if all(abs(a - b) <= tolerance for a, b in zip(p, color, strict=True)))


def _figure_boxes(page: Any) -> dict[str, dict[str, float]]:
    boxes: dict[str, dict[str, float]] = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('figure')].map(f => {"
        " const r = f.querySelector('svg').getBoundingClientRect();"
        " return [f.id, {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}]; }))"
    )
    return boxes


@needs_chromium
@pytest.mark.integration
def test_renders_without_errors_or_requests(tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    path.write_text(render_html(*sample()))
    with open_page(path) as page:
        assert page.requests == [path.resolve().as_uri()], "the page requested something besides itself"
        assert page.errors() == []
        # the hostile names are text in the page, not elements
        assert page.evaluate("document.querySelectorAll('script').length") == 0
        victims = page.evaluate(
            "[...document.querySelectorAll('table.evictions td:nth-child(2)')].map(td => td.textContent)"
        )
        assert f"team-a/{HOSTILE}-0" in victims
        rows = page.evaluate("document.querySelectorAll('#policies tr').length")
        assert rows == 4  # heading and three policies


@needs_chromium
@pytest.mark.integration
def test_plots_are_drawn(tmp_path: Path) -> None:
    """Screenshots of both plots: each has its size on the page, is not blank, and shows each policy's
    colour; a policy without a timeline is absent from the timeline plot but present in the sweep."""
    report, timelines = sample()
    del timelines[report["policies"][2]["name"]]
    path = tmp_path / "report.html"
    path.write_text(render_html(report, timelines))
    with open_page(path) as page:
        boxes = _figure_boxes(page)
        assert set(boxes) == {"timeline", "sweep"}
        shots = {}
        for name, box in boxes.items():
            assert box["width"] > 400 and box["height"] > 300, (name, box)
            width, height, pixels = _pixels(page.screenshot(box))
            assert (width, height) == (round(box["width"]), round(box["height"]))
            shots[name] = pixels
    for name, pixels in shots.items():
        ink = sum(1 for p in pixels if min(p) < 200)
        assert ink > 0.01 * len(pixels), f"{name}: blank ({ink} of {len(pixels)} pixels drawn)"
    timeline, sweep = shots["timeline"], shots["sweep"]
    assert _near(timeline, COLORS[0]) > 200 and _near(timeline, COLORS[1]) > 200
    assert _near(timeline, COLORS[2]) == 0  # the policy without a timeline
    for color in COLORS:
        assert _near(sweep, color) > 50  # one whole point per policy


@needs_chromium
@pytest.mark.integration
def test_harness_sees_requests_and_errors(tmp_path: Path) -> None:
    """The checks above can fail: a page that loads an image and logs an error is caught doing both."""
    path = tmp_path / "bad.html"
    path.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>bad</title></head><body>"
        "<img src='http://127.0.0.1:9/x.png'><script>console.error('boom')</script></body></html>"
    )
    with open_page(path) as page:
        assert "http://127.0.0.1:9/x.png" in page.requests
        assert any("boom" in e for e in page.errors())


def _sweep_cap() -> tuple[dict[str, Any], dict[str, list[tuple[float, int, int, int]]]]:
    """64 policies (the sweep cap) over a week at 30 s steps, every timeline distinct but 8 shared."""
    from automator.backtest.cli import MAX_POLICIES

    steps = 7 * 86_400 // 30 + 1
    names = tuple(f"threshold=0.{i:02d}" for i in range(MAX_POLICIES))
    report, _ = sample(names)
    timelines = {
        name: [(float(F + 30 * s), (s // (1 + j)) % 9, int(s % 997 == j), 0) for s in range(steps)]
        for j, name in ((min(i, 56), name) for i, name in enumerate(names))
    }
    return report, timelines


def test_the_page_stays_small_at_the_sweep_cap() -> None:
    report, timelines = _sweep_cap()
    page = render_html(report, timelines)
    assert len(page) < 3_000_000, f"{len(page):,} bytes"
    assert page.count("<tr><td class='l'>threshold=0.") == 64  # the table still lists every policy
    assert "more distinct timelines are not drawn" in page


def test_the_timeline_keeps_its_width_at_the_sweep_cap() -> None:
    """The legend is one entry per drawn line, below the plots: it never squeezes them."""
    from automator.backtest.html import MAX_LINES, MAX_PLOT_POINTS, _lines, _timeline_figure

    report, timelines = _sweep_cap()
    lines, left_out = _lines([p["name"] for p in report["policies"]], timelines)
    assert len(lines) == MAX_LINES and left_out == 57 - MAX_LINES  # 56 distinct, the last 8 share one
    assert all(len(points) <= MAX_PLOT_POINTS for _, _, points in lines)
    fig = _timeline_figure(lines)
    fig.draw_without_rendering()
    for ax in fig.axes:
        assert ax.get_position().width > 0.8
    legend = fig.legends[0]
    assert len(legend.get_texts()) == MAX_LINES


def test_policies_with_equal_timelines_share_a_line() -> None:
    from automator.backtest.html import _lines

    _, timelines = sample(("a", "b", "c"))
    timelines["c"] = list(timelines["a"])
    lines, left_out = _lines(["a", "b", "c"], timelines)
    assert [(i, label) for i, label, _ in lines] == [
        (0, "a (and 1 more with the same timeline)"),
        (1, "b"),
    ]
    assert left_out == 0
