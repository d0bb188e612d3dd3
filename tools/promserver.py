"""Start a real Prometheus server (and the mock exporter) for the integration tests and `make demo`.

Not test code: deploy/demo/run_demo.py imports it as well as tests/. Writes a config, starts `prometheus`
on a free local port, waits for /-/ready and offers small query helpers.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 30.0) -> None:
    """Poll url until it answers 200 or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception as e:  # connection refused while starting
            last = e
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout}s: {last}")


@dataclass
class Prometheus:
    proc: subprocess.Popen[bytes]
    url: str
    workdir: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(self, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Query until the result is non-empty; raise TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = self.query(expr)
            if res:
                return res
            time.sleep(0.5)
        raise TimeoutError(f"no result for {expr!r} after {timeout}s")

    def stop(self) -> None:
        stop(self.proc)


def start_prometheus(
    workdir: Path,
    scrape_targets: dict[str, list[str]],
    rule_files: list[Path] | None = None,
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    port: int | None = None,
    extra_scrape_configs: list[dict[str, Any]] | None = None,
    extra_flags: tuple[str, ...] = (),
) -> Prometheus:
    """Start prometheus scraping `scrape_targets` (job name -> host:port list) and any whole scrape
    configs in `extra_scrape_configs`; `extra_flags` go on its command line."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError("prometheus not installed (make deps installs Debian's prometheus)")
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "rule_files": [str(p.resolve()) for p in rule_files or []],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": targets}]}
            for job, targets in scrape_targets.items()
        ]
        + list(extra_scrape_configs or []),
    }
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(config))
    port = port or free_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            *extra_flags,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready")
    except TimeoutError:
        proc.kill()
        raise
    return Prometheus(proc=proc, url=url, workdir=workdir)


def start_mock_exporter(scenario: Path, port: int, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    """Run `python -m exporter` on the mock source playing `scenario`; wait for /healthz."""
    cmd = [
        sys.executable,
        "-m",
        "exporter",
        "--source",
        "mock",
        "--scenario",
        str(scenario),
        "--port",
        str(port),
        "--listen-address",
        "127.0.0.1",
        "--interval",
        "1",
        *extra,
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
    except TimeoutError:
        proc.kill()
        raise AssertionError(log.read_text()) from None
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_backfilled_prometheus(workdir: Path, openmetrics: str) -> Prometheus:
    """Start Prometheus over a TSDB backfilled from OpenMetrics text with promtool, scraping nothing."""
    if shutil.which("promtool") is None:
        raise RuntimeError("promtool not installed (make deps installs Debian's prometheus)")
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / "backfill.om"
    src.write_text(openmetrics)
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(src), str(workdir / "data")],
        check=True,
        capture_output=True,
    )
    return start_prometheus(workdir, scrape_targets={})
