"""KEDA endpoint benchmark: wrk against the running service's /keda/v1/metrics on loopback, for 1 and
1,000 declared workloads, side by side with the same question asked of Prometheus directly (one PromQL
query per request, what KEDA's prometheus scaler does); a declared workload's latency with and without a
flood of undeclared questions, in the same run; and the Prometheus queries one refresh runs for 10 and for
10,000 declared ScaledObjects.

Prometheus holds 20 minutes of backfilled recorded series for 1,000 one-pod Deployments; the service reads
the cluster and one ScaledObject per Deployment from a snapshot file (declared mode). The answers are
computed by the first refresh; the refresh is set to an hour so that no refresh runs while wrk measures.
`main()` returns a markdown section for docs/benchmarks.md (tests/bench/run_all.py). The wrk parts need
wrk (Debian package `wrk`); the queries-per-refresh part does not.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from automator.keda.signals import GATES, Base
from steward_common.series import CONTAINER_UTILIZATION, RULE_INTERVAL_SECONDS
from tools.fakes.promserver import ROOT, free_port, start_backfilled_prometheus, stop, wait_http

WORKLOADS = 1000
NAMESPACE = "bench"
DURATION_S = 10
THREADS, CONNECTIONS = 2, 8
PROFILE = "triton-inference"  # gpu_utilization, avg over 120 s


def _openmetrics(end: int) -> str:
    samples = range(40)  # 20 minutes at the rule interval
    lines = [f"# TYPE {GATES[Base.UTILIZATION]} gauge"]
    for w in range(WORKLOADS):
        value = (w % 100) / 100
        lines += [
            f'{GATES[Base.UTILIZATION]}{{namespace="{NAMESPACE}",pod="w{w}-0"}} {value} '
            f"{end - RULE_INTERVAL_SECONDS * i}"
            for i in reversed(samples)
        ]
    lines.append(f"# TYPE {CONTAINER_UTILIZATION} gauge")
    for w in range(WORKLOADS):
        value = (w % 100) / 100
        labels = f'node="n{w // 8}",namespace="{NAMESPACE}",pod="w{w}-0",container="main",uuid="GPU-{w}"'
        lines += [
            f"{CONTAINER_UTILIZATION}{{{labels}}} {value} {end - RULE_INTERVAL_SECONDS * i}"
            for i in reversed(samples)
        ]
    return "\n".join(lines) + "\n# EOF\n"


def _scaled_object(name: str, namespace: str = NAMESPACE) -> dict[str, object]:
    """The ScaledObject `gpu-automator keda scaledobject` would print for the Deployment (its trigger)."""
    base = "http://gpu-steward-automator.gpu-steward.svc:8080/keda/v1/metrics"
    url = f"{base}?namespace={namespace}&deployment={name}&profile={PROFILE}"
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": f"{name}-gpu", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"name": name},
            "triggers": [{"type": "metrics-api", "metadata": {"url": url, "valueLocation": "value"}}],
        },
    }


def _cluster() -> str:
    items: list[dict[str, object]] = []
    for w in range(WORKLOADS):
        name = f"w{w}"
        items.append(_scaled_object(name))
        items.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": NAMESPACE},
            }
        )
        items.append(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{name}-rs",
                    "namespace": NAMESPACE,
                    "ownerReferences": [{"kind": "Deployment", "name": name}],
                },
            }
        )
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-0",
                    "namespace": NAMESPACE,
                    "uid": f"uid-{w}",
                    "ownerReferences": [{"kind": "ReplicaSet", "name": f"{name}-rs"}],
                },
                "spec": {"nodeName": f"n{w // 8}", "containers": [{"name": "main"}]},
                "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"},
            }
        )
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def _lua(paths: list[str]) -> str:
    quoted = ",\n".join(json.dumps(p) for p in paths)
    return (
        f"local paths = {{\n{quoted}\n}}\nlocal n = 0\n"
        "request = function()\n  n = n + 1\n  return wrk.format('GET', paths[(n % #paths) + 1])\nend\n"
    )


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _wrk(base: str, paths: list[str], script: Path) -> dict[str, float]:
    script.write_text(_lua(paths))
    out = subprocess.run(
        ["wrk", f"-t{THREADS}", f"-c{CONNECTIONS}", f"-d{DURATION_S}s", "--latency", "-s", str(script), base],
        capture_output=True,
        text=True,
        check=True,
        timeout=DURATION_S + 60,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    lat = {
        p: float(v) * _UNITS[u] for p, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    }
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {
        "rps": rps,
        "p50": lat["50"],
        "p99": lat["99"],
        "errors": float(non2xx.group(1)) if non2xx else 0.0,
    }


def _direct_query(w: int) -> str:
    # What a prometheus-scaler trigger for this workload would ask on every poll.
    return (
        f'avg(avg_over_time({GATES[Base.UTILIZATION]}{{namespace="{NAMESPACE}",pod=~"w{w}-.*"}}[120s])) * 100'
    )


def _queries(base: str) -> float:
    """Prometheus queries the automator has sent (its query-duration histogram's count)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(
        r"^gpu_steward_automator_prometheus_query_duration_seconds_count ([\d.e+]+)$", text, re.M
    )
    return float(found.group(1)) if found else float("nan")


def queries_per_refresh(declared: int) -> tuple[int, int]:
    """(Prometheus queries, declared questions) of one refresh of the declared table for `declared`
    ScaledObjects spread over 100 namespaces, each with its own Deployment (the real table, a counting
    Prometheus that answers nothing and a source holding the objects)."""
    from automator.keda.table import DeclaredTable
    from automator.keda.workloads import Namespace

    objects = [_scaled_object(f"w{i}", f"ns-{i % 100}") for i in range(declared)]
    asked: list[str] = []

    class Source:
        def scaled_objects(self) -> list[dict[str, object]]:
            return objects

        def namespaces(self, names: frozenset[str]) -> dict[str, Namespace]:
            return {
                n: Namespace((), (), frozenset(f"w{i}" for i in range(declared)), frozenset()) for n in names
            }

    def run_query(expr: str) -> list[Any]:
        asked.append(expr)
        return []

    table = DeclaredTable(run_query).refresh(Source())
    return len(asked), len(table.results)


def _flooded(base: str, path: str, flood: list[str], script: Path) -> dict[str, float]:
    """wrk on the declared path while a second wrk floods undeclared questions, side by side."""
    flood_script = script.with_name("flood.lua")
    flooding = threading.Thread(target=_wrk, args=(base, flood, flood_script), daemon=True)
    flooding.start()
    try:
        return _wrk(base, [path], script)
    finally:
        flooding.join(DURATION_S + 60)


def _flood_lines(base: str, keda_paths: list[str], tmp: Path) -> list[str]:
    flood = [
        f"/keda/v1/metrics?namespace=flood-{i}&deployment=w{i}&signal=gpu_utilization&window={30 + i % 3000}s"
        for i in range(5000)
    ]
    quiet = _wrk(base, keda_paths[:1], tmp / "quiet.lua")
    loud = _flooded(base, keda_paths[0], flood, tmp / "loud.lua")
    ratio = loud["p99"] / quiet["p99"]
    return [
        "",
        "A declared workload's latency without and with a flood of undeclared questions (5,000 new "
        "namespaces and windows, a second wrk of the same size, answered `404 not_declared`), same run:",
        "",
        "| declared workload | requests/s | p50 (ms) | p99 (ms) | non-2xx |",
        "|---|---|---|---|---|",
        *(
            f"| {label} | {r['rps']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['errors']:.0f} |"
            for label, r in (("alone", quiet), ("under the flood", loud))
        ),
        "",
        f"p99 under the flood / alone: {ratio:.2f}x. Goal: at most 1.5x: "
        f"{'met' if ratio <= 1.5 else 'not met'}.",
    ]


def _refresh_lines() -> list[str]:
    small, large = queries_per_refresh(10), queries_per_refresh(10_000)
    return [
        "",
        f"Prometheus queries of one refresh: {small[0]} for 10 declared ScaledObjects "
        f"({small[1]} questions), {large[0]} for 10,000 ({large[1]:,} questions), one per declared "
        "signal and window. Goal: equal: "
        f"{'met' if small[0] == large[0] else 'not met'}.",
    ]


def main() -> str:
    if shutil.which("wrk") is None:
        skipped = "Skipped the wrk parts: wrk is not installed (`apt-get install wrk`)."
        lines = ["## KEDA endpoint", "", skipped, *_refresh_lines()]
        return "\n".join(lines) + "\n"
    with tempfile.TemporaryDirectory(prefix="keda-bench-") as tmp_name:
        tmp = Path(tmp_name)
        prom = start_backfilled_prometheus(tmp / "prom", _openmetrics(int(time.time()) - 5))
        snapshot = tmp / "cluster.json"
        snapshot.write_text(_cluster())
        port = free_port()
        log = (tmp / "automator.log").open("wb")
        automator = subprocess.Popen(
            [
                sys.executable, "-m", "automator", "run", "--cluster-snapshot", str(snapshot),
                "--prometheus-url", prom.url, "--listen-address", "127.0.0.1", "--port", str(port),
                "--probe-port", str(free_port()),
                "--no-leader-election", "--interval", "86400", "--keda-max-age-seconds", "86400",
                "--keda-refresh-seconds", "3600", "--max-connections-per-source", "64",
            ],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            base = f"http://127.0.0.1:{port}"
            wait_http(f"{base}/healthz", timeout=60)
            keda_paths = [
                f"/keda/v1/metrics?namespace={NAMESPACE}&deployment=w{w}&profile={PROFILE}"
                for w in range(WORKLOADS)
            ]
            _first_refresh(base + keda_paths[0])
            for path in keda_paths:  # every declared workload answers a value
                with urllib.request.urlopen(base + path, timeout=30) as r:
                    assert r.status == 200 and "value" in json.load(r)
            prom_paths = [
                "/api/v1/query?" + urllib.parse.urlencode({"query": _direct_query(w)})
                for w in range(WORKLOADS)
            ]
            queries_before = _queries(base)
            results = {}
            for label, url, paths in (
                ("endpoint, 1 workload", base, keda_paths[:1]),
                (f"endpoint, {WORKLOADS:,} workloads", base, keda_paths),
                ("Prometheus direct, 1 workload", prom.url, prom_paths[:1]),
                (f"Prometheus direct, {WORKLOADS:,} workloads", prom.url, prom_paths),
            ):
                results[label] = _wrk(url, paths, tmp / "paths.lua")
            served = (
                sum(r["rps"] for label, r in results.items() if label.startswith("endpoint")) * DURATION_S
            )
            queries = _queries(base) - queries_before
            flood_lines = _flood_lines(base, keda_paths, tmp)
        finally:
            stop(automator)
            prom.stop()
    lines = [
        "## KEDA endpoint",
        "",
        f"`wrk -t{THREADS} -c{CONNECTIONS} -d{DURATION_S}s --latency` on loopback against "
        f"`gpu-automator run`'s `/keda/v1/metrics` (profile `{PROFILE}`; {WORKLOADS:,} one-pod "
        "Deployments, each declared by a ScaledObject), and against Prometheus' `/api/v1/query` "
        "with the per-workload PromQL a `prometheus` trigger would run; requests rotate over 1 or over "
        "all workloads. Produced by `make bench` (tests/bench/bench_keda.py). Goal: at least 1,000 "
        "requests/s, p99 under 20 ms, 10 times the direct query.",
        "",
        "| target | requests/s | p50 (ms) | p99 (ms) | non-2xx |",
        "|---|---|---|---|---|",
    ]
    for label, r in results.items():
        lines.append(f"| {label} | {r['rps']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['errors']:.0f} |")
    ratios = []
    for n in ("1 workload", f"{WORKLOADS:,} workloads"):
        ratio = results[f"endpoint, {n}"]["rps"] / results[f"Prometheus direct, {n}"]["rps"]
        ratios.append(ratio)
        lines.append(f"\nEndpoint / direct query, {n}: {ratio:.1f}x the requests per second.")
    lines.append(
        f"\nWhile the endpoint served about {served:,.0f} requests the automator sent {queries:.0f} "
        "queries to Prometheus (answers come from the declared table; a refresh costs one query per "
        "declared signal and window, whatever the number of workloads); the direct runs cost Prometheus "
        "one query per request."
    )
    worst = min(results[f"endpoint, {n}"]["rps"] for n in ("1 workload", f"{WORKLOADS:,} workloads"))
    worst_p99 = max(results[f"endpoint, {n}"]["p99"] for n in ("1 workload", f"{WORKLOADS:,} workloads"))
    lines.append(
        f"\nGoals: 1,000 req/s {'met' if worst >= 1000 else 'not met'} ({worst:,.0f}), p99 under 20 ms "
        f"{'met' if worst_p99 < 20 else 'not met'} ({worst_p99:.1f} ms), 10 times the direct query "
        f"{'met' if min(ratios) >= 10 else 'not met'} ({min(ratios):.1f}x). An answer costs about "
        "0.1 ms (question, table lookup); the rest is the service's Python HTTP server "
        "and Flask on a 2-core machine shared with wrk. Prometheus answers this small backfilled data "
        "set (2,000 series) from memory in Go; each direct query's cost grows with the series it "
        "selects, the endpoint's does not."
    )
    lines += flood_lines + _refresh_lines()
    return "\n".join(lines) + "\n"


def _first_refresh(url: str, timeout: float = 120.0) -> None:
    """Wait for the answers of the first refresh (warming_up until then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError as e:
            if e.code != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.5)  # polling a server's state from outside: no event to wait on


if __name__ == "__main__":
    print(main())
