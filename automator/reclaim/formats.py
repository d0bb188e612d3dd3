"""How the plan's reports print a measure (verdicts, explain, the CLI's text, log lines, Events, JSON):
each format defined once, for report.py and for the eligibility rules' reasons. Pure."""

from __future__ import annotations

import math

# Number formats. Verdicts, `explain` and the CLI text print measures to three significant digits (0.01,
# 0.42); log lines and Events print activity with three decimals (0.000), as the demo and docs/reclaim.md
# quote them; JSON carries numbers rounded to four decimals. Each format is defined once, here.


def fmt_measure(value: float | None) -> str:
    """A measured activity or core count in verdicts, explain and the CLI's text."""
    return "unknown" if value is None else f"{value:.3g}"


def fmt_logged(value: float | None, unit: str = "") -> str:
    """A measured activity or core count in log lines and Events."""
    return "unknown" if value is None else f"{value:.3f}{unit}"


def json_measure(value: float | None) -> float | None:
    """A measure in JSON: rounded, and null when unknown or not finite."""
    return None if value is None or not math.isfinite(value) else round(value, 4)
