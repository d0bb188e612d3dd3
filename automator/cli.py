"""`gpu-automator` (also `python -m automator`): plan and explain offline, or run the service.

Exit codes: 0 done, 2 bad input (the message names the object and field, or the flag or variable), 1 the
service cannot start. Only `run` imports the service (and with it the web framework and the API clients).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from automator import settings
from automator.backtest import cli as backtest_cli
from automator.dra import cli as dra_cli
from automator.keda import cli as keda_cli
from automator.kueue.model import KueueSettings
from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.resources import FieldError, parse_time
from automator.reclaim.model import PlannerConfig, PodUsage
from steward_common.printable import printable

# The planner, its report and the snapshot readers are imported by the commands that use them, so `--help`
# and the other commands start without them.


def _now(text: str | None) -> datetime:
    from automator.objects.files import InputError

    if text is None:
        return datetime.now(UTC)
    try:
        return parse_time(text, "--now")
    except FieldError as exc:
        raise InputError(str(exc)) from exc


def _load(
    args: argparse.Namespace,
) -> tuple[ClusterState, dict[ObjectKey, PodUsage], PlannerConfig, datetime, KueueSettings]:
    from automator.objects.files import InputError
    from automator.reclaim.snapshot import load_cluster, load_usage

    try:
        config = settings.planner_config(args)
        kueue = settings.kueue_settings(args)
    except settings.SettingError as exc:
        raise InputError(f"setting {exc}") from exc
    cluster = _read(args.cluster, lambda path: load_cluster(path, config.gpu_resources, kueue.on))
    usage = _read(args.usage, load_usage)
    return cluster, usage, config, _now(args.now), kueue


_T = TypeVar("_T")


def _read(name: str, reader: Callable[[Path], _T]) -> _T:
    """reader(Path(name)); what a hostile file makes Python itself refuse (nesting past the recursion
    limit, a number past its digit limit) is bad input naming the file, like any other, not a traceback."""
    from automator.objects.files import InputError

    try:
        return reader(Path(name))
    except (RecursionError, ValueError) as exc:
        raise InputError(f"{name}: refused: {str(exc) or type(exc).__name__}") from None


def _cmd_plan(args: argparse.Namespace) -> int:
    from automator.kueue import report as kueue_report
    from automator.kueue.decide import plan_kueue
    from automator.reclaim import report
    from automator.reclaim.planner import plan

    cluster, usage, config, now, kueue = _load(args)
    result = plan(cluster, usage, config, now)
    # Kueue's writes count against what the pass's evictions leave of the budget (docs/kueue.md).
    left = config.max_evictions_per_pass - sum(len(d.victims) for d in result.decisions)
    queued = plan_kueue(cluster, usage, config, now, kueue, budget=max(0, left))
    if args.output == "json":
        body = report.plan_to_json(result)
        if kueue.on:
            body["kueue"] = kueue_report.kueue_json(queued)
        print(json.dumps(body, indent=2))
    else:
        text = report.plan_to_text(result)
        lines = kueue_report.kueue_lines(queued)
        print("\n".join(x for x in (text, *lines) if x) if lines else text)
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from automator.objects.files import InputError
    from automator.reclaim import report
    from automator.reclaim.planner import plan

    try:
        key = ObjectKey.parse(args.pod)
    except ValueError as exc:
        raise InputError(f"NAMESPACE/POD: {exc}") from exc
    cluster, usage, config, now, kueue = _load(args)
    result = plan(cluster, usage, config, now)
    try:
        text = report.explain(result, cluster, key, config)
        if kueue.on:
            text = "\n".join([text, *_kueue_explain(cluster, usage, config, now, kueue, key)])
        print(text)
    except LookupError as exc:
        raise InputError(str(exc.args[0])) from exc
    return 0


def _kueue_explain(
    cluster: ClusterState,
    usage: dict[ObjectKey, PodUsage],
    config: PlannerConfig,
    now: datetime,
    kueue: KueueSettings,
    pod: ObjectKey,
) -> list[str]:
    """What the Kueue plan says of the Workloads this pod belongs to."""
    from automator.kueue import report as kueue_report
    from automator.kueue.decide import explain_holder, plan_kueue, workload_pods

    owners = sorted(w for w, pods in workload_pods(cluster).items() if any(p.key == pod for p in pods))
    queued = plan_kueue(cluster, usage, config, now, kueue)
    lines: list[str] = []
    for w in owners:
        lines.append(f"Kueue Workload {w} (--kueue {kueue.mode})")
        lines += explain_holder(cluster, usage, config, now, kueue, w)
        lines += [line for line in kueue_report.kueue_lines(queued) if f" {w} " in f"{line} "]
    return lines


def _offline_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster", required=True, metavar="FILE", help="kubectl get -o yaml List of objects"
    )
    parser.add_argument("--usage", required=True, metavar="FILE", help="YAML pods: [{namespace, name, ...}]")
    parser.add_argument("--now", metavar="RFC3339", help="evaluate at this time (default: now)")
    settings.add_planner_arguments(parser)
    settings.add_kueue_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-automator", description="Reclaim idle GPUs for pending pods.")
    sub = parser.add_subparsers(dest="command", required=True)
    plan_parser = sub.add_parser("plan", help="plan offline from a cluster snapshot and a usage file")
    _offline_arguments(plan_parser)
    plan_parser.add_argument("--output", choices=("text", "json"), default="text")
    explain_parser = sub.add_parser("explain", help="why a pod is or is not a victim, or a preemptor's fate")
    explain_parser.add_argument("pod", metavar="NAMESPACE/POD")
    _offline_arguments(explain_parser)
    dra_cli.add_parser(sub)
    keda_cli.add_parser(sub)
    backtest_cli.add_parser(sub)
    run_parser = sub.add_parser("run", help="run the service (live cluster, Prometheus)")
    settings.add_service_arguments(run_parser)
    return parser


def _load_service() -> ModuleType:
    # The web framework and the live adapters: only `run` needs them, so plan/explain never load them.
    return importlib.import_module("automator.service.main")


def _run(args: argparse.Namespace) -> int:
    try:
        service = _load_service()
    except Exception as exc:
        print(f"gpu-automator: error: the service cannot be loaded: {exc!r}", file=sys.stderr)
        return 1
    code: int = service.run(args)
    return code


def _backtest(args: argparse.Namespace) -> int:
    try:
        options = backtest_cli.options(args)
    except backtest_cli.BacktestError as exc:
        print(f"gpu-automator: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    # The Prometheus client: only the backtest's run needs it.
    code: int = importlib.import_module("automator.backtest.run").run(options)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == backtest_cli.COMMAND:
        return _backtest(args)
    if args.command == dra_cli.COMMAND:
        return dra_cli.run(args)
    if args.command == keda_cli.COMMAND:
        return keda_cli.run(args)
    if args.command not in ("plan", "explain"):
        return _run(args)
    from automator.objects.files import InputError

    try:
        return _cmd_plan(args) if args.command == "plan" else _cmd_explain(args)
    except InputError as exc:
        print(f"gpu-automator: error: {printable(str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
