"""Recording rules at fleet scale: a real Prometheus evaluating rules/ on a synthetic fleet.

For 1,000 and 10,000 GPUs (125 and 1,250 nodes x 8, tests/bench/fleet.py: shared GPUs, multi-GPU pods,
sidecars, 1 % of the pods recreated per 30 s): the history the rules read is backfilled with
`promtool tsdb create-blocks-from openmetrics` (pod activity over 1 h for coverage, the idle flag, clock,
carry, GPUs held and evaluation timestamp over 6 minutes, the running idle total over 24 h 6 min), then
Prometheus scrapes one target per node every 30 s with rules/gpu-steward.yaml loaded, unchanged. Once
every target has been scraped and the rules' 5-minute windows (the lookback of `offset 1s`, the carry's
`[5m]`) no longer reach into the backfilled blocks (a running Prometheus holds its last hours in the head:
reading recent windows from a block merged with the head is a start-up artefact that cost 40 % more CPU),
each evaluation of each group is read: its duration (`prometheus_rule_group_last_duration_seconds` from
Prometheus' /metrics) and each rule's (`evaluationTime` of /api/v1/rules). At the end scraping and rule
evaluation are stopped (a config reload without them) and every rule's expression runs as an instant
query at the time of the last measured evaluation, with `stats=all`: the samples it reads and the CPU
Prometheus spends on it alone.

Raw exporter history is not backfilled: the rules read raw series over one interval only (`[29s999ms]`),
so only the live scrapes matter; 24 h of raw history at 10,000 GPUs would be ~170 M samples.

Goal: each group under 1 s at 10,000 GPUs; growth from 1,000 to 10,000 GPUs close to linear (10x).
`main()` returns the section of docs/benchmarks.md (tests/bench/run_all.py). Alone:
`.venv/bin/python -m tests.bench.bench_rules`. Sizes: env
GPU_STEWARD_BENCH_RULES_GPUS (default "1000,10000"); evaluations per group:
GPU_STEWARD_BENCH_RULES_FAST (default 8) and ..._SLOW (default 2).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from steward_common import series
from tests.bench import fleet
from tools.fakes.promserver import ROOT, Prometheus, free_port, start_prometheus, stop, wait_http

RULES = ROOT / "rules" / "gpu-steward.yaml"
WORK = ROOT / ".bench" / "rules"
RECENT_EPOCHS = 12  # 6 minutes: `offset 1s` and `last_over_time(...[5m])` look back 5 minutes
LOOKBACK_SECONDS = 5 * 60 + 1  # the longest recent window: `x offset 1s` looks back 5 minutes before it
ACTIVITY_EPOCHS = 120  # 1 hour: coverage_1h
TOTAL_EPOCHS = 24 * 120 + RECENT_EPOCHS  # 24 h 6 min: idle_gpu_hours_24h reads `offset 24h1s`
GOAL_SECONDS = 1.0
QUERY_RUNS = 3  # each rule's expression is run this often as an instant query after the measurement
READY_TIMEOUT = 420  # seconds from the start of the measurement phase to the first evaluation that counts
NICE = -10  # Prometheus' threads, so that other work on the shared machine inflates its times less


def _env_int(name: str, default: int) -> int:
    value = int(os.environ.get(name, default))
    if not 1 <= value <= 1000:
        raise ValueError(f"{name} must be 1-1000")
    return value


@dataclass
class Size:
    gpus: int
    nodes: int
    pods: int
    shared_gpus: int
    raw_series: int = 0
    head_series: int = 0
    backfill_samples: int = 0
    backfill_seconds: float = 0.0
    group_seconds: dict[str, list[float]] = field(default_factory=dict)
    rule_seconds: dict[str, list[float]] = field(default_factory=dict)  # by "group/record"
    rule_samples: dict[str, int] = field(default_factory=dict)
    rule_cpu: dict[str, float] = field(default_factory=dict)  # Prometheus CPU seconds, best of QUERY_RUNS
    wall_seconds: float = 0.0
    history_end: float = 0.0  # time of the last backfilled sample
    niced: bool = False
    cpu_pressure: float = 0.0  # /proc/pressure/cpu "some avg60" at the end, percent
    prometheus_cpu: float = 0.0  # Prometheus' CPU seconds per second of the measurement
    prometheus_wait: float = 0.0  # seconds its threads waited for a CPU per second they ran (schedstat)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=120) as r:
        return json.load(r) if "json" in r.headers.get("Content-Type", "") else r.read().decode()


def _group_durations(prom: Prometheus) -> dict[str, float]:
    text: str = _get(f"{prom.url}/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith("prometheus_rule_group_last_duration_seconds{"):
            labels, value = line.rsplit(" ", 1)
            group = labels.split('rule_group="', 1)[1].split('"', 1)[0].rsplit(";", 1)[-1]
            out[group] = float(value)
    return out


def _fleet_shape(nodes: int, seed: int) -> tuple[int, int]:
    pods = shared = 0
    for n in range(nodes):
        now = fleet.pods(n, seed, 0)
        pods += len(now)
        holders: dict[int, int] = {}
        for p in now:
            for g in p.gpus:
                holders[g] = holders.get(g, 0) + 1
        shared += sum(1 for c in holders.values() if c > 1)
    return pods, shared


def _samples_read(prom: Prometheus, expr: str, at: float) -> int:
    q = urllib.parse.urlencode({"query": expr, "stats": "all", "time": f"{at:.3f}"})
    body = _get(f"{prom.url}/api/v1/query?{q}")
    stats = body["data"].get("stats", {}).get("samples", {})
    return int(stats.get("totalQueryableSamples", -1))


@contextmanager
def fleet_prometheus(gpus: int, seed: int = 1) -> Iterator[tuple[Prometheus, Size]]:
    """The synthetic fleet of `gpus` GPUs served, its history backfilled, and Prometheus evaluating the
    rules on it; everything stopped and removed on exit."""
    nodes = gpus // fleet.GPUS_PER_NODE
    pods, shared = _fleet_shape(nodes, seed)
    size = Size(gpus=gpus, nodes=nodes, pods=pods, shared_gpus=shared)
    work = WORK / str(gpus)
    shutil.rmtree(work, ignore_errors=True)
    (work / "data").mkdir(parents=True)
    t0 = math.floor(time.time() / fleet.EPOCH_SECONDS) * fleet.EPOCH_SECONDS
    size.history_end = t0 - fleet.EPOCH_SECONDS
    t = time.monotonic()
    om = work / "backfill.om"
    with om.open("w") as out:
        size.backfill_samples = fleet.backfill(
            out, nodes, seed, t0, recent=RECENT_EPOCHS, activity=ACTIVITY_EPOCHS, totals=TOTAL_EPOCHS
        )
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(work / "data")],
        check=True,
        capture_output=True,
        timeout=600,
    )
    om.unlink()
    size.backfill_seconds = time.monotonic() - t
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.bench.fleet",
            "--nodes",
            str(nodes),
            "--port",
            str(port),
            "--t0",
            str(t0),
        ],
        cwd=ROOT,
        stdout=(work / "fleet.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    prom = None
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics?node={fleet.node_name(0)}")
        prom = start_prometheus(
            work,
            {},
            rule_files=[RULES],
            scrape_interval=f"{fleet.EPOCH_SECONDS}s",
            evaluation_interval=f"{fleet.EPOCH_SECONDS}s",
            extra_scrape_configs=fleet.scrape_configs(nodes, port),
        )
        size.niced = _raise_priority(prom.proc.pid)
        yield prom, size
    finally:
        if prom is not None:
            prom.stop()
        stop(server)
        shutil.rmtree(work, ignore_errors=True)


def _raise_priority(pid: int) -> bool:
    """Nice -10 for every thread of `pid` (threads it starts later inherit it); False without the right."""
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.setpriority(os.PRIO_PROCESS, int(tid), NICE)
    except (PermissionError, FileNotFoundError):
        return False
    return True


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sched(pid: int) -> tuple[int, int]:
    """(ns on a CPU, ns waiting for one) summed over the threads of `pid` (/proc/<pid>/task/*/schedstat)."""
    run = wait = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except OSError:  # a thread that ended meanwhile
            continue
        run, wait = run + int(fields[0]), wait + int(fields[1])
    return run, wait


def _cpu_pressure() -> float:
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return float("nan")
    return float(some.split("avg60=", 1)[1].split()[0])


def measure(gpus: int, fast_evals: int, slow_evals: int) -> Size:
    started = time.monotonic()
    with fleet_prometheus(gpus) as (prom, size):
        _run(prom, size, fast_evals, slow_evals)
    size.wall_seconds = time.monotonic() - started
    return size


def _run(prom: Prometheus, size: Size, fast_evals: int, slow_evals: int) -> None:
    # Ready once every target has been scraped; an evaluation counts when it starts a full interval later.
    deadline = time.monotonic() + 120
    while not prom.query(f"count(up == 1) == {size.nodes}"):
        if time.monotonic() > deadline:
            raise TimeoutError("the fleet's targets are not all up after 120 s")
        time.sleep(2)
    # ... and once its recent windows read the head only (see the module docstring).
    ready = max(time.time() + fleet.EPOCH_SECONDS, size.history_end + LOOKBACK_SECONDS)
    cpu_started, wall_started = _cpu_seconds(prom.proc.pid), time.monotonic()
    sched_started = _sched(prom.proc.pid)
    wanted = {series.FAST_GROUP: fast_evals, series.SLOW_GROUP: slow_evals}
    seen: dict[str, str] = {}
    deadline = (
        time.monotonic()
        + max(0.0, ready - time.time())
        + 60
        + max(n * series.GROUP_INTERVALS[g] for g, n in wanted.items()) * 1.5
    )
    while time.monotonic() < deadline:
        groups = _get(f"{prom.url}/api/v1/rules?type=record")["data"]["groups"]
        durations = _group_durations(prom)
        for group in groups:
            name, last = group["name"], group["lastEvaluation"]
            if seen.get(name) == last or _unix(last) < ready:
                continue
            seen[name] = last
            size.group_seconds.setdefault(name, []).append(durations[name])
            for rule in group["rules"]:
                size.rule_seconds.setdefault(f"{name}/{rule['name']}", []).append(
                    float(rule["evaluationTime"])
                )
        if all(len(size.group_seconds.get(g, [])) >= n for g, n in wanted.items()):
            break
        time.sleep(2)
    size.prometheus_cpu = (_cpu_seconds(prom.proc.pid) - cpu_started) / (time.monotonic() - wall_started)
    run, wait = (b - a for a, b in zip(sched_started, _sched(prom.proc.pid), strict=True))
    size.prometheus_wait = wait / run if run > 0 else float("nan")
    size.cpu_pressure = _cpu_pressure()
    size.raw_series = (
        sum(fleet.render(n, 1, 0).count("\n") for n in range(size.nodes)) - 2 * len(fleet.SERVED) * size.nodes
    )
    try:
        size.head_series = int(_get(f"{prom.url}/api/v1/status/tsdb")["data"]["headStats"]["numSeries"])
    except OSError:  # a loaded machine: keep the timings rather than fail the run
        size.head_series = -1
    # Each rule alone: scraping and rule evaluation stopped, its expression at the last measured evaluation.
    at = _unix(seen[series.FAST_GROUP]) if series.FAST_GROUP in seen else time.time()
    _pause(prom)
    rules = yaml.safe_load(RULES.read_text())["groups"]
    for group in rules:
        for rule in group["rules"]:
            key = f"{group['name']}/{rule['record']}"
            cpu, samples = math.inf, -1
            for _ in range(QUERY_RUNS):
                before = _cpu_seconds(prom.proc.pid)
                try:
                    samples = _samples_read(prom, rule["expr"], at)
                except OSError:
                    continue
                cpu = min(cpu, _cpu_seconds(prom.proc.pid) - before)
            size.rule_samples[key] = samples
            if math.isfinite(cpu):
                size.rule_cpu[key] = cpu


def _pause(prom: Prometheus) -> None:
    """Reload Prometheus without scrape configs and rule files: nothing but the benchmark's queries runs.
    The series then end in stale markers, after the time the queries read."""
    path = prom.workdir / "prometheus.yml"
    config = yaml.safe_load(path.read_text())
    config["scrape_configs"], config["rule_files"] = [], []
    path.write_text(yaml.safe_dump(config))
    request = urllib.request.Request(f"{prom.url}/-/reload", method="POST")
    with urllib.request.urlopen(request, timeout=120):
        pass


def _unix(rfc3339: str) -> float:
    """Seconds of an RFC 3339 UTC time as Prometheus writes it (nanoseconds, `Z`); 0 for Go's zero time."""
    if rfc3339.startswith("0001-"):
        return 0.0
    text = rfc3339.removesuffix("Z").removesuffix("+00:00")
    whole, _, frac = text.partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float("0." + (frac or "0"))


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:,.0f} ms" if values else "n/a"


def report(sizes: list[Size], command: str) -> str:
    small, large = sizes[0], sizes[-1]
    groups = [series.FAST_GROUP, series.SLOW_GROUP]
    lines = [
        "## Recording rules at fleet scale",
        "",
        f"Command: `{command}` (prints the section; `make bench` runs it with the others and writes it "
        "here); measured "
        f"{time.strftime('%Y-%m-%d')} with Prometheus "
        f"{_prometheus_version()} on the shared 2-core development machine.",
        "",
        "tests/bench/bench_rules.py: a synthetic exporter (tests/bench/fleet.py) serves the exporter's own "
        "names, help and labels (from steward_common/metrics.py) for N nodes x 8 GPUs: one-GPU, 4-GPU and "
        "8-GPU pods, GPUs time-sliced by 2-3 pods, sidecar containers running a process on a GPU they "
        "are not allocated, 5 % of the pods with one reading missing, 10 % bursty, and churn (every pod "
        "recreated under a new name after 10-100 minutes, about 1 % per 30 s). Prometheus scrapes one "
        "target per node every 30 s (the synthetic exporter serves each from a bounded thread pool, "
        "so a scrape that is slow to start does not hold the others) and evaluates "
        "rules/gpu-steward.yaml as shipped (fast group 30 s, "
        "slow group 2 m). History the rules read is backfilled with `promtool tsdb create-blocks-from "
        "openmetrics`: the pod activity over 1 h (coverage), the idle flag, clock, carry, GPUs held and "
        "the evaluation timestamp over 6 minutes (`offset 1s`, `[5m]`), the running idle total over "
        "24 h 6 min (`offset 24h1s`). Raw exporter history is not backfilled: the rules read raw series "
        "over one interval only, and 24 h of it at 10,000 GPUs would be ~170 M samples. Times are "
        "medians over the evaluations after every target had been scraped and once the rules' 5-minute "
        "windows read only what Prometheus itself had scraped and recorded (its head, as in a running "
        "Prometheus; reading them merged from the backfilled blocks is a start-up artefact that cost "
        "40 % more CPU); the slowest in brackets. "
        f"Prometheus runs at nice {NICE} when the benchmark may set it (root), so that other work on the "
        "shared machine inflates its times less; *Prometheus CPU* is the CPU it used per second of "
        "the measurement (scraping, evaluating, serving the benchmark's reads), *CPU wait* how long its "
        "threads waited for a CPU per second they ran (`/proc/<pid>/task/*/schedstat`), *CPU pressure* "
        "the machine's `/proc/pressure/cpu` `some avg60` at the end (the share of time runnable work "
        "waited for a CPU).",
        "",
        "| GPUs | nodes | pods | shared GPUs | exporter series | head series | backfilled samples | "
        "Prometheus CPU | CPU wait | CPU pressure | "
        + " | ".join(f"`{g}` (median, max)" for g in groups)
        + " |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(groups),
    ]
    for s in sizes:
        cells = [_cell(s.group_seconds.get(g, [])) for g in groups]
        lines.append(
            f"| {s.gpus:,} | {s.nodes:,} | {s.pods:,} | {s.shared_gpus:,} | {s.raw_series:,} | "
            f"{s.head_series:,} | {s.backfill_samples:,} | {s.prometheus_cpu:.2f} cores | "
            f"{s.prometheus_wait:.2f} s/s | {s.cpu_pressure:.0f} % | " + " | ".join(cells) + " |"
        )
    lines.append("")
    verdicts = []
    for g in groups:
        a, b = small.group_seconds.get(g), large.group_seconds.get(g)
        if not a or not b:
            verdicts.append(f"`{g}`: not measured at both sizes")
            continue
        ratio = statistics.median(b) / statistics.median(a)
        goal = "met" if statistics.median(b) < GOAL_SECONDS else "NOT met"
        verdicts.append(
            f"`{g}`: {ratio:.1f}x the time for {large.gpus / small.gpus:.0f}x the GPUs; under 1 s at "
            f"{large.gpus:,} GPUs: {goal}"
        )
    lines.append(
        "Goal: each group under 1 s at 10,000 GPUs, close to linear growth. " + "; ".join(verdicts) + "."
    )
    lines += ["", _samples_line(sizes, groups), "", _cpu_line(sizes, groups), "", _conditions(sizes)]
    lines += [
        "",
        f"### Per rule at {large.gpus:,} GPUs",
        "",
        "Median `evaluationTime` of each rule (/api/v1/rules) over the evaluations above, and the samples it "
        "reads (`totalQueryableSamples` of the same expression run once as an instant query with "
        f"`stats=all`). At {small.gpus:,} GPUs for comparison. "
        "Both are taken after the measurement, with scraping and rule evaluation stopped, at the time of "
        "the last measured evaluation: where scrapes fell behind (a starved Prometheus) the samples "
        "undercount. *CPU* is the CPU time Prometheus used answering that query and nothing else (best "
        f"of {QUERY_RUNS}, /proc, 10 ms ticks): the rule's own cost on this machine, which hardly depends "
        "on other work on it (the result is returned as JSON instead of being written to the head: "
        "about the same work).",
        "",
        f"| group | series | {large.gpus:,} GPUs | samples read | CPU | {small.gpus:,} GPUs | CPU |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for key, values in large.rule_seconds.items():
        group, record = key.split("/", 1)
        short = "fast" if group == series.FAST_GROUP else "slow"
        lines.append(
            f"| {short} | `{record}` | {_ms_fine(values)} | {large.rule_samples.get(key, -1):,} | "
            f"{_cpu_ms(large, key)} | {_ms_fine(small.rule_seconds.get(key, []))} | {_cpu_ms(small, key)} |"
        )
    for g in groups:
        short = "fast" if g == series.FAST_GROUP else "slow"
        lines.append(f"| {short} | **sum** | | | {_cpu_ms(large, g + '/')} | | {_cpu_ms(small, g + '/')} |")
    total = sum(s.wall_seconds for s in sizes)
    lines += [
        "",
        f"Wall time of the benchmark: {total / 60:.1f} min ("
        + ", ".join(
            f"{s.gpus:,} GPUs {s.wall_seconds / 60:.1f} min, backfill {s.backfill_seconds:.0f} s"
            for s in sizes
        )
        + ").",
    ]
    return "\n".join(lines) + "\n"


PRESSURE_NOTE = 20.0  # percent of CPU pressure above which the times are stated as upper bounds


def _samples_line(sizes: list[Size], groups: list[str]) -> str:
    """Samples read per evaluation by each group: a cost that does not depend on the machine's load."""
    cells = []
    for g in groups:
        per_size = []
        for s in sizes:
            values = [v for k, v in s.rule_samples.items() if k.startswith(g + "/") and v >= 0]
            per_size.append(f"{sum(values):,} at {s.gpus:,} GPUs")
        cells.append(f"`{g}` " + ", ".join(per_size))
    return (
        "Samples read per evaluation (the sum of the group's rules' `totalQueryableSamples`, which does "
        "not depend on the machine's load): " + "; ".join(cells) + "."
    )


def _cpu_line(sizes: list[Size], groups: list[str]) -> str:
    """CPU of one evaluation of each group, its rules alone: what it would take on an otherwise idle CPU."""
    cells = []
    for g in groups:
        per_size = [f"{_cpu_ms(s, g + '/')} at {s.gpus:,} GPUs" for s in sizes]
        cells.append(f"`{g}` " + ", ".join(per_size))
    return (
        "CPU of one evaluation, each rule's expression alone (the per-rule table below, summed): "
        + "; ".join(cells)
        + ". Prometheus evaluates a group's rules one after the other, so this is about the wall time of "
        "an evaluation on an otherwise idle machine; what the evaluations took above adds the wait for "
        "a CPU (*CPU wait*) and Prometheus' own scraping."
    )


def _conditions(sizes: list[Size]) -> str:
    loaded = [s for s in sizes if s.cpu_pressure > PRESSURE_NOTE]
    if not loaded:
        return "CPU pressure stayed under 20 %: the times are the rules' cost on this machine."
    return (
        "Conditions: CPU pressure "
        + ", ".join(f"{s.cpu_pressure:.0f} % at {s.gpus:,} GPUs" for s in loaded)
        + " (other work on the shared 2-core machine; Prometheus got "
        + ", ".join(f"{s.prometheus_cpu:.2f}" for s in loaded)
        + " cores): an evaluation waits for a CPU much of its wall time, so these times are upper "
        "bounds of the rules' cost, not their cost on an idle machine; the samples read above are not "
        "affected." + _cpu_growth(sizes)
    )


def _cpu_growth(sizes: list[Size]) -> str:
    small, large = sizes[0], sizes[-1]
    if len(sizes) < 2 or small.prometheus_cpu <= 0:
        return ""
    return (
        f" Prometheus' CPU grew {large.prometheus_cpu / small.prometheus_cpu:.1f}x for "
        f"{large.gpus / small.gpus:.0f}x the GPUs ({large.prometheus_cpu * series.RULE_INTERVAL_SECONDS:.1f} "
        f"CPU-seconds per fast interval at {large.gpus:,} GPUs, scraping and both groups together)."
    )


def _cpu_ms(size: Size, key: str) -> str:
    """The rule's CPU as a query; with a key ending in "/" the sum over that group's rules."""
    if key.endswith("/"):
        values = [v for k, v in size.rule_cpu.items() if k.startswith(key)]
        return f"{sum(values) * 1000:,.0f} ms" if values else "n/a"
    return f"{size.rule_cpu[key] * 1000:,.0f} ms" if key in size.rule_cpu else "n/a"


def _cell(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{_ms(values)} ({_ms([max(values)])}, {len(values)} evaluations)"


def _ms_fine(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:,.1f} ms" if values else "n/a"


def _prometheus_version() -> str:
    out = subprocess.run(["prometheus", "--version"], capture_output=True, text=True, check=False)
    first = (out.stdout or out.stderr).split("\n", 1)[0]
    return first.split("version ", 1)[-1].split(" ", 1)[0]


def main() -> str:
    sizes = [int(g) for g in os.environ.get("GPU_STEWARD_BENCH_RULES_GPUS", "1000,10000").split(",")]
    fast = _env_int("GPU_STEWARD_BENCH_RULES_FAST", 8)
    slow = _env_int("GPU_STEWARD_BENCH_RULES_SLOW", 2)
    results = []
    for gpus in sizes:
        if gpus % fleet.GPUS_PER_NODE or not 8 <= gpus <= 100_000:
            raise ValueError(f"GPU count {gpus}: a multiple of 8 from 8 to 100,000")
        results.append(measure(gpus, fast, slow))
        print(json.dumps(dataclasses.asdict(results[-1])), file=sys.stderr, flush=True)
    env = " ".join(
        f"{k}={os.environ[k]}" for k in sorted(os.environ) if k.startswith("GPU_STEWARD_BENCH_RULES_")
    )
    return report(results, f"{env} .venv/bin/python -m tests.bench.bench_rules".strip())


if __name__ == "__main__":
    sys.stdout.write(main())
