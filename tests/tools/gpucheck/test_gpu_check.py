"""The real-GPU check without a GPU: the PTX, the verdicts, the no-GPU path, the time budget, and the whole
check run over the NVML fakes."""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from exporter.loop import CollectionLoop
from exporter.server import HttpServer, make_handler
from tests.tools.gpucheck.gpucheck_fakes import FakeGpu, FullNvml, GiB, alive, exporter_scrape
from tools.gpucheck import checks, children, run, workload
from tools.gpucheck.cuda import KERNEL, PTX, PTX_TARGET, PTX_VERSION

ROOT = Path(__file__).resolve().parents[3]
UUID = "GPU-11111111-2222-3333-4444-555555555555"


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
        [sys.executable, "-m", "tools.gpucheck", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert "no NVML library or GPU found" in done.stdout and "nothing is claimed" in done.stdout
    assert list(tmp_path.iterdir()) == []


# --- the no-GPU path, in process, against the NVML fakes ---


def test_probe_says_why_nothing_can_be_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FullNvml(monkeypatch, [])
    fake.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    reason = run.probe()
    assert reason is not None and reason.startswith("no NVML library or GPU found (NVML: LibraryNotFound")
    fake.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert "DriverNotLoaded" in (run.probe() or "")
    fake.init_error = None
    assert run.probe() == "no GPU found (NVML sees 0 GPUs)"
    fake.count_error = pynvml.NVML_ERROR_UNKNOWN
    assert run.probe() == "no GPU found (nvmlDeviceGetCount: Unknown)"
    FullNvml(monkeypatch, [FakeGpu("GPU-aaa")])
    assert run.probe() is None


@pytest.mark.parametrize("init_error", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, None])
def test_main_without_a_gpu_exits_0_claiming_nothing(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    init_error: int | None,
) -> None:
    fake = FullNvml(monkeypatch, [])
    fake.init_error = init_error
    started: list[object] = []
    monkeypatch.setattr(run.Check, "run", lambda self: started.append(self))
    assert run.main(["--out", str(tmp_path / "out")]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("gpu-check: no ") and line.endswith(
        ": nothing was checked and nothing is claimed."
    )
    assert "PASS" not in line and "FAIL" not in line
    assert started == [] and not (tmp_path / "out").exists()


def test_bad_command_line_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.gpucheck", "--duration", "1000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--duration: expected seconds in [10, 90]" in done.stderr


# --- the time budget ---


def test_the_check_is_prepared_to_finish_within_three_minutes() -> None:
    assert run.TIME_LIMIT <= 180
    # past the deadline: SIGTERM, the grace period, SIGKILL, the grace period again, then the report
    assert run.DEADLINE + 2 * children.GRACE_SECONDS + 2 <= run.TIME_LIMIT
    # the slowest start the check waits for, the warm-up and the default window fit before what is kept
    # for after the window, so a slow start still gets the whole default window
    slowest_start = run.READY_TIMEOUT + run.EXPORTER_READY_TIMEOUT
    assert (
        slowest_start + run.WARMUP_SECONDS + run.DEFAULT_DURATION <= run.DEADLINE - run.AFTER_WINDOW_SECONDS
    )
    # after the window: two nvidia-smi calls at their timeout, and a few seconds for the rest
    assert 2 * run.COMMAND_TIMEOUT + children.GRACE_SECONDS <= run.AFTER_WINDOW_SECONDS
    # a child left alone ends by itself, within the three minutes
    assert workload.MAX_SECONDS >= run.TIME_LIMIT


def test_child_sizes_fit_the_free_memory() -> None:
    total = 141 * GiB
    sizes = run.plan_sizes(total, total)
    assert list(sizes) == ["busy", "duty", "memory"]
    assert all(v % checks.MIB == 0 for v in sizes.values())
    assert sizes["busy"] < sizes["duty"] < sizes["memory"]  # each recognisable by its size
    # the sizes differ by more than the tolerance: a match by memory finds the right child
    assert sizes["duty"] > sizes["busy"] * (1 + 2 * checks.MEMORY_TOLERANCE)
    assert sizes["memory"] > sizes["duty"] * (1 + 2 * checks.MEMORY_TOLERANCE)
    crowded = run.plan_sizes(total, 20 * GiB)
    assert sum(crowded.values()) <= 20 * GiB - run.HEADROOM_BYTES
    assert all(v >= checks.MIB for v in run.plan_sizes(total, 0).values())


# --- the whole check over the NVML fakes: sleeping children, the exporter in this process ---

READY = """\
import json, os, sys, time
print(json.dumps({"role": sys.argv[1], "pid": os.getpid(), "uuid": sys.argv[2],
                  "allocated_bytes": int(sys.argv[3])}), flush=True)
time.sleep(600)
"""


@pytest.fixture
def whole(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FullNvml]:
    """run.main with the fakes for NVML, nvidia-smi and the children's GPU work."""
    gpu = FakeGpu(UUID, name=b"NVIDIA H200")
    gpu.memory, gpu.util = (2 * GiB, 141 * GiB), (98, 10)
    gpu.memory_temp = None  # NOT_SUPPORTED fields, reported as such
    gpu.errors = {"nvmlDeviceGetEncoderUtilization": pynvml.NVML_ERROR_NOT_SUPPORTED}
    fake = FullNvml(monkeypatch, [gpu])
    script = tmp_path / "ready.py"
    script.write_text(READY)
    servers: list[tuple[HttpServer, CollectionLoop]] = []

    def start_children(self: run.Check, uuid: str, sizes: dict[str, int]) -> list[dict[str, Any]]:
        procs = {
            role: self.kids.start(
                [sys.executable, str(script), role, uuid, str(size)], stdout=subprocess.PIPE
            )
            for role, size in sizes.items()
        }
        ready = run.read_ready(procs, run.READY_TIMEOUT)
        # what NVML sees of them: their memory with a context's few hundred MiB, their SM use
        gpu.compute = [(r["pid"], r["allocated_bytes"] + 300 * checks.MIB) for r in ready]
        shares = {"busy": 99, "duty": 31, "memory": 0}
        fake.live_util = {r["pid"]: shares[r["role"]] for r in ready if shares[r["role"]]}
        self.data["children"] = ready
        return ready

    def start_exporter(self: run.Check) -> int:
        loop, exposition = exporter_scrape()
        loop.interval = 0.05
        loop.on_snapshot = exposition.prepare
        server = HttpServer(make_handler(exposition, loop), "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        loop.start()
        servers.append((server, loop))
        self.data["exporter"] = {"argv": ["in-process"]}
        return int(server.server_address[1])

    def nvidia_smi(*args: str) -> str | None:
        if args[0].startswith("--query-compute-apps"):
            return "pid, used_gpu_memory [MiB]\n" + "".join(
                f"{p}, {(m or 0) // checks.MIB} MiB\n" for p, m in gpu.compute
            )
        return f"0, {UUID}, NVIDIA H200, {141 * 1024}, {gpu.bus_id}, 550.54.15, 110.20\n"

    monkeypatch.setattr(run.Check, "_start_children", start_children)
    monkeypatch.setattr(run.Check, "_start_exporter", start_exporter)
    monkeypatch.setattr(run, "_nvidia_smi", nvidia_smi)
    monkeypatch.setattr(run, "WARMUP_SECONDS", 0.2)
    monkeypatch.setattr(run, "STEP_SECONDS", 0.05)
    monkeypatch.setattr(run, "MIN_DURATION", 0.5)
    yield fake
    for server, loop in servers:
        loop.stop()
        server.shutdown()
        server.server_close()


def test_the_whole_check_passes_on_a_gpu_that_behaves(
    whole: FullNvml, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = run.main(["--out", str(out), "--duration", "1"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    doc = json.loads((out / "gpu-check.json").read_text())
    assert doc["summary"]["FAIL"] == 0 and doc["summary"]["SKIP"] == 0 and doc["error"] is None
    assert doc["summary"]["PASS"] == len(doc["checks"]) >= 20
    names = " | ".join(c["check"] for c in doc["checks"])
    for wanted in (
        "every GPU listed",
        "NVML and nvidia-smi list the same GPUs",
        "memory vs its allocation",
        "memory vs nvidia-smi",
        "per-process utilization order",
        "memory-only child idle by the rules' threshold",
        "device utilization",
        "unattributed host processes",
        "NOT_SUPPORTED fields",
        "dcgm series",
        "check finished in time",
    ):
        assert wanted in names
    assert [p["matched_by"] for p in doc["processes"]] == ["pid"] * 3
    assert doc["checked_gpu"] == UUID and doc["exporter"]["scrapes"] > 0
    assert doc["gpus_idle"][0]["fields"]["name"] == "NVIDIA H200"
    for seen in (doc["gpus_idle"][0], doc["gpus"][0]):
        assert seen["not_supported"] == ["encoder_utilization", "memory_temperature_celsius"]
        assert seen["errors"] == {}
    assert doc["scenario"]["gpus"][0]["unsupported"] == ["encoder", "memory_temperature"]
    assert doc["scenario"]["gpus"][0]["uuid"] == UUID
    assert (out / "scenario.json").exists() and (out / "gpu-check.txt").read_text().count("PASS  ") == len(
        doc["checks"]
    )
    assert all(not alive(int(c["pid"])) for c in doc["children"])


def test_the_whole_check_fails_when_the_memory_only_child_computes(
    whole: FullNvml, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = run.Check._measure

    def measure(self: run.Check, uuid: str, port: int) -> None:
        memory_pid = next(r["pid"] for r in self.data["children"] if r["role"] == "memory")
        whole.live_util[memory_pid] = 8  # 0.08: above the idle threshold
        original(self, uuid, port)

    monkeypatch.setattr(run.Check, "_measure", measure)
    assert run.main(["--out", str(tmp_path), "--duration", "1"]) == 1
    doc = json.loads((tmp_path / "gpu-check.json").read_text())
    failed = [c["check"] for c in doc["checks"] if c["status"] == "FAIL"]
    assert failed == ["memory-only child idle by the rules' threshold"]
    assert "FAIL  memory-only child idle" in capsys.readouterr().out


def test_docs_state_the_checks_numbers_and_that_no_gpu_run_is_recorded() -> None:
    text = (ROOT / "docs" / "exporter.md").read_text()
    section = text.split("## Verified on real hardware\n", 1)[1].split("\n## ", 1)[0]
    assert section.lstrip().startswith("Not yet:")  # until a run on a GPU is recorded here
    assert "`make gpu-check`" in section and "python -m tools.gpucheck" in section
    assert f"(default {run.DEFAULT_DURATION:g})" in section
    assert f"`--duration` is {run.MIN_DURATION:g} to {run.MAX_DURATION:g} seconds" in section
    assert f"a deadline at {run.DEADLINE:g} s" in section
    assert f"under {run.TIME_LIMIT / 60:g} minutes" in section
    assert f"within {checks.MEMORY_TOLERANCE:.0%}".replace("%", " %") in section
    assert f"above {checks.DEVICE_UTILIZATION_FLOOR:g}" in section


def test_make_gpu_check_installs_nothing() -> None:
    """The venv's Python where there is one, else python3: never the venv's set-up (offline GPU machines)."""
    # Run from `make test` this make is a sub-make: MAKEFLAGS and MAKELEVEL would make it print directories.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    with_venv = subprocess.run(
        ["make", "-s", "--no-print-directory", "-n", "gpu-check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env=env,
    )
    assert with_venv.stdout.splitlines() == [".venv/bin/python -m tools.gpucheck"]
    without = subprocess.run(
        ["make", "-s", "--no-print-directory", "-n", "gpu-check", "VENV=/nonexistent/venv"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env=env,
    )
    assert without.returncode == 0 and without.stdout.splitlines() == ["python3 -m tools.gpucheck"]


def test_a_python_without_the_projects_packages_says_which_is_missing() -> None:
    done = subprocess.run(  # -S: no site-packages, so no pynvml
        [sys.executable, "-S", "-m", "tools.gpucheck"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "gpu-check: the Python package" in done.stderr and "is missing here" in done.stderr
    assert "nothing is claimed" in done.stderr
