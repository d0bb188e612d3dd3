"""A time-compressed copy of rules/ for integration tests: every interval, range, offset and time constant
divided by a factor, generated from the rule files (never retyped).

- group `interval:` / factor;
- `[D]` / factor, where a range of the form "W less 1 ms" (`[29s999ms]`) stays W / factor less 1 ms;
- `offset D` / factor, where `offset W+1s` (`offset 1h1s`) stays W / factor plus 1 s and `offset 1s`
  (the previous evaluation) stays 1 s;
- the time constants in seconds (`>= 60` freshness, `<= bool 120` interval cap, `/ 3600` window
  length or seconds per hour) / factor. Any other integer of 60 or more fails the generation, so a new
  time constant in the rules cannot be missed silently.

Both evaluators of a comparison get the same copy, so what is compared is the evaluators, not the scale.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
TIME_CONSTANTS = frozenset({60, 120, 3600})
_DURATION = r"(?:\d+(?:ms|s|m|h|d))+"
_RANGE = re.compile(r"\[(" + _DURATION + r")\]")
_OFFSET = re.compile(r"\boffset (" + _DURATION + r")\b")
_NUMBER = re.compile(r"(?<![\w.\[])(\d+)(?![\w.])")


def parse_ms(text: str) -> int:
    return sum(int(n) * UNITS_MS[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d)", text))


def format_ms(ms: int) -> str:
    out = []
    for unit in ("h", "m", "s", "ms"):
        n, ms = divmod(ms, UNITS_MS[unit])
        if n:
            out.append(f"{n}{unit}")
    return "".join(out) or "0s"


def _divide(ms: int, factor: int, what: str) -> int:
    if ms % factor:
        raise ValueError(f"{what}: {format_ms(ms)} is not divisible by {factor}")
    return ms // factor


def scale_range(text: str, factor: int) -> str:
    ms = parse_ms(text)
    if ms % 1000 == 999:
        return format_ms(_divide(ms + 1, factor, text) - 1)
    return format_ms(_divide(ms, factor, text))


def scale_offset(text: str, factor: int) -> str:
    ms = parse_ms(text)
    if ms == 1000:
        return "1s"
    if ms % 60_000 == 1000:
        return format_ms(_divide(ms - 1000, factor, text) + 1000)
    return format_ms(_divide(ms, factor, text))


def scale_expr(expr: str, factor: int) -> str:
    masked: list[str] = []

    def keep(text: str) -> str:
        masked.append(text)
        return f"\0{len(masked) - 1}\0"

    out = _RANGE.sub(lambda m: keep(f"[{scale_range(m.group(1), factor)}]"), expr)
    out = _OFFSET.sub(lambda m: keep(f"offset {scale_offset(m.group(1), factor)}"), out)

    def number(text: str) -> str:
        n = int(text)
        if n < 60:
            return text
        if n not in TIME_CONSTANTS:
            raise ValueError(f"unknown constant {n} in {expr!r}: a time in seconds? add it to TIME_CONSTANTS")
        return str(_divide(n, factor, f"constant {n}"))

    # Group 1: a masked duration's index; group 2: a plain number.
    return re.sub(
        r"\0(\d+)\0|" + _NUMBER.pattern,
        lambda m: masked[int(m.group(1))] if m.group(1) is not None else number(m.group(2)),
        out,
    )


def scaled_rules(path: Path, factor: int) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    for group in doc["groups"]:
        group["interval"] = format_ms(_divide(parse_ms(group["interval"]), factor, group["name"]))
        for rule in group["rules"]:
            rule["expr"] = scale_expr(rule["expr"], factor)
    return doc


def write_scaled_rules(path: Path, factor: int, out: Path) -> Path:
    out.write_text(yaml.safe_dump(scaled_rules(path, factor), sort_keys=False, width=1_000))
    return out
