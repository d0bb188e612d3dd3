"""Start a real Prometheus server (and Alertmanager, the mock exporter) for the integration tests and
`make demo`.

Not test code: the demo (tools/demo/run.py) imports it as well as tests/. Writes a config, starts `prometheus`
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

ROOT = Path(__file__).resolve().parents[2]


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


def _serve(
    binary: str,
    name: str,
    workdir: Path,
    config: dict[str, Any],
    port: int | None,
    flags: list[str],
) -> tuple[subprocess.Popen[bytes], str]:
    """Write `name`.yml, start the binary on 127.0.0.1:port with it and `flags`, wait for /-/ready."""
    cfg = workdir / f"{name}.yml"
    cfg.write_text(yaml.safe_dump(config))
    port = port or free_port()
    log = (workdir / f"{name}.log").open("wb")
    cmd = [binary, f"--config.file={cfg}", f"--web.listen-address=127.0.0.1:{port}", *flags]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready")
    except TimeoutError:
        proc.kill()
        raise
    return proc, url


@dataclass
class Prometheus:
    proc: subprocess.Popen[bytes]
    url: str
    workdir: Path

    # Added to every query (VictoriaMetrics, which speaks the same API, sets nocache).
    QUERY_PARAMS: ClassVar[dict[str, str]] = {}

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query at `at` (default: now); asserts success."""
        params = {"query": expr, **self.QUERY_PARAMS}
        if at is not None:
            params["time"] = f"{at:.3f}"
        q = urllib.parse.urlencode(params)
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
    alertmanagers: list[str] | None = None,
    extra_scrape_configs: list[dict[str, Any]] | None = None,
    extra_flags: tuple[str, ...] = (),
) -> Prometheus:
    """Start prometheus scraping `scrape_targets` (job name -> host:port list) and any whole scrape
    configs in `extra_scrape_configs`, alerting `alertmanagers`; `extra_flags` go on its command line."""
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
    if alertmanagers:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": alertmanagers}]}]}
    proc, url = _serve(
        binary,
        "prometheus",
        workdir,
        config,
        port,
        [f"--storage.tsdb.path={workdir / 'data'}", "--web.enable-lifecycle", *extra_flags],
    )
    return Prometheus(proc=proc, url=url, workdir=workdir)


@dataclass
class Alertmanager:
    proc: subprocess.Popen[bytes]
    url: str

    def alerts(self, alertname: str) -> list[dict[str, Any]]:
        """The alerts of this name Alertmanager holds (its v2 API)."""
        q = urllib.parse.urlencode({"filter": f'alertname="{alertname}"'})
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts?{q}", timeout=10) as r:
            result: list[dict[str, Any]] = json.load(r)
        return result

    def stop(self) -> None:
        stop(self.proc)


def start_alertmanager(workdir: Path, port: int | None = None) -> Alertmanager:
    """Start Debian's prometheus-alertmanager with one receiver and no cluster peers; wait for /-/ready."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        raise RuntimeError("alertmanager not installed (make deps installs Debian's prometheus-alertmanager)")
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "route": {
            "receiver": "demo",
            "group_by": ["alertname", "namespace", "pod"],
            "group_wait": "1s",
            "group_interval": "5s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "demo"}],
    }
    # No gossip port: one instance.
    proc, url = _serve(
        binary,
        "alertmanager",
        workdir,
        config,
        port,
        [f"--storage.path={workdir / 'data'}", "--cluster.listen-address="],
    )
    return Alertmanager(proc, url)


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


@contextmanager
def rules_on_mock_exporter(workdir: Path, scenario: Path) -> Iterator[Prometheus]:
    """The demo's stack in small: the mock exporter playing `scenario`, scraped as gpu-steward-exporter by a
    real Prometheus that evaluates rules/*.yaml; both stop when the block ends."""
    port = free_port()
    exporter = start_mock_exporter(scenario, port, workdir / "exporter.log")
    prom = None
    try:
        prom = start_prometheus(
            workdir / "prometheus",
            {"gpu-steward-exporter": [f"127.0.0.1:{port}"]},
            rule_files=sorted((ROOT / "rules").glob("*.yaml")),
        )
        yield prom
    finally:
        if prom is not None:
            prom.stop()
        stop(exporter)


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
