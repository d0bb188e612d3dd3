"""Backtest benchmark: a 7-day backtest at 1,000 GPUs with 5-minute steps against a real Prometheus over
history backfilled by promtool, its time per step against one live pass on the same cluster measured in
the same run, and the Prometheus queries per step at 1,000 and 10,000 GPUs over one window.

The live pass is the service's own (`run_pass` in dry-run): the Kubernetes adapter listing the same
cluster from the fake API server (tools/fakes/fakekube.py) and the live Prometheus adapter's usage queries on
the same Prometheus, evaluated at the last step's time (the history is in the past), then the planner.

`main()` returns a markdown section for docs/benchmarks.md (tests/bench/run_all.py).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml
from kubernetes import client

from automator import cli
from automator.backtest.cli import policies
from automator.backtest.run import BacktestResult, run_backtest
from automator.kube.adapter import KubernetesAdapter
from automator.objects.keys import JsonObj, ObjectKey
from automator.ports import Mode
from automator.prom import PrometheusAdapter
from automator.reclaim.model import PlannerConfig, UsageWindow
from automator.reclaim.snapshot import load_cluster
from automator.service.actuator import run_pass
from steward_common.series import POD_ACTIVITY
from tests.automator.backtest.backfill import Pod
from tests.automator.backtest.test_backtest_prometheus import CLASSES as KNOWN_CLASSES
from tools.fakes.fakekube import FakeApiServer
from tools.fakes.promserver import Prometheus, start_prometheus

H, M, D = 3600, 60, 86400
STEP = 5 * M
LOOKAHEAD = 30 * M
DAYS = 7
QUERY_WINDOW = 3 * H  # the window over which queries per step are compared at both sizes
SIZES = (1_000, 10_000)
PRE = 1 * H  # history before the window: the first steps' usage windows
AFTER = 40 * M  # history after it: the last evictions' look-ahead
KSM_EVERY = STEP  # kube-state-metrics samples (a real one is scraped every 30-60 s)
ACTIVITY_EVERY = 30  # the recorded GPU activity, at the rule interval
PREEMPTOR_EVERY = 2 * H
PREEMPTOR_WAIT = 2 * H  # history binds each preemptor this long after it appeared
GPU_SPLITS = ((8,), (4, 4), (4, 2, 2), (2, 2, 2, 2), (4, 2, 1, 1), (2, 2, 1, 1, 1, 1))
LIVE_PASSES = 5
GOAL_RATIO = 2.0
WORK = Path(tempfile.gettempdir()) / "gpu-steward-bench-backtest"

# The known-answer suite's classes: victims of class low, preemptors of class high that opt in.
CLASSES: list[JsonObj] = KNOWN_CLASSES["items"]


@dataclass
class Cluster:
    gpus: int
    window: int
    nodes: list[str]
    pods: list[Pod]

    @property
    def end(self) -> int:
        return self.window + AFTER


def cluster(gpus: int, window: int, seed: int = 7) -> Cluster:
    """gpus / 8 nodes full of GPU pods of class low: on a third of the nodes the pods are idle (half of
    those become busy for a while later on), the others busy. Every PREEMPTOR_EVERY a pending 4-GPU pod of
    class high appears; history binds it PREEMPTOR_WAIT later on an idle node (the evidence the backtest
    needs that its constraints allow that node)."""
    rng = random.Random(seed)
    nodes = [f"gpu-{n:05}" for n in range(gpus // 8)]
    pods: list[Pod] = []
    idle_nodes = []
    start = -PRE
    for n, node in enumerate(nodes):
        idle = n % 3 == 0
        if idle:
            idle_nodes.append(node)
        for i, size in enumerate(rng.choice(GPU_SPLITS)):
            owner = ("ReplicaSet", f"job-{n}-{i}")
            pod = Pod(f"team-{n % 20}", f"{node}-p{i}", size, "low", start, node, start, owner=owner)
            if not idle:
                pod.activity = [(start, window + AFTER, round(rng.uniform(0.3, 0.9), 2))]
            elif n % 2 == 0:
                busy = rng.randrange(2 * H, max(3 * H, window - 2 * H))
                pod.activity = [(start, busy, 0.0), (busy, busy + H, 0.6), (busy + H, window + AFTER, 0.0)]
            else:
                pod.activity = [(start, window + AFTER, 0.0)]
            pods.append(pod)
    for k, t in enumerate(range(H, window, PREEMPTOR_EVERY)):
        node = idle_nodes[(k * 7) % len(idle_nodes)]
        bound = t + PREEMPTOR_WAIT
        pod = Pod(
            f"team-{k % 20}", f"train-{k}", 4, "high", t, node, bound, owner=("ReplicaSet", f"train-{k}")
        )
        pod.activity = [(bound, window + AFTER, 0.9)]
        pods.append(pod)
    return Cluster(gpus, window, nodes, pods)


def _grid(start: int, end: int, every: int, offset: int = 0) -> range:
    first = -(-(start - offset) // every) * every + offset  # the first multiple of `every` (+offset) >= start
    return range(first, end, every)


def _family(out: TextIO, name: str, series: Iterator[tuple[str, Iterator[tuple[int, float]]]], f: int) -> int:
    out.write(f"# TYPE {name} gauge\n")
    count = 0
    for labels, points in series:
        lines = [f"{name}{{{labels}}} {v:g} {f + t}\n" for t, v in points]
        out.writelines(lines)
        count += len(lines)
    return count


def _l(**labels: str) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def _phase(p: Pod, t: int, phase: str) -> float:
    return float(phase == ("Running" if t >= p.bound else "Pending"))


def write_openmetrics(c: Cluster, f: int, out: TextIO) -> int:
    """The cluster's kube-state-metrics series and recorded GPU activity as OpenMetrics (families grouped,
    as promtool requires); the number of samples written."""
    ksm = list(_grid(-PRE, c.end, KSM_EVERY))
    n = 0

    def ident(p: Pod) -> dict[str, str]:
        return {"namespace": p.ns, "pod": p.name, "uid": p.uid}

    def alive(p: Pod) -> list[int]:
        return [t for t in ksm if t >= p.created]

    def node_series(
        resource: str, unit: str, value: float
    ) -> Iterator[tuple[str, Iterator[tuple[int, float]]]]:
        for node in c.nodes:
            yield _l(node=node, resource=resource, unit=unit), ((t, value) for t in ksm)

    n += _family(
        out,
        "kube_node_status_allocatable",
        (
            s
            for r, u, v in (
                ("nvidia_com_gpu", "integer", 8.0),
                ("cpu", "core", 128.0),
                ("memory", "byte", 2.0**40),
            )
            for s in node_series(r, u, v)
        ),
        f,
    )
    n += _family(
        out,
        "kube_node_status_condition",
        (
            (_l(node=node, condition="Ready", status=status), ((t, value) for t in ksm))
            for node in c.nodes
            for status, value in (("true", 1.0), ("false", 0.0), ("unknown", 0.0))
        ),
        f,
    )

    def info(p: Pod) -> Iterator[tuple[str, Iterator[tuple[int, float]]]]:
        base = {
            **ident(p),
            "priority_class": p.cls,
            "created_by_kind": p.owner[0],
            "created_by_name": p.owner[1],
        }
        times = alive(p)
        yield _l(**base, node=""), ((t, 1.0) for t in times if t < p.bound)
        yield _l(**base, node=p.node), ((t, 1.0) for t in times if t >= p.bound)

    n += _family(out, "kube_pod_info", (s for p in c.pods for s in info(p)), f)
    n += _family(
        out, "kube_pod_created", ((_l(**ident(p)), ((t, f + p.created) for t in alive(p))) for p in c.pods), f
    )
    n += _family(
        out,
        "kube_pod_status_phase",
        (
            (_l(**ident(p), phase=phase), ((t, _phase(p, t, phase)) for t in alive(p)))
            for p in c.pods
            for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown")
        ),
        f,
    )
    n += _family(
        out,
        "kube_pod_status_unschedulable",
        ((_l(**ident(p)), ((t, 1.0) for t in alive(p) if t < p.bound)) for p in c.pods),
        f,
    )
    for name in ("kube_pod_start_time", "kube_pod_status_scheduled_time"):
        n += _family(
            out,
            name,
            ((_l(**ident(p)), ((t, float(f + p.bound)) for t in alive(p) if t >= p.bound)) for p in c.pods),
            f,
        )
    for name in ("kube_pod_container_resource_requests", "kube_pod_container_resource_limits"):
        n += _family(
            out,
            name,
            (
                (_l(**ident(p), container="main", resource=r, unit=u), ((t, v) for t in alive(p)))
                for p in c.pods
                for r, u, v in (
                    ("nvidia_com_gpu", "integer", float(p.gpus)),
                    ("cpu", "core", 1.0),
                    ("memory", "byte", 2.0**30),
                )
            ),
            f,
        )
    n += _family(
        out,
        POD_ACTIVITY,
        (
            (
                _l(namespace=p.ns, pod=p.name),
                (
                    (t, v)
                    for a, b, v in p.activity
                    for t in _grid(max(a, -PRE), min(b, c.end), ACTIVITY_EVERY, 15)
                ),
            )
            for p in c.pods
            if p.activity
        ),
        f,
    )
    out.write("# EOF\n")
    return n


def k8s_objects(c: Cluster, f: int, at: int) -> list[JsonObj]:
    """The Nodes, the pods alive at `at` and the PriorityClasses as the API server would list them."""

    def stamp(t: int) -> str:
        return datetime.fromtimestamp(f + t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    objects: list[JsonObj] = [*CLASSES]
    for node in c.nodes:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node},
                "status": {
                    "allocatable": {"nvidia.com/gpu": "8", "cpu": "128", "memory": "1Ti"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    for p in c.pods:
        if p.created > at:
            continue
        pod: JsonObj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": p.name,
                "namespace": p.ns,
                "uid": p.uid,
                "creationTimestamp": stamp(p.created),
                "ownerReferences": [
                    {"kind": p.owner[0], "name": p.owner[1], "apiVersion": "apps/v1", "uid": "o"}
                ],
            },
            "spec": {
                "priorityClassName": p.cls,
                "priority": 1000 if p.cls == "high" else 100,
                "containers": [
                    {
                        "name": "main",
                        "resources": {
                            "limits": {"nvidia.com/gpu": str(p.gpus)},
                            "requests": {"nvidia.com/gpu": str(p.gpus), "cpu": "1", "memory": "1Gi"},
                        },
                    }
                ],
            },
        }
        if at >= p.bound:
            pod["spec"]["nodeName"] = p.node
            pod["status"] = {
                "phase": "Running",
                "startTime": stamp(p.bound),
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(p.bound)}
                ],
            }
        else:
            pod["status"] = {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            }
        objects.append(pod)
    return objects


@dataclass
class Served:
    prom: Prometheus
    cluster: Cluster
    f: int
    samples: int
    backfill_seconds: float


@contextmanager
def served(gpus: int, window: int) -> Iterator[Served]:
    """The cluster's history backfilled into a fresh TSDB (one block per window: promtool reads its input
    once per block) and Prometheus serving it; everything removed on exit."""
    c = cluster(gpus, window)
    f = (int(time.time()) // H) * H - window - 2 * H  # whole hours; the history ends over an hour ago
    work = WORK / f"{gpus}-{window}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.monotonic()
    src = work / "backfill.om"
    with src.open("w") as out:
        samples = write_openmetrics(c, f, out)
    block = f"{(window + PRE + AFTER) // H + 2}h"
    subprocess.run(
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            f"--max-block-duration={block}",
            str(src),
            str(work / "data"),
        ],
        check=True,
        capture_output=True,
        timeout=1200,
    )
    src.unlink()
    backfill = time.monotonic() - started
    prom = start_prometheus(work, scrape_targets={})
    try:
        prom.wait_for(f"count(kube_pod_info @ {f + window})", timeout=120)
        yield Served(prom, c, f, samples, backfill)
    finally:
        prom.stop()
        shutil.rmtree(work, ignore_errors=True)


def _classes(work: Path) -> list[JsonObj]:
    path = work / "classes.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": CLASSES}))
    return load_cluster(path).priority_classes


def backtest(s: Served, window: int) -> tuple[BacktestResult, float]:
    args = cli.build_parser().parse_args(["backtest", "--prometheus", s.prom.url, "--from", "0", "--to", "1"])
    prom = PrometheusAdapter(s.prom.url)
    classes = _classes(s.prom.workdir)
    started = time.monotonic()
    result = run_backtest(prom, s.f, s.f + window, STEP, LOOKAHEAD, policies(args), classes)
    return result, time.monotonic() - started


class _AtTime:
    """The live adapter's usage as of a fixed time (the history is in the past); everything else its own."""

    def __init__(self, prom: PrometheusAdapter, at: datetime) -> None:
        self.prom, self.at = prom, at

    @property
    def queries_last_call(self) -> int:
        return self.prom.queries_last_call

    @property
    def nonfinite_last_call(self) -> int:
        return self.prom.nonfinite_last_call

    @property
    def clock_skew_seconds(self) -> float | None:
        return self.prom.clock_skew_seconds

    def usage(
        self,
        windows: Mapping[ObjectKey, UsageWindow],
        at: Any = None,
        recent_seconds: int = 300,
        now: Any = None,
    ) -> Any:
        return self.prom.usage(windows, at=self.at, recent_seconds=recent_seconds, now=self.at)


def live_pass(s: Served, at: int) -> dict[str, Any]:
    """LIVE_PASSES dry-run passes of the service over the cluster as it was at `at`: their times."""
    when = datetime.fromtimestamp(s.f + at, tz=UTC)
    times, queries, decisions = [], 0, 0
    with FakeApiServer(k8s_objects(s.cluster, s.f, at)).start() as api:
        kube = KubernetesAdapter(client.ApiClient(client.Configuration(host=api.url)), request_timeout=30)
        usage = _AtTime(PrometheusAdapter(s.prom.url), when)
        for _ in range(LIVE_PASSES):
            started = time.monotonic()
            result = run_pass(kube, usage, PlannerConfig(), Mode.DRY_RUN, when)
            times.append(time.monotonic() - started)
            assert result.ok, result.reason
            assert result.plan is not None
            queries, decisions = result.prometheus_queries, len(result.plan.decisions)
    pods = sum(1 for p in s.cluster.pods if p.created <= at)
    return {"times": times, "queries": queries, "decisions": decisions, "pods": pods}


def main() -> str:
    load_before = os.getloadavg()[0]
    window = DAYS * D
    with served(SIZES[0], window) as week:
        # Live passes before and after the backtest: the machine's load drifts during a long run.
        live = live_pass(week, window)
        result, seconds = backtest(week, window)
        live["times"] += live_pass(week, window)["times"]
        live["seconds"] = statistics.median(live["times"])
        small, _ = backtest(week, QUERY_WINDOW)
        backfill = (week.samples, week.backfill_seconds)
        pods_small = sum(1 for p in week.cluster.pods if p.created <= QUERY_WINDOW)
    with served(SIZES[1], QUERY_WINDOW) as big:
        large, _ = backtest(big, QUERY_WINDOW)
        pods_large = len(big.cluster.pods)
    load_after = os.getloadavg()[0]
    per_step = seconds / result.steps
    ratio = per_step / live["seconds"]
    totals = result.report["policies"][0]["totals"]
    goal_time = "met" if ratio <= GOAL_RATIO else "NOT met"
    goal_queries = "met" if small.queries_per_step == large.queries_per_step else "NOT met"
    return (
        "## Backtest (`gpu-automator backtest`)\n\n"
        "Command: `make bench` (all benchmarks), or for this section alone "
        "`.venv/bin/python -m tests.bench.run_all bench_backtest`.\n\n"
        "Synthetic history (tests/bench/bench_backtest.py) backfilled with `promtool tsdb "
        f"create-blocks-from openmetrics` into a real Prometheus: {SIZES[0]:,} GPUs ({SIZES[0] // 8} nodes "
        f"x 8) full of GPU pods ({len(week.cluster.pods):,} pods over the week), a third of the nodes idle "
        "(half of those busy for an hour later on), a pending 4-GPU preemptor every "
        f"{PREEMPTOR_EVERY // H} h that history schedules {PREEMPTOR_WAIT // H} h later. "
        f"kube-state-metrics series every {KSM_EVERY // M} min (a real kube-state-metrics is scraped every "
        "30-60 s: Prometheus then reads 5-10 times more samples per range query; the number of queries is "
        f"the same), recorded GPU activity every {ACTIVITY_EVERY} s: {backfill[0] / 1e6:.1f} M samples, "
        f"generated and backfilled in {backfill[1]:.0f} s. "
        f"Load average {load_before:.1f} before and {load_after:.1f} after.\n\n"
        "| run | steps | wall time | per step | Prometheus queries | per step |\n"
        "|---|---|---|---|---|---|\n"
        f"| backtest, {DAYS} days, {STEP // M}-min steps, {SIZES[0]:,} GPUs | {result.steps:,} | "
        f"{seconds:.1f} s | {per_step * 1000:.1f} ms | {result.queries:,} | {result.queries_per_step:.2f} |\n"
        f"| one live pass (dry run, same cluster and Prometheus; median of {2 * LIVE_PASSES}, half before "
        "and half after the backtest) | 1 | "
        f"{live['seconds'] * 1000:.1f} ms | {live['seconds'] * 1000:.1f} ms | {live['queries']} | "
        f"{live['queries']} |\n\n"
        f"Time per step against a live pass: **{ratio:.2f}x** (goal: at most {GOAL_RATIO:g}x: {goal_time}). "
        f"The live pass lists the cluster from the API ({live['pods']} pods; tools/fakes/fakekube.py) and "
        "makes the live adapter's usage queries; a backtest step replaces the listing by its share of the "
        "range queries over kube-state-metrics and adds a look-ahead query at a step that evicts. The week's "
        "totals: "
        f"{totals['evictions']} evictions, {totals['regret_evictions']} of them regret, "
        f"{totals['gpu_hours_reclaimed']:.1f} GPU-hours reclaimed, {totals['steps_without_data']} steps "
        "without data.\n\n"
        f"Queries per step over the same {QUERY_WINDOW // H}-hour window "
        f"({small.steps} steps, the same preemptors):\n\n"
        "| GPUs | pods | queries | per step |\n|---|---|---|---|\n"
        f"| {SIZES[0]:,} | {pods_small:,} | {small.queries} | {small.queries_per_step:.2f} |\n"
        f"| {SIZES[1]:,} | {pods_large:,} | {large.queries} | {large.queries_per_step:.2f} |\n\n"
        f"Goal: equal at both sizes: {goal_queries}.\n"
    )


if __name__ == "__main__":
    print(main())
