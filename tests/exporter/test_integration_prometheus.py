"""A real Prometheus scrapes the mock exporter; we query the series back. promtool checks the output."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from steward_common import metrics as m
from tools.fakes.promserver import Prometheus, free_port, start_mock_exporter, start_prometheus, stop

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def pod(ns: str, name: str) -> dict[str, str]:
    return {"namespace": ns, "pod": name, "container": "main"}


SCENARIO = {
    "node": "it-node",
    "gpus": [
        {
            "index": 0,
            "uuid": "GPU-idle",
            "model": "NVIDIA H100 80GB HBM3",
            "memory_total": "80Gi",
            "allocations": [pod("team", "idle-pod")],
        },
        {
            "index": 1,
            "uuid": "GPU-busy",
            "model": "NVIDIA H100 80GB HBM3",
            "memory_total": "80Gi",
            "allocations": [pod("team", "busy-pod")],
            "processes": [
                {
                    "pid": 11,
                    "owner": pod("team", "busy-pod"),
                    "phases": [{"from": 0, "utilization": 0.9, "memory": "40Gi"}],
                }
            ],
        },
        {
            "index": 2,
            "uuid": "GPU-shared",
            "model": "NVIDIA H100 80GB HBM3",
            "memory_total": "80Gi",
            "allocations": [pod("inference", "api-a"), pod("inference", "api-b")],
            "processes": [
                {
                    "pid": 21,
                    "owner": pod("inference", "api-a"),
                    "phases": [{"from": 0, "utilization": 0.3, "memory": "8Gi"}],
                },
                {
                    "pid": 22,
                    "owner": pod("inference", "api-b"),
                    "phases": [{"from": 0, "utilization": 0.1, "memory": "4Gi"}],
                },
                {
                    "pid": 23,
                    "owner": {"host": True},
                    "phases": [{"from": 0, "utilization": 0.05, "memory": "1Gi"}],
                },
            ],
        },
        {
            "index": 3,
            "uuid": "GPU-lost",
            "model": "NVIDIA H100 80GB HBM3",
            "memory_total": "80Gi",
            "fails_at": 0,
            "allocations": [pod("team", "unlucky")],
        },
    ],
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, int, int]]:
    tmp = tmp_path_factory.mktemp("exporter-it")
    scenario = tmp / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    plain_port, dcgm_port = free_port(), free_port()
    plain = start_mock_exporter(scenario, plain_port, tmp / "plain.log")
    dcgm = start_mock_exporter(scenario, dcgm_port, tmp / "dcgm.log", "--compat", "dcgm")
    prom = None
    try:
        prom = start_prometheus(
            tmp / "prom",
            {
                "gpu-steward-exporter": [f"127.0.0.1:{plain_port}"],
                "gpu-steward-exporter-dcgm": [f"127.0.0.1:{dcgm_port}"],
            },
        )
        yield prom, plain_port, dcgm_port
    finally:
        if prom is not None:
            prom.stop()
        stop(plain)
        stop(dcgm)


def values(prom: Prometheus, expr: str, by: str = "pod") -> dict[str, float]:
    return {r["metric"].get(by, ""): float(r["value"][1]) for r in prom.wait_for(expr)}


def test_prometheus_scrapes_per_container_and_allocation_series(stack: tuple[Prometheus, int, int]) -> None:
    prom, _, _ = stack
    job = 'job="gpu-steward-exporter"'
    util = values(prom, f"gpu_steward_container_gpu_utilization_ratio{{{job}}}")
    assert util == {
        "idle-pod": 0.0,
        "busy-pod": 0.9,
        "api-a": 0.3,
        "api-b": 0.1,
    }  # no series for the lost GPU
    alloc = prom.wait_for(f"gpu_steward_gpu_allocation{{{job}}}")
    held = {(r["metric"]["pod"], r["metric"]["uuid"], r["metric"]["node"]) for r in alloc}
    assert ("idle-pod", "GPU-idle", "it-node") in held and ("unlucky", "GPU-lost", "it-node") in held
    assert len(held) == 5
    assert values(prom, f'gpu_steward_unattributed_gpu_processes{{{job},reason="host"}}', "uuid") == {
        "GPU-shared": 1
    }
    assert values(prom, f"gpu_steward_gpu_lost{{{job}}} == 1", "uuid") == {"GPU-lost": 1}
    assert values(prom, f"gpu_steward_gpu_collection_success{{{job}}} == 0", "uuid") == {"GPU-lost": 0}
    age = values(prom, f"gpu_steward_exporter_snapshot_age_seconds{{{job}}}", "node")
    assert 0 <= age["it-node"] < 60


def test_dcgm_names_answer_existing_queries(stack: tuple[Prometheus, int, int]) -> None:
    prom, _, _ = stack
    util = values(prom, 'DCGM_FI_DEV_GPU_UTIL{job="gpu-steward-exporter-dcgm",namespace="inference"}')
    assert util == {"api-a": 30.0, "api-b": 10.0}  # per container on the shared GPU
    fb = values(prom, 'DCGM_FI_DEV_FB_USED{job="gpu-steward-exporter-dcgm",pod="busy-pod"}')
    assert fb == {"busy-pod": 40 * 1024}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_check_metrics_reports_nothing(stack: tuple[Prometheus, int, int]) -> None:
    _, plain_port, _ = stack
    text = scrape(plain_port)
    assert "gpu_steward_container_gpu_utilization_ratio{" in text  # a full snapshot, not an empty page
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_on_dcgm_names_flags_only_upstream_spellings(stack: tuple[Prometheus, int, int]) -> None:
    """Only what dcgm-exporter itself spells so: camelCase label names, its counters' names."""
    _, _, dcgm_port = stack
    text = scrape(dcgm_port)
    assert "DCGM_FI_DEV_GPU_UTIL{" in text
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    findings = {line for line in (result.stdout + result.stderr).splitlines() if line}
    counters = {s.name for s in m.DCGM_METRICS if s.kind == "counter"}
    assert findings
    for finding in findings:
        name = finding.split()[0]
        assert name.startswith("DCGM_FI_"), finding
        # upstream's names: `..._COUNTER` "includes the type", `..._TOTAL` is not `_total`
        upstream_name = name in counters and ("_total" in finding or "include type 'counter'" in finding)
        assert "camelCase" in finding or upstream_name, finding
