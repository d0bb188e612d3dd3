"""Backtest peak memory at 10,000 pods against 1,000 pods, one day at the default step, same run.

A stand-in for Prometheus (this module run as `serve`, its own process so that its memory is not counted)
answers the backtest's queries from templates: kube-state-metrics range answers for N running GPU pods
on N / 8 nodes (about 11 series per pod: info, phase, three times, three requests, one limit, and the
nodes'), the live adapter's usage queries (every pod busy: nothing is evicted, every step plans over the
whole cluster) and the evidence query. Each size runs `run_backtest` in a fresh process whose peak
resident memory (VmHWM) is read when it ends. The time per step against a live pass is bench_backtest's.

`main()` returns a markdown section for docs/benchmarks.md (tests/bench/run_all.py). Smaller sizes for a
quick look: `BENCH_BACKTEST_PODS=100,1000 BENCH_BACKTEST_HOURS=2`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

ROOT = Path(__file__).resolve().parents[2]
SIZES = tuple(int(n) for n in os.environ.get("BENCH_BACKTEST_PODS", "1000,10000").split(","))
HOURS = float(os.environ.get("BENCH_BACKTEST_HOURS", "24"))
STEP = 30  # the default step: run's --interval
PODS_PER_NODE = 8
GOAL_RATIO = 12.0  # peak at 10x the pods: linear, no fixed blow-up
GOAL_PEAK_MIB = 1024
MIB = 1024 * 1024


def _series(pods: int) -> dict[str, list[tuple[str, str]]]:
    """metric -> (labels as JSON, value) of each series."""

    def pod(i: int, **extra: str) -> str:
        return json.dumps({"namespace": "ml", "pod": f"p{i}", "uid": f"u{i}", **extra})

    nodes = max(1, pods // PODS_PER_NODE)
    started = "1000000000"
    out: dict[str, list[tuple[str, str]]] = {
        "kube_pod_info": [
            (pod(i, node=f"n{i % nodes}", created_by_kind="Job", created_by_name=f"j{i}"), "1")
            for i in range(pods)
        ],
        "kube_pod_status_phase": [(pod(i, phase="Running"), "1") for i in range(pods)],
        "kube_pod_created": [(pod(i), started) for i in range(pods)],
        "kube_pod_start_time": [(pod(i), started) for i in range(pods)],
        "kube_pod_status_scheduled_time": [(pod(i), started) for i in range(pods)],
        "kube_pod_container_resource_requests": [
            (pod(i, container="main", resource=r), v)
            for i in range(pods)
            for r, v in (("nvidia_com_gpu", "1"), ("cpu", "2"), ("memory", "8589934592"))
        ],
        "kube_pod_container_resource_limits": [
            (pod(i, container="main", resource="nvidia_com_gpu"), "1") for i in range(pods)
        ],
        "kube_node_status_allocatable": [
            (json.dumps({"node": f"n{n}", "resource": r}), v)
            for n in range(nodes)
            for r, v in (("nvidia_com_gpu", "8"), ("cpu", "64"), ("memory", "549755813888"))
        ],
    }
    return out


class _Answers:
    def __init__(self, pods: int) -> None:
        self.series = _series(pods)
        self.keys = [json.loads(labels) for labels, _ in self.series["kube_pod_info"]]

    def range(self, query: str, start: int, end: int, step: int) -> bytes:
        metric = query.split("{")[0].split(" ")[0]
        stamps = range(start, end + 1, step)
        blobs: dict[str, bytes] = {}
        parts = []
        for labels, value in self.series.get(metric, []):
            if value not in blobs:
                blobs[value] = ",".join(f'[{t},"{value}"]' for t in stamps).encode()
            parts.append(b'{"metric":' + labels.encode() + b',"values":[' + blobs[value] + b"]}")
        return b'{"status":"success","data":{"resultType":"matrix","result":[' + b",".join(parts) + b"]}}"

    def instant(self, query: str, at: float) -> bytes:
        def sample(labels: dict[str, str], value: float) -> str:
            return json.dumps({"metric": labels, "value": [at, repr(value)]})

        pairs = [{"namespace": k["namespace"], "pod": k["pod"]} for k in self.keys]
        if "clock" in query:  # the recent window: each pod's maximum and newest sample, and the clock
            rows = [sample(p, 0.9) for p in pairs] + [sample({**p, "stat": "newest"}, at) for p in pairs]
            rows.append(sample({"stat": "clock"}, at))
        elif "count_over_time" in query:  # a GPU window: average and sample count
            rows = [sample(p, 0.9) for p in pairs] + [sample({**p, "stat": "count"}, 1e6) for p in pairs]
        elif "kube_pod_info" in query:  # evidence: where each pod was bound
            rows = [sample(k, 1.0) for k in self.keys]
        else:
            rows = []
        kind = "vector"
        return f'{{"status":"success","data":{{"resultType":"{kind}","result":[{",".join(rows)}]}}}}'.encode()


def serve(pods: int, port_file: str) -> None:
    answers = _Answers(pods)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            args = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path.endswith("/query_range"):
                step = int(args["step"].removesuffix("s"))
                body = answers.range(args["query"], int(args["start"]), int(args["end"]), step)
            else:
                body = answers.instant(args["query"], float(args.get("time", time.time())))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Path(port_file).write_text(str(server.server_address[1]))
    server.serve_forever()


def run(url: str, hours: float) -> None:
    """One backtest over `hours` at the default step, in this process; prints steps, seconds, peak KiB."""
    from automator import cli
    from automator.backtest.cli import policies
    from automator.backtest.run import run_backtest
    from automator.prom import PrometheusAdapter

    end = 1_700_000_000
    start = end - int(hours * 3600)
    args = cli.build_parser().parse_args(["backtest", "--prometheus", url, "--from", "0", "--to", "1"])
    started = time.monotonic()
    result = run_backtest(PrometheusAdapter(url, timeout=300), start, end, STEP, 1800, policies(args), [])
    seconds = time.monotonic() - started
    status = Path("/proc/self/status").read_text()
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    print(
        json.dumps({"steps": result.steps, "seconds": seconds, "peak_kib": peak, "queries": result.queries})
    )


def measure(pods: int, hours: float, work: Path) -> dict[str, float]:
    port_file = work / f"port-{pods}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    me = [sys.executable, "-m", "tests.bench.bench_backtest_memory"]
    server = subprocess.Popen([*me, "serve", str(pods), str(port_file)], env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("the Prometheus stand-in did not start")
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        done = subprocess.run(
            [*me, "run", url, str(hours)], env=env, cwd=ROOT, capture_output=True, text=True, check=True
        )
        found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
        return found
    finally:
        server.terminate()
        server.wait(30)


def main() -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        small, large = (measure(n, HOURS, Path(tmp)) for n in SIZES)
    ratio = large["peak_kib"] / small["peak_kib"]
    peak_mib = large["peak_kib"] * 1024 / MIB
    goal_ratio = "met" if ratio <= GOAL_RATIO else "NOT met"
    goal_peak = "met" if peak_mib < GOAL_PEAK_MIB else "NOT met"
    rows = "".join(
        f"| {n:,} | {m['steps']:,.0f} | {m['queries']:,.0f} | {m['seconds']:.0f} s | "
        f"{m['seconds'] / m['steps'] * 1000:.1f} ms | {m['peak_kib'] / 1024:.0f} MiB |\n"
        for n, m in zip(SIZES, (small, large), strict=True)
    )
    return (
        "## Backtest memory (`gpu-automator backtest` at fleet scale)\n\n"
        "Command: `.venv/bin/python -m tests.bench.run_all bench_backtest_memory`.\n\n"
        f"{HOURS:g} hours at the default {STEP}-s step against a stand-in Prometheus answering from "
        f"templates (tests/bench/bench_backtest_memory.py: running GPU pods on nodes of {PODS_PER_NODE}, "
        "about 11 kube-state-metrics series per pod, every pod busy), each size in a fresh process: its peak "
        "resident memory (VmHWM), interpreter and imports included.\n\n"
        "| pods | steps | Prometheus queries | wall time | per step | peak memory |\n"
        "|---|---|---|---|---|---|\n"
        f"{rows}\n"
        f"Peak at {SIZES[1]:,} pods against {SIZES[0]:,}: **{ratio:.1f}x** (goal: at most {GOAL_RATIO:g}x: "
        f"{goal_ratio}); at {SIZES[1]:,} pods {peak_mib:.0f} MiB (goal: under {GOAL_PEAK_MIB} MiB: "
        f"{goal_peak}).\n"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(int(sys.argv[2]), sys.argv[3])
    elif sys.argv[1:2] == ["run"]:
        run(sys.argv[2], float(sys.argv[3]))
    else:
        print(main())
