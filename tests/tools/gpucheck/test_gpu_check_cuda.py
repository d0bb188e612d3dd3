"""gpu-check's GPU load without a GPU: the PTX text, the ctypes driver calls against a fake libcuda (the
arguments as the driver would read them), the error paths, and the children's load shapes."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.gpucheck import cuda, workload
from tools.gpucheck.cuda import (
    KERNEL,
    KERNEL_PARAMS,
    PTX,
    PTX_TARGET,
    PTX_VERSION,
    CudaError,
    Driver,
    SpinKernel,
)

ROOT = Path(__file__).resolve().parents[3]
UUID_BYTES = bytes(range(0x10, 0x20))
ERRORS = {
    100: "CUDA_ERROR_NO_DEVICE",
    218: "CUDA_ERROR_INVALID_PTX",
    500: "CUDA_ERROR_NOT_FOUND",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
}


# --- the PTX ---


def ptx_lines() -> list[str]:
    return [line.strip() for line in PTX.splitlines() if line.strip()]


def test_ptx_header_is_version_target_address_size() -> None:
    assert ptx_lines()[:3] == [f".version {PTX_VERSION}", f".target {PTX_TARGET}", ".address_size 64"]
    major, minor = (int(x) for x in PTX_VERSION.split("."))
    assert (major, minor) >= (7, 0), "sm_80 needs PTX ISA 7.0"
    assert int(PTX_TARGET.removeprefix("sm_")) <= 90, "must run on an H100/H200 (sm_90)"


def test_ptx_has_one_entry_the_kernel_the_loader_asks_for() -> None:
    entries = re.findall(r"\.entry\s+(\w+)\s*\(", PTX)
    assert entries == [KERNEL]
    params = re.findall(r"\.param\s+\.u64\s+(\w+)", PTX)
    assert params == [f"{KERNEL}_param_{i}" for i in range(KERNEL_PARAMS)]
    for p in params:
        assert re.search(rf"ld\.param\.u64\s+%rd\d+,\s*\[{p}\];", PTX), f"{p} never read"


def test_ptx_body_is_well_formed() -> None:
    body = PTX[PTX.index("{") + 1 : PTX.rindex("}")]
    assert PTX.count("{") == PTX.count("}") == 1 and PTX.rstrip().endswith("}")
    declared = {kind: int(n) for kind, n in re.findall(r"\.reg\s+\.\w+\s+%(\w+?)<(\d+)>;", body)}
    assert set(declared) == {"p", "r", "rd"}
    for kind, index in re.findall(r"%(p|r|rd)(\d+)\b", body):
        assert int(index) < declared[kind], f"%{kind}{index} beyond %{kind}<{declared[kind]}>"
    labels = set(re.findall(r"^\s*(\$\w+):", body, re.M))
    targets = set(re.findall(r"\bbra\s+(\$\w+);", body))
    assert targets and targets <= labels
    for line in body.splitlines():
        line = line.strip()
        if line and not line.endswith(":"):
            assert line.endswith(";"), f"unterminated: {line!r}"
    assert "%globaltimer" in body and "st.global.u64" in body and body.strip().endswith("ret;")


@pytest.mark.skipif(
    subprocess.run(["which", "ptxas"], capture_output=True).returncode != 0, reason="no ptxas"
)
def test_ptxas_finds_the_entry(tmp_path: Path) -> None:
    (tmp_path / "k.ptx").write_text(PTX)
    done = subprocess.run(
        ["ptxas", "-arch=sm_90", "-v", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert f"Compiling entry function '{KERNEL}'" in done.stderr + done.stdout


# --- a fake libcuda: each call reads its arguments as the driver would ---


class FakeCuda:
    def __init__(self) -> None:
        self.fail: dict[str, int] = {}
        self.images: list[bytes] = []
        self.functions: list[bytes] = []
        self.allocs: list[int] = []
        self.ctx_flags: list[int] = []
        self.launches: list[tuple[int, int, list[int]]] = []  # grid, block, kernel arguments
        self.syncs = 0
        self.jit_log = b"ptxas application ptx input, line 7; error: Unknown symbol"
        self.sms = 132

    def _rc(self, name: str) -> int:
        return self.fail.get(name, 0)

    def cuGetErrorName(self, rc: ctypes.c_int, out: Any) -> int:
        if rc.value not in ERRORS:
            return 1
        out._obj.value = ERRORS[rc.value].encode()
        return 0

    def cuInit(self, flags: ctypes.c_uint) -> int:
        assert flags.value == 0
        return self._rc("cuInit")

    def cuDeviceGet(self, out: Any, ordinal: ctypes.c_int) -> int:
        out._obj.value = 7 + ordinal.value
        return self._rc("cuDeviceGet")

    def cuDeviceGetUuid(self, raw: Any, device: ctypes.c_int) -> int:
        assert device.value == 7
        ctypes.memmove(raw, UUID_BYTES, 16)
        return self._rc("cuDeviceGetUuid")

    def cuDeviceGetAttribute(self, out: Any, attribute: ctypes.c_int, device: ctypes.c_int) -> int:
        assert attribute.value == cuda.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT and device.value == 7
        out._obj.value = self.sms
        return self._rc("cuDeviceGetAttribute")

    def cuCtxCreate_v2(self, out: Any, flags: ctypes.c_uint, device: ctypes.c_int) -> int:
        self.ctx_flags.append(flags.value)
        out._obj.value = 0xC0
        return self._rc("cuCtxCreate_v2")

    def cuModuleLoadData(self, out: Any, image: Any) -> int:
        self.images.append(image.value)
        out._obj.value = 0xD0
        return self._rc("cuModuleLoadData")

    def cuModuleLoadDataEx(
        self, out: Any, image: Any, count: ctypes.c_uint, options: Any, values: Any
    ) -> int:
        assert list(options)[: count.value] == [
            cuda.CU_JIT_ERROR_LOG_BUFFER,
            cuda.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ]
        size = values[1]
        ctypes.memmove(values[0], self.jit_log + b"\0", min(size, len(self.jit_log) + 1))
        return 218

    def cuModuleGetFunction(self, out: Any, module: ctypes.c_void_p, name: bytes) -> int:
        assert module.value == 0xD0
        self.functions.append(name)
        out._obj.value = 0xF0
        entries = re.findall(rb"\.entry\s+(\w+)", self.images[-1])
        return self._rc("cuModuleGetFunction") or (0 if name in entries else 500)

    def cuMemAlloc_v2(self, out: Any, size: ctypes.c_size_t) -> int:
        self.allocs.append(size.value)
        out._obj.value = 0x7F0000000000
        return self._rc("cuMemAlloc_v2")

    def cuLaunchKernel(self, fn: Any, gx: Any, gy: Any, gz: Any, bx: Any, by: Any, bz: Any, shared: Any,
                       stream: Any, params: Any, extra: Any) -> int:  # fmt: skip
        assert fn.value == 0xF0 and (gy.value, gz.value, by.value, bz.value, shared.value) == (1, 1, 1, 1, 0)
        assert stream.value is None and extra.value is None
        args = [
            ctypes.cast(params[i], ctypes.POINTER(ctypes.c_uint64)).contents.value
            for i in range(KERNEL_PARAMS)
        ]
        self.launches.append((gx.value, bx.value, args))
        return self._rc("cuLaunchKernel")

    def cuCtxSynchronize(self) -> int:
        self.syncs += 1
        return self._rc("cuCtxSynchronize")

    def cuMemcpyDtoH_v2(self, out: Any, ptr: ctypes.c_uint64, size: ctypes.c_size_t) -> int:
        assert size.value == 8 and ptr.value == self.launches[-1][2][1]
        out._obj.value = self.launches[-1][2][0] + 1234  # the kernel spun a little longer than asked
        return self._rc("cuMemcpyDtoH_v2")


def test_a_kernel_child_starts_as_the_driver_sees_it() -> None:
    lib = FakeCuda()
    ready, kernel = workload.start("busy", 3 << 30, lib)
    assert kernel is not None
    assert ready == {
        "role": "busy",
        "pid": ready["pid"],
        "uuid": "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f",
        "allocated_bytes": 3 << 30,
        "probe_spin_ns": 1_001_234,
        "probe_requested_ns": 1_000_000,
    }
    assert lib.images == [PTX.encode()] and lib.functions == [KERNEL.encode()]
    assert lib.ctx_flags == [cuda.CU_CTX_SCHED_BLOCKING_SYNC] and lib.allocs == [3 << 30]
    assert lib.launches == [(132, cuda.THREADS_PER_BLOCK, [1_000_000, 0x7F0000000000])]  # one block per SM
    kernel.spin(0.025)
    assert lib.launches[-1][2] == [25_000_000, 0x7F0000000000]


def test_the_memory_child_never_loads_a_kernel() -> None:
    lib = FakeCuda()
    ready, kernel = workload.start("memory", 1 << 30, lib)
    assert kernel is None and "probe_spin_ns" not in ready
    assert lib.images == [] and lib.launches == [] and lib.allocs == [1 << 30]


@pytest.mark.parametrize(
    ("call", "code", "message"),
    [
        ("cuInit", 100, "cuInit: CUDA_ERROR_NO_DEVICE (100)"),
        ("cuMemAlloc_v2", 2, "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)"),
        ("cuModuleGetFunction", 500, "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND (500)"),
        ("cuLaunchKernel", 999, "cuLaunchKernel: CUresult 999"),  # a code the driver cannot name
    ],
)
def test_a_failing_call_is_named_with_the_drivers_error(call: str, code: int, message: str) -> None:
    lib = FakeCuda()
    lib.fail[call] = code
    with pytest.raises(CudaError) as raised:
        workload.start("busy", 1 << 20, lib)
    assert str(raised.value) == message


def test_a_ptx_the_jit_refuses_carries_its_log() -> None:
    lib = FakeCuda()
    lib.fail["cuModuleLoadData"] = 218
    driver = Driver(lib)
    with pytest.raises(CudaError) as raised:
        SpinKernel(driver, 7)
    assert str(raised.value) == (
        "cuModuleLoadData: CUDA_ERROR_INVALID_PTX (218); JIT log: " + lib.jit_log.decode()
    )


def test_a_driver_without_error_names_still_fails_clearly() -> None:
    class Without:
        """A libcuda lacking one symbol: ctypes raises AttributeError on its lookup."""

        def __init__(self, lib: FakeCuda, missing: str) -> None:
            self.lib, self.missing = lib, missing

        def __getattr__(self, name: str) -> Any:
            if name == self.missing:
                raise AttributeError(f"undefined symbol: {name}")
            return getattr(self.lib, name)

    lib = FakeCuda()
    lib.fail["cuInit"] = 3
    with pytest.raises(CudaError, match=r"^cuInit: CUresult 3$"):
        Driver(Without(lib, "cuGetErrorName")).init()
    lib.fail = {"cuModuleLoadData": 218}
    with pytest.raises(CudaError, match=r"; JIT log: empty$"):  # no cuModuleLoadDataEx to ask for the log
        Driver(Without(lib, "cuModuleLoadDataEx")).load_module(PTX)


def test_without_libcuda_the_loader_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda, "LIBRARY", "libcuda-absent-for-this-test.so.1")
    with pytest.raises(OSError, match=r"^no CUDA driver library: libcuda-absent-for-this-test\.so\.1 "):
        cuda.load_library()


def test_format_uuid() -> None:
    assert cuda.format_uuid(bytes(16)) == "GPU-00000000-0000-0000-0000-000000000000"
    with pytest.raises(ValueError, match="16 bytes, got 15"):
        cuda.format_uuid(bytes(15))


# --- the workload process ---


@pytest.fixture
def handlers() -> Iterator[None]:
    """workload.main installs its own SIGTERM/SIGINT handlers: put pytest's back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def test_workload_prints_one_error_line_and_exits_1_when_cuda_fails(
    capsys: pytest.CaptureFixture[str], handlers: None
) -> None:
    def absent() -> Any:
        raise OSError("no CUDA driver library: libcuda.so.1 (part of the NVIDIA driver) not loaded: gone")

    assert workload.main(["busy", "--bytes", "1024"], loader=absent) == 1
    (line,) = capsys.readouterr().out.splitlines()
    doc = json.loads(line)
    assert doc["role"] == "busy" and isinstance(doc["pid"], int) and "libcuda.so.1" in doc["error"]
    lib = FakeCuda()
    lib.fail["cuInit"] = 100
    assert workload.main(["duty", "--bytes", "1024"], loader=lambda: lib) == 1
    assert json.loads(capsys.readouterr().out)["error"] == "cuInit: CUDA_ERROR_NO_DEVICE (100)"


@pytest.mark.parametrize("role", workload.ROLES)
def test_workload_prints_its_ready_line_then_runs_until_its_time_is_up(
    role: str, capsys: pytest.CaptureFixture[str], handlers: None
) -> None:
    lib = FakeCuda()
    assert workload.main([role, "--bytes", "4096", "--max-seconds", "0.3"], loader=lambda: lib) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["allocated_bytes"] == 4096
    assert (len(lib.launches) > 1) == (role != "memory")


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="a libcuda is here")
def test_workload_process_without_libcuda_fails_cleanly() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.gpucheck.workload", "busy", "--bytes", str(1 << 20)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = done.stdout.splitlines()
    assert "no CUDA driver library: libcuda.so.1" in json.loads(line)["error"]


@pytest.mark.parametrize(
    "argv",
    [
        ["busy", "--bytes", "4"],
        ["idle", "--bytes", "64"],
        ["busy"],
        ["busy", "--bytes", "64", "--max-seconds", "0"],
        ["busy", "--bytes", "64", "--max-seconds", "601"],
        ["busy", "--bytes", "64", "--max-seconds", "nan"],
    ],
)
def test_workload_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        workload.main(argv, loader=FakeCuda)
    assert exited.value.code == 2 and "gpu-check workload" in capsys.readouterr().err


# --- the load shapes, on a simulated GPU whose kernels run as they are synchronized ---


class SimGpu:
    def __init__(self, clock: list[float], launch_overhead: float = 0.0) -> None:
        self.clock = clock
        self.queued: list[float] = []
        self.busy = 0.0
        self.launch_overhead = launch_overhead
        self.syncs: list[int] = []

    def spin(self, seconds: float) -> None:
        self.queued.append(seconds)
        self.clock[0] += self.launch_overhead

    def synchronize(self) -> None:
        self.syncs.append(len(self.queued))
        self.busy += sum(self.queued)
        self.clock[0] += sum(self.queued)
        self.queued = []


def stop_after(clock: list[float], seconds: float) -> Callable[[], bool]:
    return lambda: clock[0] >= seconds


def test_busy_keeps_kernels_queued_back_to_back() -> None:
    clock = [0.0]
    gpu = SimGpu(clock)
    workload.busy_loop(gpu, stop_after(clock, 10.0))
    assert set(gpu.syncs) == {workload.BUSY_QUEUE}  # several in flight before each wait
    assert gpu.busy / clock[0] == pytest.approx(1.0)


@pytest.mark.parametrize("overhead", [0.0, 0.004])
def test_duty_cycle_is_its_share_of_each_period(overhead: float) -> None:
    clock = [0.0]
    gpu = SimGpu(clock, launch_overhead=overhead)

    def sleep(seconds: float) -> None:
        assert seconds > 0
        clock[0] += seconds

    workload.duty_loop(gpu, stop_after(clock, 10.0), clock=lambda: clock[0], sleep=sleep)
    assert gpu.busy / clock[0] == pytest.approx(workload.DUTY_CYCLE, rel=0.02)
    # a late launch shortens the rest, not the period: 10 s is 100 periods whatever the overhead
    assert len(gpu.syncs) == pytest.approx(10.0 / workload.DUTY_PERIOD_SECONDS, abs=1)


def test_memory_only_sleeps() -> None:
    naps: list[float] = []
    workload.memory_loop(lambda: len(naps) >= 3, sleep=naps.append)
    assert naps == [naps[0]] * 3 and naps[0] > 0
