"""The real-GPU check's pieces without a GPU: the PTX, the verdicts, the no-GPU path."""

from __future__ import annotations

import ctypes.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.gpucheck import checks
from tools.gpucheck.cuda import KERNEL, PTX, PTX_TARGET, PTX_VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_ptx_declares_version_target_and_the_kernel() -> None:
    assert f".version {PTX_VERSION}\n" in PTX and f".target {PTX_TARGET}\n" in PTX
    assert f".visible .entry {KERNEL}(" in PTX and "%globaltimer" in PTX
    assert PTX.count("{") == PTX.count("}")


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_assembles(tmp_path: Path, arch: str) -> None:
    (tmp_path / "k.ptx").write_text(PTX)
    done = subprocess.run(["ptxas", f"-arch={arch}", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k")])
    assert done.returncode == 0


def test_utilization_order_and_idle_threshold() -> None:
    kids = [checks.Child(r, p, checks.GIB) for r, p in (("busy", 1), ("duty", 2), ("memory", 3))]
    traces = {p: checks.Trace(p, [checks.GIB], [u]) for p, u in ((1, 1.0), (2, 0.3), (3, 0.0))}
    verdicts = checks.utilization_order(checks.match_children(kids, traces))
    assert [v.status for v in verdicts] == ["PASS", "PASS"]
    traces[3].utilization = [0.5]
    assert [v.status for v in checks.utilization_order(checks.match_children(kids, traces))] == [
        "FAIL",
        "FAIL",
    ]


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="an NVML library is here")
def test_without_a_gpu_it_says_so_and_exits_0(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert "no NVML library or GPU found" in done.stdout and "nothing is claimed" in done.stdout
    assert list(tmp_path.iterdir()) == []
