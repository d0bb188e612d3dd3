"""A backtest run: history read through the Prometheus adapter, every policy replayed step by step in
lockstep (each chunk of kube-state-metrics history is fetched once for all of them), the report written.

`run_backtest` is what the command and the benchmark call; it also says how many queries it made.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from automator.backtest import history
from automator.backtest.cli import MAX_QUERIES, BacktestError, Options
from automator.backtest.cluster import OPT_OUT_LABEL, POD_LABELS, REQUIRED, IndexedFrame
from automator.backtest.replay import Policy, Replay
from automator.backtest.report import report_json, report_text, timelines
from automator.objects.files import InputError
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.priority_class import PriorityClass, priority_class_records
from automator.ports import PrometheusUnavailable
from automator.prom import PrometheusAdapter, read_credentials
from automator.reclaim.cluster_index import is_reclaim_class
from automator.reclaim.model import PodUsage, UsageWindow
from automator.reclaim.snapshot import load_cluster
from automator.settings import SettingError
from steward_common.conventions import NEVER_RECLAIM_LABEL, RECLAIM_ANNOTATION
from steward_common.printable import printable


@dataclass
class BacktestResult:
    report: dict[str, Any]
    timelines: dict[str, list[tuple[float, int, int, int]]]
    queries: int  # every Prometheus query made
    steps: int

    @property
    def queries_per_step(self) -> float:
        return self.queries / self.steps if self.steps else 0.0


def run_backtest(
    prom: PrometheusAdapter,
    start: int,
    end: int,
    step: int,
    lookahead: int,
    policies: Sequence[Policy],
    priority_classes: Sequence[PriorityClass | JsonObj],
    progress: Callable[[int, int], None] | None = None,
    strict_placement: bool = False,
) -> BacktestResult:
    """Replay every policy over [start, end] every `step` seconds. Raises PrometheusUnavailable when the
    kube-state-metrics history cannot be read (a step's usage failing only makes it a step without data)."""
    grid = history.Grid(start, end, step)
    before = prom.queries_total
    priority_classes = priority_class_records(priority_classes)
    warnings = _class_warnings(priority_classes)
    evidence = history.evidence(prom, grid)
    evidence.strict = strict_placement
    replays = [Replay(p, priority_classes, evidence, step, lookahead) for p in policies]

    def usage(windows: Mapping[ObjectKey, UsageWindow], at: int, recent: int) -> Mapping[ObjectKey, PodUsage]:
        when = datetime.fromtimestamp(at, tz=UTC)
        return prom.usage(windows, at=when, recent_seconds=recent, now=when)

    def lookahead_samples(
        pods: Iterable[ObjectKey], at: float, seconds: int
    ) -> Mapping[ObjectKey, Sequence[tuple[float, float]]]:
        return prom.activity_after(pods, at, seconds)

    opt_out_seen = False
    required_seen: set[str] = set()
    done = 0
    for first, count in grid.chunks():
        frames = history.ksm_frames(prom, grid, first, count)
        for i, frame in enumerate(frames):
            required_seen.update(metric for metric in REQUIRED if frame.get(metric))
            opt_out_seen = opt_out_seen or any(
                OPT_OUT_LABEL in labels for labels, _ in frame.get(POD_LABELS, ())
            )
            samples = IndexedFrame(frame)  # indexed once for every policy
            prom.answers = {}  # the policies' equal queries of this step asked once
            for replay in replays:
                replay.step(grid.at(first + i), samples, usage, lookahead_samples)
            prom.answers = None
            done += 1
            if progress is not None:
                progress(done, grid.count)
    last = grid.at(grid.count - 1)
    for replay in replays:
        replay.finish(max(last, end))
    missing = [metric for metric in REQUIRED if metric not in required_seen]
    if missing:
        warnings.append(
            f"no kube-state-metrics series {', '.join(missing)} in this Prometheus over the whole window: "
            "every step is a step without data (no cluster to plan over). Is kube-state-metrics running, "
            'and scraped by this Prometheus? (docs/backtest.md, "What it needs in Prometheus")'
        )
    if not opt_out_seen:
        warnings.append(
            f"no pod carried the opt-out label {NEVER_RECLAIM_LABEL} in kube_pod_labels: kube-state-metrics "
            "exports it only when its --metric-labels-allowlist names it, and a pod that opted out is then "
            "taken as a victim"
        )
    if evidence.unplaced:
        shown = ", ".join(str(k) for k in sorted(evidence.unplaced)[:10])
        more = f" and {len(evidence.unplaced) - 10} more" if len(evidence.unplaced) > 10 else ""
        warnings.append(
            f"no node in history for pending pod(s) {shown}{more} (nor for a pod of the same owner): "
            "planned as fitting any untainted node, which may evict more than the live service would "
            "(--strict-placement: fit no node)"
        )
    if history.kueue_seen(prom, grid):
        warnings.append(KUEUE_NOT_REPLAYED)
    report = report_json(start, end, step, lookahead, replays, warnings)
    return BacktestResult(report, timelines(replays), prom.queries_total - before, grid.count)


KUEUE_NOT_REPLAYED = (
    "the cluster has Kueue Workloads (kueue_admitted_active_workloads or kueue_pending_workloads in the "
    "window): Kueue is not replayed, since Workloads are not in kube-state-metrics by default; what "
    "--kueue boost or deactivate would have done is not in this report (docs/kueue.md)"
)


def _class_warnings(classes: Sequence[PriorityClass]) -> list[str]:
    if not classes:
        return ["no PriorityClasses (--priority-classes FILE): no class opts in, so nothing is evicted"]
    if not any(is_reclaim_class(c) for c in classes):
        return [f'no PriorityClass opts in ({RECLAIM_ANNOTATION}: "true"): no pod is a preemptor']
    return []


def _progress(stream: TextIO) -> Callable[[int, int], None]:
    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // total
        stream.write(f"\rbacktest [{'#' * filled}{'.' * (width - filled)}] {done}/{total} steps")
        if done == total:
            stream.write("\n")
        stream.flush()

    return show


def run(options: Options) -> int:
    """The command: exit 0 done, 1 Prometheus unreadable, 2 bad input (the message names it)."""
    try:
        classes: list[PriorityClass] = []
        if options.priority_classes:
            gpu = options.policies[0].config.gpu_resources
            classes = load_cluster(Path(options.priority_classes), gpu).priority_classes
    except (InputError, RecursionError, ValueError) as exc:
        print(f"gpu-automator: error: --priority-classes: {printable(str(exc))}", file=sys.stderr)
        return 2
    queries = history.estimated_queries(
        history.Grid(options.start, options.end, options.step), options.policies
    )
    if queries > MAX_QUERIES and not options.yes:
        print(
            f"gpu-automator: error: --yes: this backtest makes about {queries:,} Prometheus queries, over "
            f"the {MAX_QUERIES:,} it makes without --yes (a coarser --step or a shorter window makes fewer)",
            file=sys.stderr,
        )
        return 2
    try:
        credentials = read_credentials(*options.credentials)
    except SettingError as exc:
        print(f"gpu-automator: error: {exc}", file=sys.stderr)
        return 2
    prom = PrometheusAdapter(
        options.prometheus,
        timeout=options.timeout,
        rule_interval=options.rule_interval,
        credentials=credentials,
    )
    progress = _progress(sys.stderr) if sys.stderr.isatty() else None
    try:
        result = run_backtest(
            prom,
            options.start,
            options.end,
            options.step,
            options.lookahead,
            options.policies,
            classes,
            progress,
            options.strict_placement,
        )
    except PrometheusUnavailable as exc:
        print(f"gpu-automator: error: Prometheus: {printable(exc.reason)}", file=sys.stderr)
        return 1
    except RecursionError:  # the adapter reads answers with a bounded nesting; this is the last guard
        print("gpu-automator: error: Prometheus: an answer nested too deeply to read", file=sys.stderr)
        return 1
    if options.output == "json":
        import json

        text = json.dumps(result.report, indent=2) + "\n"
    elif options.output == "html":
        from automator.backtest.html import render_html

        text = render_html(result.report, result.timelines)
    else:
        text = report_text(result.report)
    if options.out:
        try:
            Path(options.out).write_text(text)
        except OSError as exc:
            print(f"gpu-automator: error: --out: {exc}", file=sys.stderr)
            return 2
        print(f"backtest report written to {options.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    print(
        f"backtest: {result.queries} Prometheus queries over {result.steps} steps "
        f"({result.queries_per_step:.1f} per step)",
        file=sys.stderr,
    )
    return 0


__all__ = ["BacktestError", "BacktestResult", "run", "run_backtest"]
