"""A backtest's report: the JSON contract (docs/backtest.md), its text form, and the timelines the HTML
report plots. Pure.

JSON: {"from", "to", "step_seconds", "lookahead_seconds", "policies": [{"name", "settings", "evictions":
[{"at", "victim", "gpus", "node", "preemptor", "regret", "busy_again_after_seconds"}], "totals":
{"evictions", "regret_evictions", "gpu_hours_reclaimed", "wait_saved_seconds", "steps",
"steps_without_data"}, "by_namespace": {NS: {"evictions", "regret_evictions", "gpu_hours_reclaimed"}}}],
"warnings": [...]}. Times are RFC 3339 in UTC with whole seconds ("2026-05-01T12:00:00Z"); by_namespace is
keyed by the victims' namespace.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from automator.backtest.replay import Replay, gpu_hours
from automator.objects.resources import rfc3339
from steward_common.printable import printable, printable_lines

# Warnings repeated per step are cut to this many, then counted.
MAX_WARNINGS = 20


def _time(t: float) -> str:
    return rfc3339(datetime.fromtimestamp(t, tz=UTC))


def _round(x: float) -> float:
    return round(x, 6)


def policy_json(replay: Replay) -> dict[str, Any]:
    evictions = [
        {
            "at": _time(e.at),
            "victim": str(e.victim),
            "gpus": e.gpus,
            "node": e.node,
            "preemptor": str(e.preemptor),
            "regret": e.regret,
            "busy_again_after_seconds": None if e.busy_again_after is None else _round(e.busy_again_after),
            **({"gang": e.gang} if e.gang is not None else {}),
        }
        for e in replay.evictions
    ]
    by_namespace: dict[str, dict[str, Any]] = {}
    hours = 0.0
    units: set[tuple[float, str]] = set()  # an evicted victim gang is one eviction of its members
    for e in replay.evictions:
        reclaimed = gpu_hours(e.gpus, e.at, e.ended if e.ended is not None else e.at)
        hours += reclaimed
        ns = by_namespace.setdefault(
            e.victim.namespace, {"evictions": 0, "regret_evictions": 0, "gpu_hours_reclaimed": 0.0}
        )
        unit = (e.at, e.gang if e.gang is not None else str(e.victim))
        if unit not in units:
            units.add(unit)
            ns["evictions"] += 1
            ns["regret_evictions"] += int(e.regret)
        ns["gpu_hours_reclaimed"] += reclaimed
    for ns in by_namespace.values():
        ns["gpu_hours_reclaimed"] = _round(ns["gpu_hours_reclaimed"])
    return {
        "name": replay.policy.name,
        "settings": dict(replay.policy.settings),
        "evictions": evictions,
        "totals": {
            "evictions": len(units),
            **({"evicted_pods": len(evictions)} if len(units) != len(evictions) else {}),
            "regret_evictions": sum(ns["regret_evictions"] for ns in by_namespace.values()),
            "gpu_hours_reclaimed": _round(hours),
            "wait_saved_seconds": _round(sum(w.saved or 0.0 for w in replay.waits)),
            "steps": replay.steps,
            "steps_without_data": replay.steps_without_data,
            # With notice (--notice-seconds > 0): victims given notice, and notices withdrawn by reason (a
            # victim busy again within its notice is `busy`, not an eviction).
            **(
                {
                    "notices": replay.notices_given,
                    "notices_withdrawn": sum(replay.notices_withdrawn.values()),
                    "notices_withdrawn_by_reason": dict(sorted(replay.notices_withdrawn.items())),
                }
                if replay.policy.config.notice_seconds > 0
                else {}
            ),
        },
        "by_namespace": dict(sorted(by_namespace.items())),
    }


def _cut(warnings: Sequence[str]) -> list[str]:
    unique = list(dict.fromkeys(warnings))
    if len(unique) <= MAX_WARNINGS:
        return unique
    return [*unique[:MAX_WARNINGS], f"... and {len(unique) - MAX_WARNINGS} more warnings"]


def report_json(
    start: int, end: int, step: int, lookahead: int, replays: Sequence[Replay], warnings: Sequence[str]
) -> dict[str, Any]:
    per_step = [w for r in replays for w in r.warnings]
    return {
        "from": _time(start),
        "to": _time(end),
        "step_seconds": step,
        "lookahead_seconds": lookahead,
        "policies": [policy_json(r) for r in replays],
        "warnings": [*warnings, *_cut(per_step)],
    }


def timelines(replays: Sequence[Replay]) -> dict[str, list[tuple[float, int, int, int]]]:
    """Per policy name: (Unix time, idle GPUs, evictions, regret evictions) at each step."""
    return {r.policy.name: list(r.timeline) for r in replays}


_COLUMNS = ("policy", "evictions", "regret", "GPU-hours", "wait saved (h)", "steps", "no data")


def report_text(report: dict[str, Any]) -> str:
    """One table of every policy's totals (a sweep reads off it), then per policy its evictions by
    namespace and its regret evictions by name. Every character that is not printable is escaped."""
    rows = [_COLUMNS]
    for p in report["policies"]:
        t = p["totals"]
        rows.append(
            (
                printable(p["name"]),
                str(t["evictions"]),
                str(t["regret_evictions"]),
                f"{t['gpu_hours_reclaimed']:.2f}",
                f"{t['wait_saved_seconds'] / 3600:.2f}",
                str(t["steps"]),
                str(t["steps_without_data"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = [
        f"backtest {report['from']} .. {report['to']}, step {report['step_seconds']} s, "
        f"look-ahead {report['lookahead_seconds']} s",
        "",
    ]
    for row in rows:
        lines.append(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
    for p in report["policies"]:
        t = p["totals"]
        if "notices" in t:
            reasons = ", ".join(f"{r} {n}" for r, n in t["notices_withdrawn_by_reason"].items())
            lines += [
                "",
                f"{p['name']} notices: {t['notices']} given, {t['notices_withdrawn']} withdrawn"
                + (f" ({reasons})" if reasons else ""),
            ]
        if p["by_namespace"]:
            lines += ["", f"{p['name']} by namespace (evictions, regret, GPU-hours):"]
            for ns, row in p["by_namespace"].items():
                lines.append(
                    f"  {ns}  {row['evictions']}  {row['regret_evictions']}  {row['gpu_hours_reclaimed']:.2f}"
                )
        regrets = [e for e in p["evictions"] if e["regret"]]
        if not regrets:
            continue
        lines += ["", f"regret evictions of {p['name']}:"]
        for e in regrets:
            lines.append(
                f"  {e['at']}  {e['victim']} ({e['gpus']} GPUs on {e['node']}) for {e['preemptor']}: "
                f"busy again after {_after(e['busy_again_after_seconds'])}"
            )
    if report["warnings"]:
        lines += ["", "warnings:", *(f"  {w}" for w in report["warnings"])]
    # names, nodes and warnings come from label values: escaped as `plan` escapes them, one line each
    return printable_lines(lines) + "\n"


def _after(seconds: float | None) -> str:
    return "unknown (look-ahead unreadable)" if seconds is None else f"{seconds:.0f} s"
