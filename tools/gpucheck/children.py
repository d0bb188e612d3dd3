"""Child processes that never outlive the check.

Three layers, so that no GPU load is left running whatever ends the check:
- `Children` stops every child it started (SIGTERM to the child's process group, SIGKILL after a grace
  period) when its `with` block ends (a return, an exception, KeyboardInterrupt, SystemExit) and, as a
  last resort, at interpreter exit (atexit);
- `exit_on_signals` turns SIGTERM and SIGHUP into SystemExit, so those unwind through the same code
  (SIGINT is Python's KeyboardInterrupt, unwinding alike, except in a check started with SIGINT ignored,
  as a background job is: that check ignores it, as background jobs do; SIGTERM still stops it);
- every child is started through this module's launcher (`python -m tools.gpucheck.children PPID --
  ARGV...`), which asks the kernel to SIGKILL it when its parent dies (prctl PR_SET_PDEATHSIG, kept across
  exec), then execs the command: even a SIGKILLed check leaves no child behind (the children it starts:
  neither the workload nor the exporter starts processes of its own, whose group only the first two
  layers reach).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
PR_SET_PDEATHSIG = 1
GRACE_SECONDS = 3.0


def die_with_parent() -> bool:
    """Ask the kernel for SIGKILL when the parent dies; False where it would not take the request."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL), 0, 0, 0) == 0)
    except (AttributeError, OSError):
        return False


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child: this tree first on the module path (not an installed copy)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


class Children:
    """Starts children in process groups of their own and stops them all on exit (see the module)."""

    def __init__(self, grace: float = GRACE_SECONDS) -> None:
        self.grace = grace
        self.procs: list[subprocess.Popen[Any]] = []
        atexit.register(self.stop_all)

    def start(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
    ) -> subprocess.Popen[Any]:
        launcher = [sys.executable, "-m", "tools.gpucheck.children", str(os.getpid()), "--", *argv]
        proc: subprocess.Popen[Any] = subprocess.Popen(
            launcher,
            env=child_env(env),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            process_group=0,  # its own group: a stop reaches whatever it starts too
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        """SIGTERM every running child's group, wait up to `grace` seconds, then SIGKILL; reap all."""
        running = [p for p in self.procs if p.poll() is None]
        for proc in running:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for proc in running:
            with suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGKILL)
                with suppress(subprocess.TimeoutExpired):
                    proc.wait(self.grace)
            else:
                _signal_group(proc, signal.SIGKILL)  # a grandchild left in the group of an exited child
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    with suppress(OSError):
                        stream.close()

    def __enter__(self) -> Children:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_all()


def _signal_group(proc: subprocess.Popen[Any], signum: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


@contextmanager
def exit_on_signals(signums: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Within the block, these signals raise SystemExit(128 + signum): cleanup code runs as on an error."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def _launch(argv: Sequence[str]) -> int:
    """`PPID -- ARGV...`: die with the parent, then become ARGV."""
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m tools.gpucheck.children PPID -- ARGV...", file=sys.stderr)
        return 2
    armed = die_with_parent()
    # The parent may have died between fork and prctl: then no signal would ever come.
    if os.getppid() != int(argv[0]):
        print("gpu-check: child not started: its parent is gone", file=sys.stderr)
        return 1
    if not armed:  # the check's own cleanup (the first two layers) still stops it
        print(
            "gpu-check: PR_SET_PDEATHSIG refused: this child ends with the check's cleanup", file=sys.stderr
        )
    os.execvp(argv[2], list(argv[2:]))
    return 1  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    sys.exit(_launch(sys.argv[1:]))
