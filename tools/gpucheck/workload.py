"""The check's child processes, each a GPU load of known behaviour (`python -m tools.gpucheck.workload`).

- busy: kernels queued back to back, so a kernel runs about 100 % of the time;
- duty: one kernel of DUTY_CYCLE x DUTY_PERIOD_SECONDS per period, then sleep: about 30 % of the time;
- memory: holds its allocation and never launches a kernel (a loaded but idle process).

Each allocates `--bytes` of device memory first, prints one JSON line (role, pid, GPU UUID, bytes
allocated, and for the kernels the time a first probe kernel spun), then runs until SIGTERM/SIGINT or
`--max-seconds`, so a child whose parent vanished ends by itself. A CUDA failure prints
`{"role", "pid", "error"}` and exits 1. CUDA device 0 is the GPU CUDA_VISIBLE_DEVICES names.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, Protocol

from tools.gpucheck.cuda import CudaError, Driver, SpinKernel, load_library

ROLES = ("busy", "duty", "memory")
BUSY_SPIN_SECONDS = 0.025
BUSY_QUEUE = 4  # kernels in flight, so the GPU never waits for the CPU between two
DUTY_CYCLE = 0.3
DUTY_PERIOD_SECONDS = 0.1
PROBE_SPIN_SECONDS = 0.001
MAX_SECONDS = 600.0
_IDLE_STEP_SECONDS = 0.2


class Gpu(Protocol):
    def spin(self, seconds: float) -> None: ...
    def synchronize(self) -> None: ...


def busy_loop(gpu: Gpu, stop: Callable[[], bool]) -> None:
    while not stop():
        for _ in range(BUSY_QUEUE):
            gpu.spin(BUSY_SPIN_SECONDS)
        gpu.synchronize()


def duty_loop(
    gpu: Gpu,
    stop: Callable[[], bool],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """One kernel per period, timed from the period's start so launch latency does not stretch it."""
    while not stop():
        start = clock()
        gpu.spin(DUTY_CYCLE * DUTY_PERIOD_SECONDS)
        gpu.synchronize()
        rest = DUTY_PERIOD_SECONDS - (clock() - start)
        if rest > 0:
            sleep(rest)


def memory_loop(stop: Callable[[], bool], sleep: Callable[[float], None] = time.sleep) -> None:
    while not stop():
        sleep(_IDLE_STEP_SECONDS)


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu-check workload")
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("--bytes", type=int, required=True, help="device memory to allocate and hold")
    parser.add_argument("--max-seconds", type=float, default=180.0, help="end by itself after this")
    args = parser.parse_args(argv)
    if args.bytes < 8:
        parser.error(f"--bytes: expected at least 8, got {args.bytes}")
    if not 0 < args.max_seconds <= MAX_SECONDS:
        parser.error(f"--max-seconds: expected a number in (0, {MAX_SECONDS:g}], got {args.max_seconds}")
    return args


def start(role: str, size: int, lib: Any) -> tuple[dict[str, Any], SpinKernel | None]:
    """Context, allocation and (busy, duty) the kernel with a first probe run; the ready line."""
    driver = Driver(lib)
    driver.init()
    device = driver.device(0)
    uuid = driver.uuid(device)
    driver.create_context(device)
    kernel = SpinKernel(driver, device) if role != "memory" else None
    held = driver.alloc(size)
    ready: dict[str, Any] = {"role": role, "pid": os.getpid(), "uuid": uuid, "allocated_bytes": size}
    if kernel is not None:
        kernel.target(held)  # thread 0 stores its spin time in the first 8 bytes of the held memory
        kernel.spin(PROBE_SPIN_SECONDS)
        kernel.synchronize()
        ready["probe_spin_ns"] = kernel.last_spin_ns()
        ready["probe_requested_ns"] = round(PROBE_SPIN_SECONDS * 1e9)
    return ready, kernel


def main(argv: Sequence[str] | None = None, loader: Callable[[], Any] = load_library) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    stopping: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    deadline = time.monotonic() + args.max_seconds

    def stop() -> bool:
        return bool(stopping) or time.monotonic() >= deadline

    try:
        ready, kernel = start(args.role, args.bytes, loader())
    except (OSError, CudaError) as e:
        print(json.dumps({"role": args.role, "pid": os.getpid(), "error": str(e)}), flush=True)
        return 1
    print(json.dumps(ready), flush=True)
    if kernel is None:
        memory_loop(stop)
    elif args.role == "busy":
        busy_loop(kernel, stop)
    else:
        duty_loop(kernel, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
