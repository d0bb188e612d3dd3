"""`gpu-automator` (also `python -m automator`): plan and explain offline, or run the service.

Exit codes: 0 done, 2 bad input (the message names the object and field), 1 the service cannot start.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from automator.dra import cli as dra_cli
from automator.eligibility import fmt_measure
from automator.model import Plan, PlannerConfig, PodKey
from automator.planner import explain, plan, plan_to_json
from automator.resources import FieldError, parse_time
from automator.snapshot import InputError, load_cluster, load_usage

ENV_PREFIX = "GPU_STEWARD_"
_DEFAULTS = PlannerConfig()


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"{value} is not > 0")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"{value} is not >= 0")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{value} is not a finite number >= 0")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise ValueError(f"{value} is not between 0 and 1")
    return value


# flag -> (PlannerConfig field, parser, help)
_KNOBS: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "--default-gpu-idle-seconds": (
        "default_gpu_idle_seconds",
        _positive_int,
        "GPU window for pods whose class sets none",
    ),
    "--default-gpu-idle-threshold": (
        "default_gpu_idle_threshold",
        _non_negative_float,
        "GPU activity at or below which a pod is idle",
    ),
    "--default-toleration-seconds": (
        "default_toleration_seconds",
        int,
        "guaranteed run time after scheduling",
    ),
    "--min-coverage": ("min_coverage", _fraction, "fraction of the window that must have samples"),
    "--cooldown-seconds": (
        "cooldown_seconds",
        _non_negative_int,
        "skip a preemptor this long after a reclaim",
    ),
}


def env_name(flag: str) -> str:
    """--prometheus-url -> GPU_STEWARD_PROMETHEUS_URL (the service's flags use it too)."""
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def add_planner_arguments(parser: argparse.ArgumentParser) -> None:
    """PlannerConfig flags (each also read from GPU_STEWARD_<FLAG>); the service may reuse them."""
    group = parser.add_argument_group("planner settings (flag, else environment variable, else default)")
    group.add_argument(
        "--gpu-resource",
        action="append",
        dest="gpu_resource",
        metavar="NAME",
        help="resource name counted as GPUs, repeatable "
        f"(env {ENV_PREFIX}GPU_RESOURCES, comma-separated; default {','.join(_DEFAULTS.gpu_resources)})",
    )
    for flag, (attr, _, text) in _KNOBS.items():
        group.add_argument(
            flag,
            dest=attr,
            default=None,
            help=f"{text} (env {env_name(flag)}; default {getattr(_DEFAULTS, attr)})",
        )


def planner_config(args: argparse.Namespace, environ: dict[str, str] | None = None) -> PlannerConfig:
    """PlannerConfig from flags, then GPU_STEWARD_* variables, then defaults; InputError names the setting."""
    env = dict(os.environ if environ is None else environ)
    values: dict[str, Any] = {}
    resources = getattr(args, "gpu_resource", None)
    env_resources = env.get(ENV_PREFIX + "GPU_RESOURCES")
    if resources:
        values["gpu_resources"] = tuple(resources)
    elif env_resources:
        values["gpu_resources"] = tuple(r.strip() for r in env_resources.split(",") if r.strip())
    for flag, (attr, parse, _) in _KNOBS.items():
        raw, source = getattr(args, attr, None), flag
        if raw is None and env_name(flag) in env:
            raw, source = env[env_name(flag)], env_name(flag)
        if raw is None:
            continue
        try:
            values[attr] = parse(str(raw))
        except ValueError as exc:
            raise InputError(f"setting {source}: {raw!r}: {exc}") from exc
    return PlannerConfig(**values)


def _now(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    try:
        return parse_time(text, "--now")
    except FieldError as exc:
        raise InputError(str(exc)) from exc


def _text(result: Plan) -> str:
    lines: list[str] = []
    for d in result.decisions:
        lines.append(
            f"{d.preemptor} (priority {d.preemptor_priority}, {d.gpus_requested} GPUs) -> {d.node}: "
            f"evict {len(d.victims)} pod(s) freeing {d.gpus_freed} GPUs ({d.free_gpus_before} already free)"
        )
        for v in d.victims:
            lines.append(
                f"  evict {v.pod}: {v.gpus} GPUs, priority {v.priority}, "
                f"GPU activity {fmt_measure(v.gpu_activity)}"
            )
    for d in result.already_fit:
        lines.append(
            f"{d.preemptor}: already fits on {d.node} without evictions ({d.free_gpus_before} GPUs free)"
        )
    for u in result.unresolved:
        lines.append(f"{u.preemptor}: unresolved: {u.reason}")
    for w in result.warnings:
        lines.append(f"warning: PriorityClass {w.priority_class}: {w.message}")
    if not lines:
        lines.append("no pending preemptors")
    return "\n".join(lines)


def _load(args: argparse.Namespace) -> tuple[Any, Any, PlannerConfig, datetime]:
    config = planner_config(args)
    cluster = load_cluster(Path(args.cluster), config.gpu_resources)
    usage = load_usage(Path(args.usage))
    return cluster, usage, config, _now(args.now)


def _cmd_plan(args: argparse.Namespace) -> int:
    cluster, usage, config, now = _load(args)
    result = plan(cluster, usage, config, now)
    if args.output == "json":
        print(json.dumps(plan_to_json(result), indent=2))
    else:
        print(_text(result))
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    try:
        key = PodKey.parse(args.pod)
    except ValueError as exc:
        raise InputError(f"NAMESPACE/POD: {exc}") from exc
    cluster, usage, config, now = _load(args)
    result = plan(cluster, usage, config, now)
    try:
        print(explain(result, cluster, key, config))
    except LookupError as exc:
        raise InputError(str(exc.args[0])) from exc
    return 0


def _offline_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster", required=True, metavar="FILE", help="kubectl get -o yaml List of objects"
    )
    parser.add_argument("--usage", required=True, metavar="FILE", help="YAML pods: [{namespace, name, ...}]")
    parser.add_argument("--now", metavar="RFC3339", help="evaluate at this time (default: now)")
    add_planner_arguments(parser)


def _service() -> tuple[ModuleType | None, BaseException | None]:
    # The service pulls in the live adapters; plan/explain must work even if they cannot be imported.
    try:
        return importlib.import_module("automator.service"), None
    except Exception as exc:
        return None, exc


def build_parser() -> tuple[argparse.ArgumentParser, ModuleType | None, BaseException | None]:
    parser = argparse.ArgumentParser(prog="gpu-automator", description="Reclaim idle GPUs for pending pods.")
    sub = parser.add_subparsers(dest="command", required=True)
    plan_parser = sub.add_parser("plan", help="plan offline from a cluster snapshot and a usage file")
    _offline_arguments(plan_parser)
    plan_parser.add_argument("--output", choices=("text", "json"), default="text")
    explain_parser = sub.add_parser("explain", help="why a pod is or is not a victim, or a preemptor's fate")
    explain_parser.add_argument("pod", metavar="NAMESPACE/POD")
    _offline_arguments(explain_parser)
    dra_cli.add_parser(sub)
    run_parser = sub.add_parser("run", help="run the service (live cluster, Prometheus)")
    service, error = _service()
    if service is not None:
        service.add_arguments(run_parser)
    return parser, service, error


def main(argv: Sequence[str] | None = None) -> int:
    parser, service, error = build_parser()
    args = parser.parse_args(argv)
    if args.command == dra_cli.COMMAND:
        return dra_cli.run(args)
    try:
        if args.command == "plan":
            return _cmd_plan(args)
        if args.command == "explain":
            return _cmd_explain(args)
    except InputError as exc:
        print(f"gpu-automator: error: {exc}", file=sys.stderr)
        return 2
    if service is None:
        print(f"gpu-automator: error: the service cannot be loaded: {error!r}", file=sys.stderr)
        return 1
    result: int = service.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
