"""Start VictoriaMetrics single-node (scraping like Prometheus) and vmalert for the portability tests.

Debian's `victoria-metrics` package (installed by `make deps`) ships both binaries. Victoria is a
tools/fakes/promserver.Prometheus (`query`, `wait_for`), so a test reads both stores the same way.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import ClassVar

import yaml

from tools.fakes.promserver import Prometheus, free_port, wait_http


class Victoria(Prometheus):
    """VictoriaMetrics single-node: Prometheus' query API, read without its cache (the rules' own past)."""

    QUERY_PARAMS: ClassVar[dict[str, str]] = {"nocache": "1"}


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
