"""`make demo`: the exporter on mock GPUs, a real Prometheus with the rules, and the
automator in dry-run against a simulated cluster snapshot. Ctrl-C stops everything.

Environment: DEMO_PROMETHEUS_PORT (19090), DEMO_EXPORTER_PORT (31995),
DEMO_AUTOMATOR_PORT (18080), DEMO_DURATION (seconds; unset = until Ctrl-C).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.promserver import start_prometheus, wait_http  # noqa: E402


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def main() -> int:
    prom_port = int(os.environ.get("DEMO_PROMETHEUS_PORT", "19090"))
    exp_port = int(os.environ.get("DEMO_EXPORTER_PORT", "31995"))
    auto_port = int(os.environ.get("DEMO_AUTOMATOR_PORT", "18080"))
    duration = float(os.environ.get("DEMO_DURATION", "0"))
    for var, port in (
        ("DEMO_PROMETHEUS_PORT", prom_port),
        ("DEMO_EXPORTER_PORT", exp_port),
        ("DEMO_AUTOMATOR_PORT", auto_port),
    ):
        if port_in_use(port):
            print(f"demo: port {port} is in use (is another demo running?); set {var} to another port")
            return 1
    workdir = ROOT / ".demo"
    shutil.rmtree(workdir, ignore_errors=True)  # fresh TSDB: the demo's story starts at t=0
    workdir.mkdir()

    procs: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    prom = None
    try:
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "exporter",
                    "--source",
                    "mock",
                    "--port",
                    str(exp_port),
                    "--interval",
                    "5",
                    "--compat",
                    "dcgm",
                ],
            )
        )
        wait_http(f"http://127.0.0.1:{exp_port}/metrics")
        rule_files = sorted((ROOT / "rules").glob("*.yaml")) + sorted((ROOT / "alerts").glob("*.yaml"))
        prom = start_prometheus(
            workdir / "prometheus",
            {
                "gpu-steward-exporter": [f"127.0.0.1:{exp_port}"],
                "gpu-steward-automator": [f"127.0.0.1:{auto_port}"],
            },
            rule_files=rule_files,
            scrape_interval="5s",
            evaluation_interval="5s",
            port=prom_port,
        )
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "automator",
                    "run",
                    "--mode",
                    "dry-run",
                    "--cluster-snapshot",
                    str(ROOT / "deploy" / "demo" / "cluster.yaml"),
                    "--prometheus-url",
                    prom.url,
                    "--interval",
                    "20",
                    "--listen-address",
                    "127.0.0.1",
                    "--port",
                    str(auto_port),
                    "--no-leader-election",
                ],
            )
        )
        print(
            "\nGPU Steward demo is running:\n"
            f"  exporter metrics    http://127.0.0.1:{exp_port}/metrics  (mock node, 8 GPUs)\n"
            f"  Prometheus          {prom.url}   (rules and alerts loaded; try\n"
            "                      namespace_pod:gpu_steward_container_gpu_utilization_ratio:max)\n"
            f"  automator decisions http://127.0.0.1:{auto_port}/decisions   (dry-run, nothing is evicted)\n"
            f"  KEDA metrics-api    http://127.0.0.1:{auto_port}/keda/v1/metrics?namespace=inference"
            "&deployment=api&profile=triton-inference\n"
            "                      (valueLocation: value; 503 until the rules have recorded data)\n"
            "  The demo victims' class uses a 120 s idle window: reclaim decisions appear after ~4 minutes.\n"
            "  Ctrl-C stops everything.\n",
            flush=True,
        )
        started = time.monotonic()
        while not stopping:
            if duration and time.monotonic() - started > duration:
                break
            for p in procs:
                if p.poll() is not None:
                    print(f"demo: {p.args[2:4]} exited with {p.returncode}", file=sys.stderr)
                    return 1
            time.sleep(0.5)
        return 0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if prom is not None:
            prom.stop()
        print("demo stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
