"""gpu-check's children never outlive it: harmless sleeping Python children started through the same
machinery (tools/gpucheck/children.py) as the CUDA ones, the check then ended by a return, an exception,
its deadline, a signal, or SIGKILL."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest

from tests.tools.gpucheck.gpucheck_fakes import alive
from tools.gpucheck import children, run
from tools.gpucheck.children import Children

ROOT = Path(__file__).resolve().parents[3]
WAIT = 30.0  # the longest any condition below is waited for (a bound, not a speed goal)

# Installs its SIGTERM handler, then says so with `<marker>.ready`; on SIGTERM writes `<marker>` and exits.
# "ignore": ignores SIGTERM (only SIGKILL ends it); "spawn": first starts a grandchild sleeper in its group.
SLEEPER = """\
import pathlib, signal, subprocess, sys, time
marker, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
def term(signum, frame):
    marker.write_text("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "ignore" else term)
if mode == "spawn":
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    pathlib.Path(str(marker) + ".grandchild").write_text(str(grandchild.pid))
pathlib.Path(str(marker) + ".ready").write_text("")
time.sleep(600)
"""


def wait_for(condition: Callable[[], bool], what: str) -> None:
    until = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > until:
            raise AssertionError(f"not within {WAIT:g} s: {what}")
        time.sleep(0.02)


def wait_dead(pids: list[int]) -> None:
    wait_for(lambda: not any(alive(p) for p in pids), f"every one of {pids} ended")


@pytest.fixture
def sleeper(tmp_path: Path) -> Path:
    path = tmp_path / "sleeper.py"
    path.write_text(SLEEPER)
    return path


class Started:
    """Sleepers started through a Children, with their markers."""

    def __init__(self, kids: Children, script: Path, modes: tuple[str, ...]) -> None:
        self.markers = [script.with_name(f"child{i}") for i in range(len(modes))]
        self.procs = [
            kids.start([sys.executable, str(script), str(marker), mode])
            for marker, mode in zip(self.markers, modes, strict=True)
        ]
        for marker in self.markers:
            wait_for(Path(f"{marker}.ready").exists, f"{marker} ready")

    @property
    def pids(self) -> list[int]:
        out = [p.pid for p in self.procs]
        for marker in self.markers:
            grandchild = Path(f"{marker}.grandchild")
            if grandchild.exists():
                out.append(int(grandchild.read_text()))
        return out

    def terminated(self) -> list[bool]:
        return [m.exists() for m in self.markers]


@pytest.fixture
def leftovers() -> Iterator[list[int]]:
    """PIDs a test started; killed at the end should a test fail with them alive."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_stop_all_ends_children_and_their_groups(sleeper: Path, leftovers: list[int]) -> None:
    with Children() as kids:
        started = Started(kids, sleeper, ("term", "spawn"))
        leftovers += started.pids
        assert len(started.pids) == 3 and all(alive(p) for p in started.pids)
    wait_dead(started.pids)
    assert started.terminated() == [True, True]  # SIGTERM first: a child may clean up
    assert all(p.returncode == 0 for p in started.procs)


def test_a_child_ignoring_sigterm_is_killed_after_the_grace_period(
    sleeper: Path, leftovers: list[int]
) -> None:
    kids = Children(grace=0.2)
    started = Started(kids, sleeper, ("ignore",))
    leftovers += started.pids
    kids.stop_all()
    wait_dead(started.pids)
    assert started.procs[0].returncode == -signal.SIGKILL and started.terminated() == [False]


def test_the_launcher_refuses_without_its_parent() -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "tools.gpucheck.children", "x", "--", "true"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "usage" in bad.stderr
    orphan = subprocess.run(  # PID 1 is not its parent: the kernel could never tell it when its parent dies
        [sys.executable, "-m", "tools.gpucheck.children", "1", "--", "true"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert orphan.returncode == 1 and "parent is gone" in orphan.stderr
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.gpucheck.children",
            str(os.getpid()),
            "--",
            sys.executable,
            "-c",
            "print(7)",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert ok.returncode == 0 and ok.stdout == "7\n"


def test_exit_on_signals_turns_sigterm_into_systemexit_and_restores() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exited, children.exit_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(WAIT)
    assert exited.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before


# --- the whole runner, its check replaced by one that starts sleepers and then ends somehow ---


@pytest.fixture
def runner(
    monkeypatch: pytest.MonkeyPatch, sleeper: Path, leftovers: list[int]
) -> Callable[..., list[Started]]:
    """Patches run.main's probe (a GPU is "there") and Check.run (start sleepers, then `end`)."""
    monkeypatch.setattr(run, "probe", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    seen: list[Started] = []

    def install(end: Callable[[], None]) -> list[Started]:
        def fake_run(self: run.Check) -> None:
            started = Started(self.kids, sleeper, ("term", "spawn", "ignore"))
            seen.append(started)
            leftovers.extend(started.pids)
            end()

        monkeypatch.setattr(run.Check, "run", fake_run)
        monkeypatch.setattr(run, "Children", lambda: Children(grace=0.5))
        return seen

    return install


def fail(error: BaseException) -> Callable[[], None]:
    def end() -> None:
        raise error

    return end


@pytest.mark.parametrize("error", [RuntimeError("cuInit failed"), ValueError("a bug"), OSError("disk")])
def test_an_exception_stops_every_child_and_still_reports(
    runner: Callable[..., list[Started]], tmp_path: Path, error: Exception
) -> None:
    seen = runner(fail(error))
    assert run.main(["--out", str(tmp_path / "out")]) == 1
    (started,) = seen
    wait_dead(started.pids)
    assert started.terminated() == [True, True, False]
    report = (tmp_path / "out" / "gpu-check.txt").read_text()
    assert "FAIL  check ran to the end" in report and str(error) in report


def test_the_deadline_stops_every_child(
    runner: Callable[..., list[Started]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "DEADLINE", 1.0)
    seen = runner(lambda: time.sleep(WAIT))
    assert run.main(["--out", str(tmp_path)]) == 1
    wait_dead(seen[0].pids)
    assert "DeadlineExceeded: stopped at the" in (tmp_path / "gpu-check.txt").read_text()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_every_child(
    runner: Callable[..., list[Started]], tmp_path: Path, signum: signal.Signals
) -> None:
    def end() -> None:
        os.kill(os.getpid(), signum)
        time.sleep(WAIT)

    seen = runner(end)
    with pytest.raises(SystemExit) as exited:
        run.main(["--out", str(tmp_path)])
    assert exited.value.code == 128 + signum
    wait_dead(seen[0].pids)
    assert seen[0].terminated() == [True, True, False]
    # what was gathered is still reported, the signal named as why the check did not run to its end
    assert (
        f"FAIL  check ran to the end: measured stopped (exit code {128 + signum})"
        in (tmp_path / "gpu-check.txt").read_text()
    )


def test_keyboard_interrupt_stops_every_child(runner: Callable[..., list[Started]], tmp_path: Path) -> None:
    seen = runner(fail(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        run.main(["--out", str(tmp_path)])
    wait_dead(seen[0].pids)
    assert "measured stopped by SIGINT" in (tmp_path / "gpu-check.txt").read_text()


# --- the runner as its own process, signalled from outside ---

# SIGINT is Python's KeyboardInterrupt only where the process started with SIGINT at its default: a test
# runner started in the background by a non-interactive shell (`make unit &`) passes it on ignored, and
# the check then rightly ignores it too, as every background job does. The driver stands for a check
# started from a terminal, whatever started the test runner.
DRIVER = """\
import signal, sys, time
import pynvml
from tools.gpucheck import children, run
signal.signal(signal.SIGINT, signal.default_int_handler)
run.probe = lambda: None
pynvml.nvmlShutdown = lambda: None
run.Children = lambda: children.Children(grace=0.5)
SLEEP = [sys.executable, sys.argv[2], sys.argv[3], sys.argv[4]]
def fake_run(self):
    proc = self.kids.start(SLEEP)
    print(proc.pid, flush=True)
    time.sleep(600)
run.Check.run = fake_run
sys.exit(run.main(["--out", sys.argv[1]]))
"""


# Starts the rest of its command line with SIGINT ignored, as a background job of a script starts.
IGNORING_SIGINT = [
    sys.executable,
    "-c",
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "os.execv(sys.argv[1], sys.argv[1:])",
]


@pytest.mark.parametrize(
    ("signum", "runner_ignores_sigint"),
    [
        pytest.param(signal.SIGTERM, False, id="SIGTERM"),
        pytest.param(signal.SIGINT, False, id="SIGINT"),
        # as under a test runner started in the background: the case that timed out
        pytest.param(signal.SIGINT, True, id="SIGINT-runner-in-background"),
        pytest.param(signal.SIGHUP, False, id="SIGHUP"),
        pytest.param(signal.SIGKILL, False, id="SIGKILL"),
    ],
)
def test_the_check_process_signalled_leaves_no_child(
    tmp_path: Path, sleeper: Path, leftovers: list[int], signum: signal.Signals, runner_ignores_sigint: bool
) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    marker = tmp_path / "child"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # SIGKILL leaves the check no code to run: only the kernel's PR_SET_PDEATHSIG ends its direct child,
    # not that child's own children (neither the workload nor the exporter starts any)
    mode = "term" if signum == signal.SIGKILL else "spawn"
    proc = subprocess.Popen(
        [
            *(IGNORING_SIGINT if runner_ignores_sigint else []),
            sys.executable,
            str(driver),
            str(tmp_path / "out"),
            str(sleeper),
            str(marker),
            mode,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        wait_for(Path(f"{marker}.ready").exists, "the child ready")
        grandchild = Path(f"{marker}.grandchild")
        pids = [child, *([int(grandchild.read_text())] if grandchild.exists() else [])]
        assert len(pids) == (1 if signum == signal.SIGKILL else 2)
        leftovers += pids
        assert all(alive(p) for p in pids)
        proc.send_signal(signum)
        code = proc.wait(WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wait_dead(pids)
    if signum == signal.SIGKILL:
        # no cleanup code ran: the kernel ended the child (PR_SET_PDEATHSIG), SIGKILL, no SIGTERM first
        assert code == -signal.SIGKILL and not marker.exists()
    else:
        assert code != 0 and marker.read_text() == "SIGTERM"  # stopped by the check itself
        report = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
        assert report["error"].startswith("stopped") and report["summary"]["FAIL"] == 1


def test_children_started_at_interpreter_exit_are_stopped(
    tmp_path: Path, sleeper: Path, leftovers: list[int]
) -> None:
    """The atexit layer: a script that never stops its Children still SIGTERMs them as it exits."""
    marker = tmp_path / "child"
    script = (
        "import sys, pathlib, time\n"
        "from tools.gpucheck.children import Children\n"
        f"kids = Children(grace=0.5)\n"
        f"proc = kids.start([sys.executable, {str(sleeper)!r}, {str(marker)!r}, 'term'])\n"
        f"while not pathlib.Path({str(marker) + '.ready'!r}).exists(): time.sleep(0.02)\n"
        "print(proc.pid, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=WAIT,
    )
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout)
    leftovers.append(pid)
    wait_dead([pid])
    assert marker.read_text() == "SIGTERM"


def test_children_inherit_this_tree_on_the_module_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = children.child_env({"CUDA_VISIBLE_DEVICES": "GPU-x"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(children.ROOT), "/elsewhere"]
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-x"


def test_args_default_to_out_and_bound_the_duration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OUT", str(tmp_path))
    args = run.parse_args([])
    assert args.out == tmp_path and args.duration == run.DEFAULT_DURATION
    assert isinstance(args, argparse.Namespace)
    for bad in ("9", "91", "nan", "inf", "x"):
        with pytest.raises(SystemExit) as exited:
            run.parse_args(["--duration", bad])
        assert exited.value.code == 2


def test_the_deadline_counts_from_the_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Time spent before the check proper (NVML's initialisation) is taken from its deadline."""
    armed: list[float] = []
    real = signal.setitimer

    def setitimer(which: int, seconds: float, interval: float = 0.0) -> tuple[float, float]:
        if seconds:
            armed.append(seconds)
        return real(which, seconds, interval)

    def slow_probe() -> None:
        time.sleep(0.3)

    monkeypatch.setattr(run, "probe", slow_probe)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(run.Check, "run", lambda self: None)
    monkeypatch.setattr(signal, "setitimer", setitimer)
    assert run.main(["--out", str(tmp_path)]) == 0
    (seconds,) = armed
    assert 0 < seconds <= run.DEADLINE - 0.3


def test_a_deadline_already_past_still_fires() -> None:
    expired = run.deadline(5.0, since=time.monotonic() - 10)
    with pytest.raises(run.DeadlineExceeded, match="stopped at the 5 s deadline"), expired:
        time.sleep(WAIT)


def test_a_kernel_refusing_pr_set_pdeathsig_still_starts_the_child() -> None:
    """The launcher's last layer missing (ctypes cannot reach prctl): a warning, and the child runs."""
    script = (
        "import ctypes, os, sys\n"
        "def refuse(*a, **k): raise OSError('no libc here')\n"
        "ctypes.CDLL = refuse\n"
        "from tools.gpucheck import children\n"
        "sys.exit(children._launch([str(os.getppid()), '--', sys.executable, '-c', 'print(7)']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=WAIT,
    )
    assert done.returncode == 0 and done.stdout == "7\n"
    assert "PR_SET_PDEATHSIG refused" in done.stderr
    assert children.die_with_parent() is True  # here, on Linux, the kernel takes it
