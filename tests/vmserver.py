"""Start VictoriaMetrics single-node (scraping like Prometheus) and vmalert for the portability tests.

Debian's `victoria-metrics` package (installed by `make deps`) ships both binaries. The query helpers
match tools/promserver.Prometheus (`query`, `wait_for`), so a test can read both stores the same way.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools.promserver import free_port, stop, wait_http


@dataclass
class Victoria:
    proc: subprocess.Popen[bytes]
    url: str
    workdir: Path

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr, "nocache": "1"}
        if at is not None:
            params["time"] = f"{at:.3f}"
        with urllib.request.urlopen(
            f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10
        ) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(self, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            res = self.query(expr)
            if res:
                return res
            time.sleep(0.5)
        raise TimeoutError(f"no result for {expr!r} after {timeout}s")

    def stop(self) -> None:
        stop(self.proc)


def _binary(name: str) -> str:
    binary = shutil.which(name)
    if binary is None:
        raise RuntimeError(f"{name} not installed (make deps installs Debian's victoria-metrics)")
    return binary


def start_victoria_metrics(
    workdir: Path,
    scrape_targets: dict[str, list[str]],
    scrape_interval: str = "1s",
    extra_flags: tuple[str, ...] = (),
) -> Victoria:
    """victoria-metrics single-node on a free local port, scraping `scrape_targets` itself."""
    binary = _binary("victoria-metrics")
    workdir.mkdir(parents=True, exist_ok=True)
    config = {
        "global": {"scrape_interval": scrape_interval},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": targets}]}
            for job, targets in scrape_targets.items()
        ],
    }
    cfg = workdir / "scrape.yml"
    cfg.write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"-storageDataPath={workdir / 'data'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            f"-promscrape.config={cfg}",
            "-retentionPeriod=1d",
            "-memory.allowedBytes=256MiB",
            *extra_flags,
        ],
        stdout=(workdir / "victoria-metrics.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/health")
    except TimeoutError:
        proc.kill()
        raise
    return Victoria(proc=proc, url=url, workdir=workdir)


def start_vmalert(
    workdir: Path, store: str, rule_files: list[Path], extra_flags: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    """vmalert evaluating `rule_files` on `store` (a VictoriaMetrics URL) and writing the results back."""
    binary = _binary("vmalert")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            *(f"-rule={p.resolve()}" for p in rule_files),
            f"-datasource.url={store}",
            f"-remoteWrite.url={store}",
            f"-httpListenAddr=127.0.0.1:{port}",
            *extra_flags,
        ],
        stdout=(workdir / "vmalert.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health")
    except TimeoutError:
        proc.kill()
        raise AssertionError((workdir / "vmalert.log").read_text()) from None
    return proc
