"""Typed records benchmark: what decoding each Kubernetes object once into a record buys, as ratios
measured side by side in one run.

- The service's pass with no object changed against its first pass, from the listed pages to the plan:
  the real `KubernetesAdapter.snapshot` over the in-process list stand-in of bench_automator_memory.py,
  serving the planner benchmark's cluster dressed as the API lists pods (bench_loading.py's full pods).
  A first pass is a new adapter (an empty record cache); the unchanged pass is the same adapter again.
- `gpu-automator plan --output json` on bench_loading.py's full-pods JSON dump against `json.load` of the
  same file, each in a fresh process.
- Decoding the pods into records with the parsed-quantity memo (steward_common/quantity.py) against the
  same decoding with the memo's parser called directly: what the project's one speed-only memo buys.

The DRA pass's ratio (unchanged against first, 50,000 claims) has its one home in bench_dra.py.
`main()` returns a markdown section for docs/benchmarks.md (tests/bench/run_all.py).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from automator.kube import KubernetesAdapter
from automator.objects import resources
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.pod import pod_record
from automator.reclaim.model import PlannerConfig, PodUsage
from automator.reclaim.planner import plan, usage_windows
from steward_common.gc_pause import gc_paused
from steward_common.quantity import parse_quantity
from tests.bench.bench_automator_memory import stand_in
from tests.bench.bench_loading import dump_items, plan_args, write_dump
from tests.bench.bench_planner import NOW

ROOT = Path(__file__).resolve().parents[2]
NODES, PREEMPTORS = 5000, 500
# Alternated rounds, every figure the best of them: the same run's CPU time varies by a third here.
ROUNDS = 7
GOAL_UNCHANGED = 0.5  # the unchanged pass at most this times the first
GOAL_PLAN_AGAINST_LOAD = 1.0  # `gpu-automator plan` at most this times `json.load` of its file
GOAL_MEMO = 0.9  # decoding the pods with the parsed-quantity memo at most this times without it
SERVICE = PlannerConfig()  # the service's default settings (its per-pass eviction budget included)
JSON_LOAD = "import json, sys\nwith open(sys.argv[1]) as f:\n    json.load(f)\n"


@dataclass(frozen=True)
class Pass:
    """One pass of the service, CPU seconds: reading the listed pages into records (`snapshot`), then the
    usage windows and the plan."""

    snapshot: float
    planned: float
    listed: int  # pods the pass listed
    decoded: int  # of those, decoded (not found in the record cache)
    decisions: int

    @property
    def total(self) -> float:
        return self.snapshot + self.planned


@dataclass(frozen=True)
class Run:
    """One command in a fresh process: CPU seconds (user + system, the child's rusage) and wall seconds."""

    cpu: float
    wall: float


def ratio_line(what: str, ratio: float, goal: float) -> str:
    """The goal and its verdict, from the measured ratio."""
    verdict = "met" if ratio <= goal else "NOT met"
    return f"Goal: {what} at most {goal:.1f}x. The best of each side: {ratio:.2f}x, **{verdict}**."


def best(passes: Sequence[Pass]) -> Pass:
    """The pass of least total CPU (its parts are that pass's, so that they add up)."""
    return min(passes, key=lambda p: p.total)


def _by_kind(items: list[JsonObj]) -> dict[str, list[JsonObj]]:
    """A dump's objects as the API lists them: per kind, without `kind` (list items carry none)."""
    out: dict[str, list[JsonObj]] = {}
    for obj in items:
        out.setdefault(obj.pop("kind"), []).append(obj)
    return out


def one_pass(adapter: KubernetesAdapter, usage: dict[ObjectKey, PodUsage]) -> tuple[Pass, tuple[object, ...]]:
    """What a pass of the service does from the list calls to the plan (automator/service/actuator.py),
    Prometheus' answer (the usage) given; and the plan's decisions and unresolved preemptors."""
    started = time.process_time()
    state = adapter.snapshot()
    listed = time.process_time()
    usage_windows(state, SERVICE)
    result = plan(state, usage, SERVICE, NOW)
    done = time.process_time()
    cache = adapter.pod_records
    measured = Pass(
        listed - started, done - listed, cache.hits + cache.misses, cache.misses, len(result.decisions)
    )
    return measured, (tuple(result.decisions), tuple(result.unresolved))


def service_passes(
    rounds: int, kinds: dict[str, list[JsonObj]], usage: dict[ObjectKey, PodUsage]
) -> tuple[list[Pass], list[Pass], dict[str, int]]:
    """(the first passes, the unchanged passes, objects listed per kind), alternated round by round."""
    pods = kinds["Pod"]
    make = stand_in(
        kinds["Node"], pods.__getitem__, len(pods), kinds["PriorityClass"], kinds["PodDisruptionBudget"]
    )
    counts = {kind: len(objs) for kind, objs in kinds.items()}
    firsts, unchanged = [], []
    for _ in range(rounds):
        adapter = make()
        first, planned = one_pass(adapter, usage)
        again, replanned = one_pass(adapter, usage)
        assert replanned == planned, "the unchanged pass planned otherwise than the first"
        assert first.decoded == first.listed and again.decoded == 0, "the record cache did not hold the pods"
        firsts.append(first)
        unchanged.append(again)
        del adapter
    return firsts, unchanged, counts


def run(argv: list[str]) -> Run:
    """One command in a fresh process; its CPU time from the rusage of the children waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, f"{argv[1:3]} failed: {proc.stderr[-2000:]}"
    return Run(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, wall)


def plan_against_load(directory: Path, rounds: int) -> tuple[list[Run], list[Run], float]:
    """(the `gpu-automator plan` runs, the `json.load` runs, file MB), alternated round by round."""
    cluster, usage = write_dump(directory, True, ("json",))["json"]
    plan_argv = [sys.executable, "-m", "automator", *plan_args(cluster, usage)]  # the gpu-automator script
    load_argv = [sys.executable, "-c", JSON_LOAD, str(cluster)]
    plans, loads = [], []
    for _ in range(rounds):
        plans.append(run(plan_argv))
        loads.append(run(load_argv))
    return plans, loads, cluster.stat().st_size / 1e6


def memo_decodes(rounds: int, pods: list[JsonObj]) -> tuple[list[float], list[float]]:
    """(CPU seconds of decoding the pods into records with the parsed-quantity memo, without it), alternated
    round by round. The memo is emptied before each round: every distinct literal is parsed once, as on a
    service's first pass or a `plan --cluster` run."""
    with_memo: list[float] = []
    without: list[float] = []
    try:
        for _ in range(rounds):
            for parser, times in ((parse_quantity, with_memo), (parse_quantity.__wrapped__, without)):
                resources.parse_quantity = parser
                parse_quantity.cache_clear()
                with gc_paused():
                    started = time.process_time()
                    for pod in pods:
                        pod_record(pod)
                    times.append(time.process_time() - started)
    finally:
        resources.parse_quantity = parse_quantity
    return with_memo, without


def least(runs: Sequence[Run]) -> Run:
    """The least CPU and the least wall time of the runs."""
    return Run(min(r.cpu for r in runs), min(r.wall for r in runs))


def spread(ratios: Sequence[float]) -> str:
    """The ratios of the rounds, each side against the other of the same round: least, most, median."""
    return (
        f"Round by round (each side against the other side of its round): {min(ratios):.2f}x to "
        f"{max(ratios):.2f}x, median {statistics.median(ratios):.2f}x."
    )


@dataclass(frozen=True)
class Measured:
    """Every round of both measurements (round i of one list was run beside round i of the other)."""

    firsts: list[Pass]
    unchanged: list[Pass]
    counts: dict[str, int]
    plans: list[Run]
    loads: list[Run]
    dump_mb: float
    with_memo: list[float]
    without_memo: list[float]
    load_before: float
    load_after: float


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s"


def section(m: Measured) -> str:
    """The markdown section, every verdict computed from the figures: the ratio of the best of each side."""
    first, unchanged, plan_run, load_run = best(m.firsts), best(m.unchanged), least(m.plans), least(m.loads)
    pass_ratio = unchanged.total / first.total
    cli_ratio = plan_run.cpu / load_run.cpu
    pass_rounds = spread([u.total / f.total for f, u in zip(m.firsts, m.unchanged, strict=True)])
    cli_rounds = spread([p.cpu / j.cpu for p, j in zip(m.plans, m.loads, strict=True)])
    memo_ratio = min(m.with_memo) / min(m.without_memo)
    memo_rounds = spread([w / o for w, o in zip(m.with_memo, m.without_memo, strict=True)])
    rows = "\n".join(
        f"| {name} | {p.listed:,} | {p.decoded:,} | {_s(p.snapshot)} | {_s(p.planned)} | {_s(p.total)} | "
        f"{p.decisions} |"
        for name, p in (
            ("first (a new adapter: empty record cache)", first),
            ("the next, no object changed (the same adapter)", unchanged),
        )
    )
    objects = ", ".join(f"{kind} {n:,}" for kind, n in m.counts.items())
    return (
        "## Typed records (`KubernetesAdapter` record cache, `gpu-automator plan`)\n\n"
        "Command: `make bench` (all benchmarks), or for this section alone "
        "`.venv/bin/python -m tests.bench.run_all bench_records`.\n\n"
        "The Kubernetes objects are decoded once into frozen records (automator/objects/), and the adapter "
        "keeps pod records across the service's passes by uid and resourceVersion. The ratios below are "
        f"measured side by side in one process, {ROUNDS} rounds alternating the two sides, each figure the "
        "best of the rounds in CPU time (the machine is shared with other jobs). "
        f"Load average {m.load_before:.1f} before and {m.load_after:.1f} after.\n\n"
        f"### The service's pass with no object changed, against its first ({NODES:,} nodes x 8 GPUs)\n\n"
        f"The planner benchmark's cluster ({NODES:,} nodes, {PREEMPTORS} preemptors; "
        "tests/bench/bench_planner.py) with every object dressed as the API lists it (uid, "
        "resourceVersion, managedFields, owner, env, volumes, statuses; tests/bench/bench_loading.py's full "
        f"pods), objects per kind: {objects}. "
        "The real `KubernetesAdapter.snapshot` reads them from an in-process stand-in of the list calls "
        "(tests/bench/bench_automator_memory.py) that answers pages of JSON bytes made beforehand, so the "
        "list calls themselves cost nothing measured; then `usage_windows` and `plan` with the service's "
        "default settings, the usage as the Prometheus adapter would hand it. Each round: a new adapter's "
        "first pass, then a second pass of the same adapter over the same pages (the same plan, checked).\n\n"
        "| pass | pods listed | pods decoded | reading the pages into records | usage windows and plan "
        "| pass | decisions |\n"
        "|---|---:|---:|---:|---:|---:|---:|\n"
        + rows
        + "\n\n"
        + ratio_line("the unchanged pass against the first", pass_ratio, GOAL_UNCHANGED)
        + f" {pass_rounds}\n\n"
        "### `gpu-automator plan` on the 10,000-pod JSON dump, against `json.load` of it\n\n"
        "tests/bench/bench_loading.py's full-pods dump (1,250 nodes, 10,000 running pods, 100 preemptors, "
        "as one `kubectl get -o json` List, indented as kubectl writes it) and its usage file. Each run is a "
        "fresh process (CPU = its user + system time); the two commands alternate.\n\n"
        "| command | file | CPU | wall |\n|---|---:|---:|---:|\n"
        f"| `gpu-automator plan --cluster FILE --usage FILE --output json` | {m.dump_mb:.0f} MB | "
        f"{_s(plan_run.cpu)} | {_s(plan_run.wall)} |\n"
        f"| `python -c 'json.load(open(FILE))'` | {m.dump_mb:.0f} MB | {_s(load_run.cpu)} | "
        f"{_s(load_run.wall)} |\n\n"
        + ratio_line("`plan` against `json.load`", cli_ratio, GOAL_PLAN_AGAINST_LOAD)
        + f" {cli_rounds}\n\n"
        f"### Decoding the pods with the parsed-quantity memo, against without it ({NODES:,} nodes)\n\n"
        "The project's one speed-only memo: `parse_quantity` (steward_common/quantity.py) keeps each "
        "distinct quantity text it parsed, because a cluster repeats a few literals (cpu, memory, GPU "
        "counts) on thousands of pods. `pod_record` of each of the service benchmark's "
        f"{m.counts.get('Pod', 0):,} pods, the memo emptied before each round, alternated with the same "
        "decoding calling the parser directly; garbage collection paused as the snapshot does.\n\n"
        "| decoding | CPU |\n|---|---:|\n"
        f"| with the memo | {_s(min(m.with_memo))} |\n"
        f"| the parser called directly | {_s(min(m.without_memo))} |\n\n"
        + ratio_line("decoding with the memo against without it", memo_ratio, GOAL_MEMO)
        + f" {memo_rounds}\n\n"
        "### The DRA pass with no object changed, against its first (50,000 claims)\n\n"
        "Measured and judged in one place: the last goal of the section *DRA capacity check* "
        "(tests/bench/bench_dra.py, the service pass's first and unchanged columns), in the same "
        "`make bench` run.\n\n"
        "### The pass at 5,000 nodes against the code before the records (hand-run)\n\n"
        "It needs the previous code, so `make bench` does not run it. Measured by hand on 2026-12-02, "
        "`tests.bench.bench_planner.generate(5000, 500)` then `plan()` on the same ClusterState, with "
        "`PYTHONPATH=<a checkout of main before the change>` alternated with the new code in the same "
        "minutes, best of runs, CPU time: previous code 0.400 s, records 0.388 s: 0.97x. Goal: at most "
        "1.1x: met.\n"
    )


def main() -> str:
    load_before = os.getloadavg()[0]
    objects, usage = dump_items(True, NODES, PREEMPTORS)
    kinds = _by_kind(objects)
    del objects
    firsts, unchanged, counts = service_passes(ROUNDS, kinds, usage)
    with_memo, without = memo_decodes(ROUNDS, kinds["Pod"])
    del kinds
    with tempfile.TemporaryDirectory(prefix="bench-records-") as tmp:
        plans, loads, mb = plan_against_load(Path(tmp), ROUNDS)
    return section(
        Measured(
            firsts, unchanged, counts, plans, loads, mb, with_memo, without, load_before, os.getloadavg()[0]
        )
    )


if __name__ == "__main__":
    sys.stdout.write(main())
