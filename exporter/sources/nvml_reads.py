"""One NVML read at a time, its error classified (the NVML source's calls; imports `pynvml`).

NOT_SUPPORTED leaves a field out, GPU_IS_LOST / RESET_REQUIRED raise GpuLost, any other error marks the
GPU not ok and records the error under the field's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from exporter.model import GpuSample

T = TypeVar("T")

_LOST = {pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED}


class GpuLost(Exception):
    """The GPU is gone (GPU_IS_LOST, RESET_REQUIRED): stop reading it, report it lost."""


def error_name(e: pynvml.NVMLError) -> str:
    """A short stable name for an NVML error, used as a label value (e.g. `NoPermission`)."""
    name = type(e).__name__
    if name.startswith("NVMLError_"):
        return name.removeprefix("NVMLError_")
    return f"code_{getattr(e, 'value', 'unknown')}"


def code_of(e: pynvml.NVMLError) -> int | None:
    value = getattr(e, "value", None)
    return value if isinstance(value, int) else None


def text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def record(sample: GpuSample, field: str, e: pynvml.NVMLError) -> None:
    """Classify a failed read: GpuLost when the GPU is gone, nothing for NOT_SUPPORTED (the field is
    just absent), else the GPU is not ok and the error is kept under `field`."""
    code = code_of(e)
    if code in _LOST:
        raise GpuLost(error_name(e)) from e
    if code != pynvml.NVML_ERROR_NOT_SUPPORTED:
        sample.ok = False
        sample.errors[field] = error_name(e)


def call(sample: GpuSample, field: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """One NVML read; None when it failed (see `record`)."""
    try:
        return fn(*args, **kwargs)
    except pynvml.NVMLError as e:
        record(sample, field, e)
        return None


def versions() -> tuple[str | None, str | None]:
    """The driver's and CUDA's versions, None where NVML does not tell."""
    try:
        driver: str | None = text(pynvml.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError:
        driver = None
    try:
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())  # e.g. 12040
        cuda_text: str | None = f"{cuda // 1000}.{cuda % 1000 // 10}"
    except pynvml.NVMLError:
        cuda_text = None
    return driver, cuda_text


# nvmlValueType_t -> the member of the value union holding it
_FIELD_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}


def field_values(sample: GpuSample, handle: object, ids: list[tuple[int, int]]) -> list[float | None] | None:
    """nvmlDeviceGetFieldValues: per field its value, None when that field failed (not recorded: a
    board without the sensor answers per field); None when the call itself failed."""
    values = call(sample, "field_values", pynvml.nvmlDeviceGetFieldValues, handle, ids)
    if values is None:
        return None
    out: list[float | None] = []
    for v in values:
        if int(getattr(v, "nvmlReturn", 1)) != pynvml.NVML_SUCCESS:
            out.append(None)
            continue
        member = _FIELD_VALUE_MEMBERS.get(int(v.valueType), "ullVal")
        out.append(float(getattr(v.value, member)))
    return out


def ratio(percent: float) -> float:
    return min(1.0, max(0.0, float(percent) / 100.0))
