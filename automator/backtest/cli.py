"""`gpu-automator backtest`: its flags, their checks, and the policies a sweep makes. Pure (argparse only);
the run itself is automator/backtest/run.py's, loaded only by this command.

--sweep NAME=V1,V2,... runs each value as its own policy; several --sweep flags make every combination
(their cartesian product, at most MAX_POLICIES policies), so that interactions show in one table. NAME is
a planner flag of plan/run without the dashes (default-gpu-idle-threshold, ...), --max-evictions-per-hour,
or one of the short names in SWEEP_ALIASES. A policy is named by its swept values as written
("threshold=0.1 window=1800"); one without a sweep is named "default".
"""

from __future__ import annotations

import argparse
import copy
import itertools
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from automator import settings
from automator.objects.resources import FieldError, parse_time
from steward_common import settingspec as spec
from steward_common.urls import http_url

if TYPE_CHECKING:  # the planner is loaded by the run alone: `gpu-automator --help` starts without it
    from automator.backtest.replay import Policy

COMMAND = "backtest"
MAX_POLICIES = 64
MAX_STEPS = 1_000_000  # a year at 30 s steps: more is a typo in --from, --to or --step
# More queries than this (a week at 30 s steps makes about 42,000) run only with --yes: the count is said
MAX_QUERIES = 100_000
DEFAULT_LOOKAHEAD = "30m"

SWEEP_ALIASES: Mapping[str, str] = {
    "threshold": "default-gpu-idle-threshold",
    "window": "default-gpu-idle-seconds",
    "min-runtime": "default-toleration-seconds",
}
# The settings of run a backtest also applies (the rest of run's are about serving, not deciding).
_SERVICE = {s.flag: s for s in settings.SERVICE_SETTINGS}
HOURLY = _SERVICE["--max-evictions-per-hour"]
CREDENTIALS = tuple(
    _SERVICE[f]
    for f in ("--prometheus-bearer-token-file", "--prometheus-basic-auth-file", "--prometheus-ca-file")
)
BACKTEST_SETTINGS = (HOURLY, _SERVICE["--rule-interval"], _SERVICE["--prometheus-timeout"], *CREDENTIALS)
_SWEEPABLE = {
    s.flag.removeprefix("--"): s
    for s in (*settings.PLANNER_SETTINGS, HOURLY)
    if s.action == "value" and s.flag not in ("--exclude-namespaces", "--victim-namespaces")
}


class BacktestError(ValueError):
    """A bad flag; the message starts with the flag's name (exit 2)."""


@dataclass(frozen=True)
class Options:
    prometheus: str
    start: int
    end: int
    step: int
    lookahead: int
    policies: tuple[Policy, ...]
    priority_classes: str | None
    output: str
    out: str | None
    rule_interval: float
    timeout: float
    strict_placement: bool = False
    # run's credential files: bearer token, basic auth, CA (automator/prom.py read_credentials)
    credentials: tuple[str | None, str | None, str | None] = (None, None, None)
    yes: bool = False  # run even above MAX_QUERIES


def add_parser(sub: Any) -> None:
    p = sub.add_parser(COMMAND, help="replay the reclaim policy on Prometheus' history (docs/backtest.md)")
    p.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus base URL")
    p.add_argument(
        "--from", dest="start", required=True, metavar="TIME", help="RFC 3339, Unix seconds, now-DURATION"
    )
    p.add_argument(
        "--to", dest="end", required=True, metavar="TIME", help="RFC 3339, Unix seconds, now, now-DURATION"
    )
    p.add_argument(
        "--step", metavar="DURATION", help="time between passes (default: run's --interval default)"
    )
    p.add_argument(
        "--lookahead", default=DEFAULT_LOOKAHEAD, metavar="DURATION", help="regret look-ahead (30m)"
    )
    p.add_argument("--priority-classes", metavar="FILE", help="kubectl get priorityclasses -o yaml")
    p.add_argument(
        "--sweep", action="append", default=[], metavar="NAME=V1,V2,...", help="one policy per value"
    )
    p.add_argument(
        "--strict-placement",
        action="store_true",
        help="a pending pod that history never shows on a node (nor its owner's pods) fits no node",
    )
    p.add_argument(
        "--yes",
        action="store_true",
        help=f"run even when the backtest would make more than {MAX_QUERIES:,} Prometheus queries",
    )
    p.add_argument("--output", choices=("text", "json", "html"), default="text")
    p.add_argument("--out", metavar="FILE", help="write the report here (default: standard output)")
    spec.add_arguments(p, BACKTEST_SETTINGS)
    settings.add_planner_arguments(p)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_DURATION = re.compile(r"(?:[0-9]{1,9}[smhdw])+")


def duration(text: str, flag: str) -> int:
    """Whole seconds: 300, 5m, 1h30m, 2d, 1w."""
    text = text.strip()
    if re.fullmatch(r"[0-9]{1,9}", text):
        return int(text)
    if not _DURATION.fullmatch(text):
        raise BacktestError(f"{flag}: {spec.shown(text)} is not a duration (300, 5m, 1h30m, 2d)")
    return sum(int(n) * _UNITS[u] for n, u in re.findall(r"([0-9]+)([smhdw])", text))


def instant(text: str, flag: str, now: float) -> int:
    """Whole Unix seconds from RFC 3339, Unix seconds, `now` or `now-DURATION`."""
    text = text.strip()
    if text == "now":
        return math.floor(now)
    if text.startswith("now-"):
        return math.floor(now) - duration(text[4:], flag)
    if re.fullmatch(r"[0-9]{1,12}(\.[0-9]+)?", text):
        return math.floor(float(text))
    try:
        return math.floor(parse_time(text, flag).timestamp())
    except FieldError:
        raise BacktestError(
            f"{flag}: {spec.shown(text)} is not RFC 3339, Unix seconds or now-DURATION"
        ) from None


def _sweeps(given: list[str]) -> list[tuple[str, str, list[str]]]:
    """(name as written, flag name, values) of each --sweep."""
    out: list[tuple[str, str, list[str]]] = []
    seen: set[str] = set()
    for text in given:
        name, sep, values = text.partition("=")
        name = name.strip()
        flag = SWEEP_ALIASES.get(name, name)
        if not sep or flag not in _SWEEPABLE:
            known = ", ".join(sorted({*_SWEEPABLE, *SWEEP_ALIASES}))
            raise BacktestError(
                f"--sweep: {spec.shown(text)}: expected NAME=V1,V2,... with NAME one of {known}"
            )
        if flag in seen:
            raise BacktestError(f"--sweep: {name} is swept twice")
        seen.add(flag)
        items = [v.strip() for v in values.split(",")]
        if not items or any(not v for v in items) or len(set(items)) != len(items):
            raise BacktestError(
                f"--sweep {name}: expected distinct non-empty values, got {spec.shown(values)}"
            )
        out.append((name, flag, items))
    return out


def _shown(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _policy(args: argparse.Namespace, name: str, overrides: Mapping[str, str], where: str) -> Policy:
    from automator.backtest.replay import Policy

    ns = copy.copy(args)
    for flag, text in overrides.items():
        setattr(ns, _SWEEPABLE[flag].dest, text)
    try:
        config = settings.planner_config(ns)
        hourly = spec.resolve(ns, (HOURLY,), os.environ)[HOURLY.dest]
    except settings.SettingError as exc:
        raise BacktestError(f"{where}{exc}") from None
    shown = {s.flag.removeprefix("--"): s for s in settings.PLANNER_SETTINGS}
    values = {
        "gpu-resource": list(config.gpu_resources),
        "default-gpu-idle-seconds": config.default_gpu_idle_seconds,
        "default-gpu-idle-threshold": config.default_gpu_idle_threshold,
        "default-toleration-seconds": config.default_toleration_seconds,
        "min-coverage": config.min_coverage,
        "cooldown-seconds": config.cooldown_seconds,
        "recent-window": config.recent_window_seconds,
        "max-reclaims-per-preemptor": config.max_reclaims_per_preemptor,
        "max-evictions-per-pass": config.max_evictions_per_pass,
        "exclude-namespaces": list(config.exclude_namespaces),
        "victim-namespaces": list(config.victim_namespaces),
    }
    # The notice settings only where notice is replayed: a policy without it reports what it always did
    # (the history holds no owner's reclaim-defer-until: kube-state-metrics does not export it).
    notice = {
        "notice-seconds": config.notice_seconds,
        "max-defer-seconds": config.max_defer_seconds,
        "max-notices": config.notice_limit,
    }
    assert set(values) | set(notice) == set(shown), "every planner setting is shown"
    if config.notice_seconds > 0:
        values |= notice
    values["max-evictions-per-hour"] = hourly
    return Policy(name, config, {k: _shown(v) for k, v in values.items()}, hourly)


def policies(args: argparse.Namespace) -> tuple[Policy, ...]:
    sweeps = _sweeps(args.sweep)
    if not sweeps:
        return (_policy(args, "default", {}, ""),)
    combos = list(itertools.product(*[[(name, flag, v) for v in values] for name, flag, values in sweeps]))
    if len(combos) > MAX_POLICIES:
        raise BacktestError(f"--sweep: {len(combos)} policies, at most {MAX_POLICIES}")
    out = []
    for combo in combos:
        name = " ".join(f"{n}={v}" for n, _, v in combo)
        out.append(_policy(args, name, {flag: v for _, flag, v in combo}, f"--sweep {name}: "))
    return tuple(out)


def options(args: argparse.Namespace, now: float | None = None) -> Options:
    """The checked options; BacktestError names the flag at fault."""
    clock = datetime.now(UTC).timestamp() if now is None else now
    start, end = instant(args.start, "--from", clock), instant(args.end, "--to", clock)
    if end <= start:
        raise BacktestError(f"--to: {args.end!r} is not after --from {args.start!r}")
    if end > clock + 60:  # no history there: every step would count as one without data
        raise BacktestError(f"--to: {args.end!r} is in the future")
    step = (
        duration(args.step, "--step") if args.step else math.ceil(float(_SERVICE["--interval"].default or 30))
    )
    if not 1 <= step <= 86_400:
        raise BacktestError(f"--step: {step} s is not between 1 s and 1 day")
    if (end - start) // step + 1 > MAX_STEPS:
        raise BacktestError(
            f"--step: {(end - start) // step + 1} steps from --from to --to, at most {MAX_STEPS}"
        )
    lookahead = duration(args.lookahead, "--lookahead")
    if not 1 <= lookahead <= 86_400:
        raise BacktestError(f"--lookahead: {lookahead} s is not between 1 s and 1 day")
    try:
        url = http_url(args.prometheus)
    except ValueError as exc:
        raise BacktestError(f"--prometheus: {exc}") from None
    try:
        extra = spec.resolve(args, BACKTEST_SETTINGS[1:], os.environ)
    except settings.SettingError as exc:
        raise BacktestError(str(exc)) from None
    return Options(
        url,
        start,
        end,
        step,
        lookahead,
        policies(args),
        args.priority_classes,
        args.output,
        args.out,
        extra["rule_interval"],
        extra["prometheus_timeout"],
        args.strict_placement,
        tuple(extra[s.dest] for s in CREDENTIALS),
        bool(getattr(args, "yes", False)),
    )
