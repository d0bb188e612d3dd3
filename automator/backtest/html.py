"""The backtest's HTML report: one self-contained file (docs/backtest.md), the policy table and three plots
drawn by matplotlib into inline SVG.

Nothing in the page is fetched: no script, no stylesheet, font or image from elsewhere; the SVGs draw their
text as paths (no font is needed) and a Content-Security-Policy forbids every load, so a stray reference is
blocked by the browser rather than sent. Every text from the report (pod, namespace and policy names,
settings, warnings) is HTML-escaped; in the plots it is drawn, never parsed as mathtext.

matplotlib is imported inside `render_html` only: `import automator.backtest` (the command's other outputs,
the service) does not load it.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Timeline = list[tuple[float, int, int, int]]

# Evictions listed per policy; the JSON report (--output json) has all of them.
MAX_EVICTION_ROWS = 500
# The timeline plot, readable at the sweep cap (64 policies over a week at 30 s steps): at most this many
# lines (distinct timelines; policies with equal ones share a line) and points per line. The table above
# the plots lists every policy.
MAX_LINES = 10
MAX_PLOT_POINTS = 1_000
# Everything the page may load: nothing (styles are inline).
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; form-action 'none'"

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1200px;
padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;vertical-align:top}
th{background:#f3f3f3}td.l,th.l{text-align:left}
tr.regret td{background:#fde8e8}
figure{margin:1em 0}figcaption{color:#555;font-size:.9em}
figure svg{max-width:100%;height:auto}
.warn{color:#8a4b00}
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _label(text: str) -> str:
    """A text matplotlib draws as is: `$` would start mathtext."""
    return text.replace("$", r"\$")


def _value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "(none)"
    return "(none)" if value is None else str(value)


def _settings(settings: dict[str, Any], keys: Sequence[str] | None = None) -> str:
    shown = [k for k in settings if keys is None or k in keys]
    return ", ".join(f"{k}={_value(settings[k])}" for k in shown)


def _differing(policies: Sequence[dict[str, Any]]) -> list[str]:
    """The settings whose values differ between the policies (what a sweep varied), in their order."""
    keys = list(dict.fromkeys(k for p in policies for k in p["settings"]))
    return [k for k in keys if len({_value(p["settings"].get(k)) for p in policies}) > 1]


def _policy_table(policies: Sequence[dict[str, Any]]) -> str:
    differing = _differing(policies)
    heading = "settings that differ" if differing else "settings"
    head = (
        f"<tr><th class='l'>policy</th><th class='l'>{heading}</th><th>evictions</th><th>regret</th>"
        "<th>GPU-hours reclaimed</th><th>wait saved (h)</th><th>steps</th><th>steps without data</th></tr>"
    )
    rows = []
    for p in policies:
        t = p["totals"]
        settings = _settings(p["settings"], differing) if differing else "as below, per policy"
        rows.append(
            f"<tr><td class='l'>{_e(p['name'])}</td><td class='l'>{_e(settings)}</td>"
            f"<td>{_e(t['evictions'])}</td><td>{_e(t['regret_evictions'])}</td>"
            f"<td>{t['gpu_hours_reclaimed']:.2f}</td><td>{t['wait_saved_seconds'] / 3600:.2f}</td>"
            f"<td>{_e(t['steps'])}</td><td>{_e(t['steps_without_data'])}</td></tr>"
        )
    return f"<table id='policies'>{head}{''.join(rows)}</table>"


def _namespace_table(by_namespace: dict[str, dict[str, Any]]) -> str:
    if not by_namespace:
        return ""
    head = (
        "<tr><th class='l'>namespace</th><th>evictions</th><th>regret</th><th>GPU-hours reclaimed</th></tr>"
    )
    rows = "".join(
        f"<tr><td class='l'>{_e(ns)}</td><td>{_e(v['evictions'])}</td><td>{_e(v['regret_evictions'])}</td>"
        f"<td>{v['gpu_hours_reclaimed']:.2f}</td></tr>"
        for ns, v in by_namespace.items()
    )
    return f"<table class='namespaces'>{head}{rows}</table>"


def _after(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.0f} s"


def _eviction_table(evictions: Sequence[dict[str, Any]]) -> str:
    if not evictions:
        return "<p>No evictions.</p>"
    head = (
        "<tr><th class='l'>at</th><th class='l'>victim</th><th>GPUs</th><th class='l'>node</th>"
        "<th class='l'>preemptor</th><th class='l'>regret</th><th>busy again after</th></tr>"
    )
    shown = evictions[:MAX_EVICTION_ROWS]
    rows = "".join(
        f"<tr{' class=regret' if e['regret'] else ''}><td class='l'>{_e(e['at'])}</td>"
        f"<td class='l'>{_e(e['victim'])}</td><td>{_e(e['gpus'])}</td><td class='l'>{_e(e['node'])}</td>"
        f"<td class='l'>{_e(e['preemptor'])}</td><td class='l'>{'yes' if e['regret'] else 'no'}</td>"
        f"<td>{_e(_after(e['busy_again_after_seconds']))}</td></tr>"
        for e in shown
    )
    more = ""
    if len(evictions) > len(shown):
        more = f"<p>... and {len(evictions) - len(shown)} more (all are in <code>--output json</code>).</p>"
    return f"<table class='evictions'>{head}{rows}</table>{more}"


def _svg(fig: Figure, prefix: str) -> str:
    """The figure as an inline <svg> element, its ids prefixed so that several plots share one page."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]  # the XML declaration and DOCTYPE have no place inside HTML
    text = re.sub(r'\bid="', f'id="{prefix}', text)
    text = text.replace("url(#", f"url(#{prefix}").replace('href="#', f'href="#{prefix}')
    return text


def _times(timeline: Timeline) -> list[datetime]:
    return [datetime.fromtimestamp(t, tz=UTC) for t, *_ in timeline]


def _downsampled(timeline: Timeline) -> Timeline:
    """At most MAX_PLOT_POINTS points: each bucket of steps at its first time, with its highest idle GPUs
    and the sum of its evictions and regrets (so the cumulative counts stay exact at each point)."""
    if len(timeline) <= MAX_PLOT_POINTS:
        return timeline
    size = -(-len(timeline) // MAX_PLOT_POINTS)
    out: Timeline = []
    for i in range(0, len(timeline), size):
        part = timeline[i : i + size]
        out.append((part[0][0], max(p[1] for p in part), sum(p[2] for p in part), sum(p[3] for p in part)))
    return out


def _lines(
    names: Sequence[str], timelines: dict[str, Timeline]
) -> tuple[list[tuple[int, str, Timeline]], int]:
    """One line per distinct timeline (policies whose timelines are equal share it), at most MAX_LINES:
    (colour index, label, timeline) of each, and how many distinct timelines were left out."""
    groups: dict[tuple[tuple[float, int, int, int], ...], list[int]] = {}
    for i, name in enumerate(names):
        found = timelines.get(name)
        if found:
            groups.setdefault(tuple(_downsampled(found)), []).append(i)
    lines = []
    for points, members in list(groups.items())[:MAX_LINES]:
        label = names[members[0]]
        if len(members) > 1:
            label += f" (and {len(members) - 1} more with the same timeline)"
        lines.append((members[0], label, list(points)))
    return lines, max(0, len(groups) - MAX_LINES)


def _timeline_figure(lines: Sequence[tuple[int, str, Timeline]]) -> Figure:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 7.5), layout="constrained")
    idle, events = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    for i, label, timeline in lines:
        color = f"C{i % 10}"
        when = _times(timeline)
        idle.plot(when, [p[1] for p in timeline], color=color, linewidth=1.2, label=_label(label))
        evicted = regret = 0
        total, regrets = [], []
        for _, _, ev, rg in timeline:
            evicted += ev
            regret += rg
            total.append(evicted)
            regrets.append(regret)
        events.step(when, total, where="post", color=color, linewidth=1.2)
        events.step(when, regrets, where="post", color=color, linestyle="--", linewidth=1.2)
        marks = [(w, r) for w, r, p in zip(when, regrets, timeline, strict=True) if p[3]]
        if marks:
            events.plot(*zip(*marks, strict=True), "x", color=color, markersize=6)
    idle.set_ylabel("idle GPUs")
    idle.set_title("Idle GPUs at each step (after the policy's evictions)")
    events.set_ylabel("evictions (cumulative)")
    events.set_title("Evictions (solid) and regret evictions (dashed, x where one happened)")
    events.set_xlabel("time (UTC)")
    for ax in (idle, events):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    if lines:  # one entry per line (a colour), below both plots: it never narrows them
        fig.legend(loc="outside lower center", ncols=min(2, len(lines)), fontsize="small")
    return fig


def _sweep_figure(policies: Sequence[dict[str, Any]]) -> Figure:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    hours = [p["totals"]["gpu_hours_reclaimed"] for p in policies]
    regret = [p["totals"]["regret_evictions"] for p in policies]
    if len(policies) > 1:
        ax.plot(hours, regret, color="0.7", linewidth=1, zorder=1)
    for i, p in enumerate(policies):
        ax.scatter([hours[i]], [regret[i]], color=f"C{i % 10}", s=50, zorder=3, clip_on=False)
        ax.annotate(
            _label(p["name"]), (hours[i], regret[i]), textcoords="offset points", xytext=(6, 6),
            fontsize="small",
        )  # fmt: skip
    ax.set_xlabel("GPU-hours reclaimed")
    ax.set_ylabel("regret evictions")
    ax.set_title("GPU-hours reclaimed against regret, per policy")
    ax.grid(True, alpha=0.3)
    ax.set_xlim(left=0, right=max([*hours, 1.0]) * 1.15)
    ax.set_ylim(bottom=0, top=max([*regret, 1]) * 1.15)
    return fig


def _plots(policies: Sequence[dict[str, Any]], timelines: dict[str, Timeline]) -> str:
    import matplotlib

    names = [p["name"] for p in policies]
    # Same bytes for the same report (hashsalt: the clip-path ids); text as paths: the page needs no font.
    with matplotlib.rc_context({"svg.hashsalt": "gpu-steward-backtest", "svg.fonttype": "path"}):
        parts = []
        lines, left_out = _lines(names, timelines)
        if lines:
            fig = _timeline_figure(lines)
            more = (
                f" {left_out} more distinct timelines are not drawn (the table has every policy)."
                if left_out
                else ""
            )
            parts.append(
                f"<figure id='timeline'>{_svg(fig, 'timeline-')}<figcaption>Idle GPUs, evictions and regret "
                "at each step, per policy (policies with the same timeline share a line; over a long "
                "window each point is the highest idle count of its interval). A step without data shows "
                f"0 idle GPUs and plans nothing.{more}</figcaption></figure>"
            )
        else:
            parts.append("<p id='timeline'>No steps: nothing to plot over time.</p>")
        fig = _sweep_figure(policies)
        parts.append(
            f"<figure id='sweep'>{_svg(fig, 'sweep-')}<figcaption>Each point is one policy (a value of a "
            "--sweep): further right reclaims more, higher interrupts more work.</figcaption></figure>"
        )
    return "".join(parts)


def render_html(report: dict[str, Any], timelines: dict[str, list[tuple[float, int, int, int]]]) -> str:
    """The report (the JSON contract) and each policy's timeline (Unix time, idle GPUs, evictions, regret
    evictions at each step) as one self-contained HTML page."""
    policies: list[dict[str, Any]] = report["policies"]
    title = f"GPU Steward backtest {report['from']} .. {report['to']}"
    sections = [
        f"<h1>{_e(title)}</h1>",
        f"<p>Step {_e(report['step_seconds'])} s, look-ahead {_e(report['lookahead_seconds'])} s, "
        f"{len(policies)} {'policy' if len(policies) == 1 else 'policies'}. What each number means: "
        "docs/backtest.md.</p>",
        "<h2>Policies</h2>",
        _policy_table(policies),
        "<h2>Plots</h2>",
        _plots(policies, timelines),
    ]
    if report["warnings"]:
        items = "".join(f"<li>{_e(w)}</li>" for w in report["warnings"])
        sections.append(f"<h2>Warnings</h2><ul class='warn' id='warnings'>{items}</ul>")
    for p in policies:
        sections.append(f"<h2>Policy {_e(p['name'])}</h2>")
        sections.append(f"<p class='settings'>Settings: {_e(_settings(p['settings']))}.</p>")
        sections.append(_namespace_table(p["by_namespace"]))
        sections.append(_eviction_table(p["evictions"]))
    head = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head>"
    )
    return f"{head}<body>{''.join(sections)}</body></html>\n"
