"""`make gpu-check` / `python -m tools.gpucheck`: prove the NVML source on a real GPU in under three minutes.

1. Survey every NVML read of every GPU while idle (tools/gpucheck/survey.py).
2. Start three children on one GPU (tools/gpucheck/workload.py): busy, duty cycle, memory-only.
3. Start the exporter (`--source nvml --no-kube-api --compat dcgm`, no kubelet: the children are
   unattributed host processes) and, for `--duration` seconds, scrape it and read the children's PIDs
   through the NVML source itself, once a second.
4. Read nvidia-smi where it exists, survey again under load, stop everything, print each verdict
   (tools/gpucheck/checks.py) and write the report to `--out` (tools/gpucheck/report.py).

Without an NVML library or a GPU it says so and exits 0, claiming nothing. Exit codes: 0 every check
passed (or was skipped), 1 a check failed or the check could not run, 2 bad command line.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

import pynvml
from prometheus_client.parser import text_string_to_metric_families

from exporter.sources.nvml_reads import error_name
from tools.gpucheck import checks, report, survey
from tools.gpucheck.children import ROOT, Children, exit_on_signals

PROG = "gpu-check"
DEFAULT_OUT = ROOT / "build" / "gpu-check"
DEFAULT_DURATION = 60.0
MIN_DURATION, MAX_DURATION = 10.0, 90.0
TIME_LIMIT = 180.0  # the whole check, children and exporter included
DEADLINE = 170.0  # stop here whatever is still running, leaving time to stop and report
WARMUP_SECONDS = 5.0  # the exporter's and NVML's first samples, before the window
READY_TIMEOUT = 45.0  # a child's context, JIT compile and allocation
EXPORTER_READY_TIMEOUT = 30.0
COMMAND_TIMEOUT = 10.0  # nvidia-smi, one scrape
# Kept free after the window, before DEADLINE: two nvidia-smi calls, the survey under load, stopping.
AFTER_WINDOW_SECONDS = 25.0
STEP_SECONDS = 1.0
# Each child's allocation as a share of the GPU's memory: large enough that the CUDA context's own few
# hundred MiB stay within the 5 % tolerance, different so that each is recognisable by its size.
SHARES = {"busy": 0.11, "duty": 0.14, "memory": 0.17}
HEADROOM_BYTES = 4 * checks.GIB  # left free for the three contexts and the exporter
NO_KUBELET = "/nonexistent/gpu-check/kubelet.sock"


class DeadlineExceeded(Exception):
    """The check ran into DEADLINE."""


def _duration(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not MIN_DURATION <= seconds <= MAX_DURATION:  # NaN fails too
        raise argparse.ArgumentTypeError(
            f"expected seconds in [{MIN_DURATION:g}, {MAX_DURATION:g}], got {value!r}"
        )
    return seconds


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Check the exporter's NVML source on this machine's GPUs (docs/exporter.md)."
    )
    default_out = os.environ.get("OUT") or str(DEFAULT_OUT)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(default_out),
        help=f"report folder (default $OUT, else {DEFAULT_OUT})",
    )
    parser.add_argument(
        "--duration",
        type=_duration,
        default=DEFAULT_DURATION,
        help=f"seconds of scraping under load ({MIN_DURATION:g}-{MAX_DURATION:g}, "
        f"default {DEFAULT_DURATION:g})",
    )
    return parser.parse_args(argv)


def probe() -> str | None:
    """Why nothing can be checked here (no NVML library, no driver, no GPU), or None. Leaves NVML
    initialised when it returns None."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return f"no NVML library or GPU found (NVML: {error_name(e)}: {e})"
    try:
        count = int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as e:
        count, detail = 0, f"nvmlDeviceGetCount: {error_name(e)}"
    else:
        detail = "NVML sees 0 GPUs"
    if count == 0:
        with suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
        return f"no GPU found ({detail})"
    return None


def plan_sizes(total: int, free: int | None) -> dict[str, int]:
    """Each child's allocation (whole MiB): SHARES of the GPU's memory, scaled down to what is free."""
    want = {role: int(total * share) for role, share in SHARES.items()}
    room = (free if free is not None else total) - HEADROOM_BYTES
    scale = min(1.0, max(0.0, room) / sum(want.values()))
    return {role: max(checks.MIB, int(v * scale) // checks.MIB * checks.MIB) for role, v in want.items()}


def parse_scrape(text: str) -> list[checks.Series]:
    return [
        checks.Series(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def parse_compute_apps(text: str) -> dict[int, int]:
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv`: pid -> bytes (MiB as printed)."""
    out: dict[int, int] = {}
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    for row in rows[1:]:  # the header: pid, used_gpu_memory [MiB]
        if len(row) < 2 or not row[0].strip().isdigit():
            continue
        amount = row[1].strip().split()
        if not amount or not amount[0].isdigit():
            continue  # [N/A]
        unit = amount[1] if len(amount) > 1 else "MiB"
        factor = {"KiB": 1024, "MiB": checks.MIB, "GiB": checks.GIB}.get(unit)
        if factor is not None:
            out[int(row[0])] = out.get(int(row[0]), 0) + int(amount[0]) * factor
    return out


SMI_GPU_FIELDS = ("index", "uuid", "name", "memory.total", "pci.bus_id", "driver_version", "power.draw")


def parse_query_gpu(text: str) -> tuple[list[checks.GpuFacts], str | None]:
    """`nvidia-smi --query-gpu=<SMI_GPU_FIELDS> --format=csv,noheader,nounits`: the GPUs and the driver."""
    gpus: list[checks.GpuFacts] = []
    driver: str | None = None
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if len(row) != len(SMI_GPU_FIELDS):
            continue
        index, uuid, name, memory, bus, version, power = (c.strip() for c in row)
        driver = version or driver

        def number(value: str) -> float | None:
            try:
                return float(value)
            except ValueError:
                return None  # [N/A], [Not Supported]

        mib = number(memory)
        gpus.append(
            checks.GpuFacts(
                index=int(index) if index.isdigit() else len(gpus),
                uuid=uuid,
                model=name,
                memory_total_bytes=None if mib is None else int(mib) * checks.MIB,
                power_watts=number(power),
                pci_bus_id=bus,
            )
        )
    return gpus, driver


def facts(s: survey.GpuSurvey) -> checks.GpuFacts:
    return checks.GpuFacts(
        index=s.index,
        uuid=str(s.value("uuid") or f"unknown-{s.index}"),
        model=s.value("name"),
        memory_total_bytes=s.memory_total_bytes(),
        power_watts=s.power_watts(),
        pci_bus_id=s.pci_bus_id(),
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=COMMAND_TIMEOUT) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, OSError):
        return 0, ""


def _nvidia_smi(*args: str) -> str | None:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        done = subprocess.run(
            [binary, *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def read_ready(procs: dict[str, subprocess.Popen[Any]], timeout: float) -> list[dict[str, Any]]:
    """Each child's first stdout line (JSON), or an error for one that exits or stays silent."""
    lines: dict[str, dict[str, Any]] = {}
    selector = selectors.DefaultSelector()
    for role, proc in procs.items():
        assert proc.stdout is not None
        selector.register(proc.stdout, selectors.EVENT_READ, role)
    deadline = time.monotonic() + timeout
    try:
        while len(lines) < len(procs):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _ in selector.select(min(left, 1.0)):
                role = str(key.data)
                stream: IO[Any] = key.fileobj  # type: ignore[assignment]
                raw = stream.readline()
                selector.unregister(stream)
                try:
                    lines[role] = json.loads(raw) if raw else {}
                except ValueError:
                    lines[role] = {"error": f"unreadable ready line {raw[:200]!r}"}
                if not raw:
                    code = procs[role].wait(COMMAND_TIMEOUT)
                    lines[role] = {"error": f"exited with code {code} before it was ready"}
    finally:
        selector.close()
    for role in procs:
        lines.setdefault(role, {"error": f"not ready within {timeout:.0f} s"})
        lines[role].setdefault("role", role)
    return [lines[role] for role in procs]


@contextmanager
def deadline(seconds: float, since: float | None = None) -> Iterator[None]:
    """SIGALRM `seconds` after `since` (a time.monotonic(); default now) raises DeadlineExceeded wherever
    the check is."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise DeadlineExceeded(f"stopped at the {seconds:.0f} s deadline")

    left = seconds - (0.0 if since is None else time.monotonic() - since)
    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, left))  # 0 would disarm it instead
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Check:
    """One run of the check; `data` collects what the report shows, `verdicts` what it concludes."""

    def __init__(self, args: argparse.Namespace, kids: Children, started: float) -> None:
        self.args = args
        self.kids = kids
        self.started = started
        self.out: Path = args.out
        self.data: dict[str, Any] = {
            "tool": PROG,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
        }
        self.verdicts: list[checks.Verdict] = []
        self.traces: dict[int, checks.Trace] = {}
        self.scrapes: list[list[checks.Series]] = []

    def run(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        versions = survey.system()
        self.data["system"] = versions
        count = int(pynvml.nvmlDeviceGetCount())
        idle = [survey.survey_gpu(i) for i in range(count)]
        self.data["gpus_idle"] = [s.to_json() for s in idle]
        target = next((s for s in idle if not s.mig_enabled() and s.value("uuid")), None)
        if target is None:
            self.verdicts.append(
                checks.Verdict("a GPU to load", "FAIL", "every GPU in MIG mode or without a UUID", "one GPU")
            )
            return
        uuid = str(target.value("uuid"))
        self.data["checked_gpu"] = uuid
        memory = target.value("memory_v2") or target.value("memory") or {}
        sizes = plan_sizes(target.memory_total_bytes() or 0, memory.get("free"))
        ready = self._start_children(uuid, sizes)
        self.verdicts += checks.children_started(ready, uuid)
        children = [
            checks.Child(str(r["role"]), int(r["pid"]), int(r["allocated_bytes"]))
            for r in ready
            if "error" not in r
        ]
        port = self._start_exporter()
        self._measure(uuid, port)
        smi_apps_text = _nvidia_smi("--query-compute-apps=pid,used_memory", "--format=csv")
        smi_gpu_text = _nvidia_smi(f"--query-gpu={','.join(SMI_GPU_FIELDS)}", "--format=csv,noheader,nounits")
        loaded = [survey.survey_gpu(i) for i in range(count)]
        self.data["gpus"] = [s.to_json() for s in loaded]
        self.data["scenario"] = survey.scenario(idle, loaded, versions)
        self.kids.stop_all()  # before concluding: the verdicts need no load, the GPU is free again
        smi_apps = parse_compute_apps(smi_apps_text) if smi_apps_text is not None else None
        smi_gpus, smi_driver = parse_query_gpu(smi_gpu_text) if smi_gpu_text is not None else (None, None)
        self.data["nvidia_smi"] = (
            None
            if smi_apps_text is None and smi_gpu_text is None
            else {"compute_apps": smi_apps, "query_gpu": smi_gpu_text, "driver_version": smi_driver}
        )
        self._conclude(uuid, children, loaded, versions, smi_apps, smi_gpus, smi_driver)

    def _start_children(self, uuid: str, sizes: dict[str, int]) -> list[dict[str, Any]]:
        log = (self.out / "children.log").open("w")
        env = {"CUDA_VISIBLE_DEVICES": uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTHONUNBUFFERED": "1"}
        procs = {
            role: self.kids.start(
                [
                    sys.executable,
                    "-m",
                    "tools.gpucheck.workload",
                    role,
                    "--bytes",
                    str(size),
                    "--max-seconds",
                    str(TIME_LIMIT),
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=log,
            )
            for role, size in sizes.items()
        }
        log.close()
        ready = read_ready(procs, READY_TIMEOUT)
        self.data["children"] = ready
        return ready

    def _start_exporter(self) -> int:
        port = _free_port()
        argv = [
            sys.executable,
            "-m",
            "exporter",
            *("--source", "nvml", "--no-kube-api", "--podresources-socket", NO_KUBELET),
            *("--interval", "1", "--compat", "dcgm", "--node-name", PROG),
            *("--listen-address", "127.0.0.1", "--port", str(port)),
        ]
        self.data["exporter"] = {"argv": argv[1:]}
        with (self.out / "exporter.log").open("w") as log:
            proc = self.kids.start(argv, stdout=log, stderr=subprocess.STDOUT)
        until = time.monotonic() + EXPORTER_READY_TIMEOUT
        while time.monotonic() < until and proc.poll() is None:
            if _get(f"http://127.0.0.1:{port}/readyz")[0] == 200:
                return port
            time.sleep(0.2)
        raise RuntimeError(
            f"the exporter did not become ready within {EXPORTER_READY_TIMEOUT:.0f} s "
            f"(exit code {proc.poll()}; see {self.out / 'exporter.log'})"
        )

    def _measure(self, uuid: str, port: int) -> None:
        """Warm-up, then each second: one collection of the NVML source itself, one scrape."""
        from exporter.sources.nvml import NvmlSource

        source = NvmlSource()
        try:
            start = time.monotonic()
            left = DEADLINE - AFTER_WINDOW_SECONDS - (start - self.started) - WARMUP_SECONDS
            window = max(0.0, min(self.args.duration, left))
            self.data["window_seconds"] = round(window, 1)
            step = 0
            while (now := time.monotonic()) < start + WARMUP_SECONDS + window:
                measuring = now >= start + WARMUP_SECONDS
                for sample in source.collect():
                    if measuring and sample.uuid == uuid:
                        self._trace(sample)
                status, body = _get(f"http://127.0.0.1:{port}/metrics")
                if measuring and status == 200:
                    self.scrapes.append(parse_scrape(body))
                step += 1
                time.sleep(max(0.0, start + step * STEP_SECONDS - time.monotonic()))
        finally:
            source.close()

    def _trace(self, sample: Any) -> None:
        for proc in sample.processes:
            trace = self.traces.setdefault(proc.pid, checks.Trace(proc.pid))
            trace.memory.append(proc.memory_used_bytes)
            trace.utilization.append(proc.sm_utilization)

    def _conclude(
        self,
        uuid: str,
        children: list[checks.Child],
        loaded: list[survey.GpuSurvey],
        versions: dict[str, Any],
        smi_apps: dict[int, int] | None,
        smi_gpus: list[checks.GpuFacts] | None,
        smi_driver: str | None,
    ) -> None:
        nvml = [facts(s) for s in loaded]
        last = self.scrapes[-1] if self.scrapes else []
        matches = checks.match_children(children, self.traces)
        driver = versions.get("driver_version")
        self.verdicts += checks.gpus_listed(nvml, last, smi_gpus)
        self.verdicts += checks.child_memory(matches, smi_apps)
        self.verdicts += checks.utilization_order(matches)
        self.verdicts.append(checks.device_utilization(uuid, self.scrapes))
        self.verdicts.append(checks.host_processes(uuid, len(children), last))
        for s in loaded:
            gpu = facts(s)
            self.verdicts.append(
                checks.not_supported(gpu.uuid, s.keys("not_supported"), dict(s.to_json()["errors"]), last)
            )
        self.verdicts += checks.dcgm_labels(
            nvml, driver if isinstance(driver, str) else None, last, smi_gpus, smi_driver
        )
        self.data["processes"] = [
            {
                "role": mt.child.role,
                "pid": mt.child.pid,
                "allocated_bytes": mt.child.allocated_bytes,
                "matched_by": mt.by,
                "nvml_pid": mt.trace.pid if mt.trace else None,
                "memory_bytes": mt.trace.memory_bytes() if mt.trace else None,
                "utilization": mt.trace.utilization if mt.trace else [],
            }
            for mt in matches
        ]
        matched = {mt.trace.pid for mt in matches if mt.trace}
        self.data["unmatched_nvml_pids"] = sorted(set(self.traces) - matched)
        self.data["exporter"]["scrapes"] = len(self.scrapes)
        self.data["exporter"]["last_scrape"] = [
            {"name": s.name, "labels": dict(s.labels), "value": s.value}
            for s in last
            if s.name.startswith(("gpu_steward_", "DCGM_FI_"))
        ]

    def finish(self, error: str | None) -> int:
        """Print the verdicts, write the report; the exit code."""
        seconds = time.monotonic() - self.started
        self.verdicts.append(checks.elapsed(seconds, TIME_LIMIT))
        if error is not None:
            last_line = error.strip().splitlines()[-1]
            self.verdicts.append(checks.Verdict("check ran to the end", "FAIL", last_line, "no error"))
        for v in self.verdicts:
            print(v.line())
        counts = checks.summary(self.verdicts)
        self.data.update(
            duration_seconds=round(seconds, 1),
            checks=[report.verdict_json(v) for v in self.verdicts],
            summary=counts,
            error=error,
        )
        written = report.write(self.out, self.data, self.verdicts)
        print(
            f"{PROG}: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped; "
            f"report: {written}"
        )
        return 1 if counts["FAIL"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    reason = probe()
    if reason is not None:
        print(f"{PROG}: {reason}: nothing was checked and nothing is claimed.")
        return 0
    error: str | None = None
    stopped: SystemExit | KeyboardInterrupt | None = None
    with exit_on_signals(), Children() as kids:
        check = Check(args, kids, started)
        try:
            # from the start: NVML's initialisation (probe) may already have taken seconds
            with deadline(DEADLINE, since=started):
                check.run()
        except (DeadlineExceeded, RuntimeError, OSError, pynvml.NVMLError) as e:
            error = f"{type(e).__name__}: {e}"
        except (SystemExit, KeyboardInterrupt) as e:
            # a signal (exit_on_signals) or Ctrl-C, e.g. a caller's time limit: the children are stopped
            # first (finally), what was gathered is still reported, then the check ends as asked
            stopped = e
            error = (
                "stopped by SIGINT" if isinstance(e, KeyboardInterrupt) else f"stopped (exit code {e.code})"
            )
        except Exception:
            error = traceback.format_exc()
        finally:
            kids.stop_all()
            with suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
        code = check.finish(error)
        if stopped is not None:
            raise stopped
        return code
