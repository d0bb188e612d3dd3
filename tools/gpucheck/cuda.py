"""The CUDA driver API through ctypes: a context, device memory, and a PTX spin kernel the driver compiles.

No CUDA toolkit is needed: libcuda.so.1 comes with the NVIDIA driver, and the driver's JIT compiles the
PTX below for whatever GPU it runs on (PTX for sm_80 runs on sm_80 and every later architecture, the
H100/H200's sm_90 included). Every call's CUresult is checked and a failure raises CudaError naming the
function and the driver's error name.
"""

from __future__ import annotations

import ctypes
from typing import Any

KERNEL = "gpu_check_spin"
PTX_VERSION = "7.0"  # PTX ISA 7.0: CUDA 11.0 drivers (r450) and later accept it
PTX_TARGET = "sm_80"
KERNEL_PARAMS = 2  # spin_ns (u64), out (u64 device pointer)

# Spins each thread until %globaltimer (nanoseconds, the same clock on every SM, unlike clock64 whose rate
# follows the SM clock) has advanced by spin_ns. Thread 0 of block 0 then stores the time it spun at `out`:
# a side effect, so the JIT cannot drop the loop, and a reading that proves the kernel ran.
PTX = f"""\
.version {PTX_VERSION}
.target {PTX_TARGET}
.address_size 64

.visible .entry {KERNEL}(
\t.param .u64 {KERNEL}_param_0,
\t.param .u64 {KERNEL}_param_1
)
{{
\t.reg .pred \t%p<3>;
\t.reg .b32 \t%r<4>;
\t.reg .b64 \t%rd<7>;

\tld.param.u64 \t%rd1, [{KERNEL}_param_0];
\tmov.u64 \t%rd2, %globaltimer;
$L__spin:
\tmov.u64 \t%rd3, %globaltimer;
\tsub.u64 \t%rd4, %rd3, %rd2;
\tsetp.lt.u64 \t%p1, %rd4, %rd1;
\t@%p1 bra \t$L__spin;
\tmov.u32 \t%r1, %tid.x;
\tmov.u32 \t%r2, %ctaid.x;
\tor.b32 \t%r3, %r1, %r2;
\tsetp.ne.s32 \t%p2, %r3, 0;
\t@%p2 bra \t$L__done;
\tld.param.u64 \t%rd5, [{KERNEL}_param_1];
\tcvta.to.global.u64 \t%rd6, %rd5;
\tst.global.u64 \t[%rd6], %rd4;
$L__done:
\tret;
}}
"""

LIBRARY = "libcuda.so.1"
CU_CTX_SCHED_BLOCKING_SYNC = 0x4  # synchronize by sleeping, not spinning a CPU core
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
THREADS_PER_BLOCK = 128


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


def load_library() -> Any:
    """The driver's libcuda; an OSError saying so when there is none (no NVIDIA driver here)."""
    try:
        return ctypes.CDLL(LIBRARY)
    except OSError as e:
        raise OSError(f"no CUDA driver library: {LIBRARY} (part of the NVIDIA driver) not loaded: {e}") from e


def format_uuid(raw: bytes) -> str:
    """A CUuuid's 16 bytes as NVML writes a GPU's UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    if len(raw) != 16:
        raise ValueError(f"a CUDA UUID has 16 bytes, got {len(raw)}")
    h = raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Driver:
    """The few driver API calls the check needs, on a loaded libcuda (or a fake of it in tests)."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def _call(self, name: str, *args: Any) -> None:
        rc = int(getattr(self._lib, name)(*args))
        if rc != 0:
            raise CudaError(f"{name}: {self.error_name(rc)}")

    def error_name(self, rc: int) -> str:
        text = ctypes.c_char_p()
        try:
            if int(self._lib.cuGetErrorName(ctypes.c_int(rc), ctypes.byref(text))) == 0 and text.value:
                return f"{text.value.decode(errors='replace')} ({rc})"
        except (AttributeError, OSError):
            pass
        return f"CUresult {rc}"

    def init(self) -> None:
        self._call("cuInit", ctypes.c_uint(0))

    def device(self, ordinal: int) -> int:
        dev = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(dev), ctypes.c_int(ordinal))
        return dev.value

    def uuid(self, device: int) -> str:
        raw = (ctypes.c_char * 16)()
        self._call("cuDeviceGetUuid", raw, ctypes.c_int(device))
        return format_uuid(bytes(raw))

    def attribute(self, attribute: int, device: int) -> int:
        value = ctypes.c_int()
        self._call("cuDeviceGetAttribute", ctypes.byref(value), ctypes.c_int(attribute), ctypes.c_int(device))
        return value.value

    def create_context(self, device: int) -> ctypes.c_void_p:
        ctx = ctypes.c_void_p()
        self._call(
            "cuCtxCreate_v2",
            ctypes.byref(ctx),
            ctypes.c_uint(CU_CTX_SCHED_BLOCKING_SYNC),
            ctypes.c_int(device),
        )
        return ctx

    def load_module(self, ptx: str) -> ctypes.c_void_p:
        """cuModuleLoadData of NUL-terminated PTX; on failure the JIT's error log is in the message."""
        image = ctypes.create_string_buffer(ptx.encode())
        module = ctypes.c_void_p()
        rc = int(self._lib.cuModuleLoadData(ctypes.byref(module), image))
        if rc == 0:
            return module
        log = self._jit_log(image) or "empty"
        raise CudaError(f"cuModuleLoadData: {self.error_name(rc)}; JIT log: {log}")

    def _jit_log(self, image: ctypes.Array[ctypes.c_char]) -> str:
        log = ctypes.create_string_buffer(8192)
        options = (ctypes.c_int * 2)(CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        values = (ctypes.c_void_p * 2)(ctypes.addressof(log), len(log))
        try:
            self._lib.cuModuleLoadDataEx(
                ctypes.byref(ctypes.c_void_p()), image, ctypes.c_uint(2), options, values
            )
        except (AttributeError, OSError):
            return ""
        return log.value.decode(errors="replace").strip()

    def function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        fn = ctypes.c_void_p()
        self._call("cuModuleGetFunction", ctypes.byref(fn), module, name.encode())
        return fn

    def alloc(self, size: int) -> int:
        ptr = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(size))
        return ptr.value

    def launch(self, fn: ctypes.c_void_p, grid: int, block: int, *args: int) -> None:
        """cuLaunchKernel on the default stream; each argument a u64 (kernelParams points at each)."""
        values = [ctypes.c_uint64(a) for a in args]
        params = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
        one = ctypes.c_uint(1)
        self._call(
            "cuLaunchKernel",
            fn,
            ctypes.c_uint(grid),
            one,
            one,
            ctypes.c_uint(block),
            one,
            one,
            ctypes.c_uint(0),
            ctypes.c_void_p(None),
            params,
            ctypes.c_void_p(None),
        )

    def synchronize(self) -> None:
        self._call("cuCtxSynchronize")

    def read_u64(self, ptr: int) -> int:
        value = ctypes.c_uint64()
        self._call("cuMemcpyDtoH_v2", ctypes.byref(value), ctypes.c_uint64(ptr), ctypes.c_size_t(8))
        return value.value


class SpinKernel:
    """The PTX spin kernel loaded in the current context, one block per SM so that every SM spins."""

    def __init__(self, driver: Driver, device: int) -> None:
        self._driver = driver
        self._fn = driver.function(driver.load_module(PTX), KERNEL)
        self._grid = max(1, driver.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device))
        self._out = 0

    def target(self, out: int) -> None:
        """Where thread 0 stores the time it spun (8 bytes of device memory)."""
        self._out = out

    def spin(self, seconds: float) -> None:
        """Queue one kernel that keeps every SM busy for `seconds` (returns at once)."""
        self._driver.launch(self._fn, self._grid, THREADS_PER_BLOCK, round(seconds * 1e9), self._out)

    def synchronize(self) -> None:
        self._driver.synchronize()

    def last_spin_ns(self) -> int:
        return self._driver.read_u64(self._out)
