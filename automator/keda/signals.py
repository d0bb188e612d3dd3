"""Signals, aggregations and profiles: what a KEDA trigger can ask for, and the PromQL behind each (pure).

Every signal is read per (pod, GPU) pair of the workload, then aggregated across those pairs. One query per
(base series, window) serves every workload: results are grouped by pod, never queried per workload.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from steward_common.metrics import GPU_MEMORY_TOTAL, GPU_POWER, GPU_TEMPERATURE
from steward_common.series import (
    CONTAINER_EXPECTED,
    CONTAINER_MEMORY,
    CONTAINER_UTILIZATION,
    POD_ACTIVITY,
    POD_GPUS,
    POD_IDLE,
    POD_MEMORY_RATIO,
)

# Label that tells the per-pod freshness timestamps apart from the (pod, GPU) values in one query result.
STAT_LABEL: Final = "stat"
STAT_TIMESTAMP: Final = "ts"
_POD: Final = "cluster, namespace, pod, pod_uid"
_GPU: Final = "cluster, node, uuid"


class Base(StrEnum):
    """The measured quantity a query reads; signals over one base share its query."""

    UTILIZATION = "utilization"
    MEMORY_BYTES = "memory_bytes"
    MEMORY_RATIO = "memory_ratio"
    POWER = "power"
    TEMPERATURE = "temperature"
    IDLE = "idle"


@dataclass(frozen=True)
class Signal:
    name: str
    base: Base
    scale: float  # value = base reading x scale
    unit: str
    help: str


# Names the seed scaler (keda-gpu-scaler) used, accepted for easy migration.
ALIASES: Final[dict[str, str]] = {"power_draw": "power_watts", "temperature": "temperature_celsius"}
SIGNALS: Final[dict[str, Signal]] = {
    s.name: s
    for s in (
        Signal(
            "gpu_utilization",
            Base.UTILIZATION,
            100.0,
            "percent",
            "the pod's own share of the GPU's time (its processes only, on shared GPUs too), 0-100",
        ),
        Signal(
            "memory_used_bytes",
            Base.MEMORY_BYTES,
            1.0,
            "bytes",
            "GPU memory used by the pod's processes on that GPU",
        ),
        Signal("memory_used_mib", Base.MEMORY_BYTES, 1.0 / 2**20, "MiB", "the same in MiB (2^20 bytes)"),
        Signal(
            "memory_used_ratio",
            Base.MEMORY_RATIO,
            1.0,
            "ratio",
            "GPU memory used by the pod's processes / the GPU's memory, 0-1",
        ),
        Signal("memory_used_percent", Base.MEMORY_RATIO, 100.0, "percent", "the same in percent, 0-100"),
        Signal(
            "power_watts",
            Base.POWER,
            1.0,
            "watts",
            "the GPU's power draw divided by the number of pods holding it (a shared GPU's power is split)",
        ),
        Signal(
            "temperature_celsius",
            Base.TEMPERATURE,
            1.0,
            "celsius",
            "the GPU's temperature (a property of the GPU: pods sharing it read the same)",
        ),
        Signal(
            "idle_ratio",
            Base.IDLE,
            1.0,
            "ratio",
            "share of the window the pod was idle (activity at or below the idle threshold), 0-1",
        ),
    )
}


def signal(name: str) -> Signal | None:
    return SIGNALS.get(ALIASES.get(name, name))


def _percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 1]."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


AGGREGATIONS: Final[dict[str, Callable[[Sequence[float]], float]]] = {
    "max": max,
    "min": min,
    "avg": lambda v: math.fsum(v) / len(v),
    "sum": math.fsum,
    "p95": lambda v: _percentile(v, 0.95),
}
METRIC_TYPES: Final = ("Value", "AverageValue")


@dataclass(frozen=True)
class Profile:
    """A common workload's signal, aggregation and window, with the KEDA trigger settings to use."""

    name: str
    signal: str
    aggregation: str
    window_seconds: int
    target: float
    activation: float
    metric_type: str
    help: str


PROFILES: Final[dict[str, Profile]] = {
    p.name: p
    for p in (
        Profile(
            "vllm-inference",
            "memory_used_percent",
            "avg",
            120,
            80.0,
            5.0,
            "Value",
            "vLLM servers, as the seed scaler had it: memory in use (see docs/keda.md)",
        ),
        Profile(
            "triton-inference",
            "gpu_utilization",
            "avg",
            120,
            75.0,
            10.0,
            "Value",
            "Triton and other request servers: GPU time follows the request rate",
        ),
        Profile(
            "training",
            "gpu_utilization",
            "avg",
            300,
            90.0,
            0.0,
            "Value",
            "data-parallel training: add workers while the GPUs stay saturated",
        ),
        Profile(
            "batch",
            "memory_used_percent",
            "avg",
            300,
            70.0,
            1.0,
            "Value",
            "batch jobs: memory in use shows queued work",
        ),
    )
}


def _held() -> str:
    """Every (pod, node, GPU) the pod holds: allocated, or running a process on it (the rules' own set)."""
    return f"group by ({_POD}, node, uuid) ({CONTAINER_EXPECTED} or {CONTAINER_UTILIZATION})"


def values_expr(base: Base, window_seconds: int) -> str:
    """Per (pod, GPU) value of a base over the window, before the signal's scale."""
    w = f"[{window_seconds}s]"
    if base is Base.UTILIZATION:
        return f"sum by ({_POD}, uuid) (avg_over_time({CONTAINER_UTILIZATION}{w}))"
    if base is Base.MEMORY_BYTES:
        return f"sum by ({_POD}, uuid) (avg_over_time({CONTAINER_MEMORY}{w}))"
    if base is Base.MEMORY_RATIO:
        return (
            f"max by ({_POD}, uuid) (sum by ({_POD}, node, uuid) (avg_over_time({CONTAINER_MEMORY}{w}))"
            f" / on ({_GPU}) group_left () max by ({_GPU}) ({GPU_MEMORY_TOTAL.name} > 0))"
        )
    if base is Base.POWER:
        per_gpu = f"max by ({_GPU}) (avg_over_time({GPU_POWER.name}{w}))"
        holders = f"count by ({_GPU}) ({_held()})"
        share = f"({per_gpu} / on ({_GPU}) {holders})"
        return f"max by ({_POD}, uuid) ({_held()} * on ({_GPU}) group_left () {share})"
    if base is Base.TEMPERATURE:
        per_gpu = f"max by ({_GPU}) (avg_over_time({GPU_TEMPERATURE.name}{w}))"
        return f"max by ({_POD}, uuid) ({_held()} * on ({_GPU}) group_left () {per_gpu})"
    if base is Base.IDLE:
        per_pod = f"max by ({_POD}) (avg_over_time({POD_IDLE}{w}))"
        return f"max by ({_POD}, uuid) ({_held()} * on ({_POD}) group_left () {per_pod})"
    raise ValueError(f"unknown base {base!r}")


# The recorded series whose presence says a pod's reading of a base is complete and current: absent when
# any expected reading is missing (the rules' contract), so a partial pod is never read as a low value.
GATES: Final[dict[Base, str]] = {
    Base.UTILIZATION: POD_ACTIVITY,
    Base.MEMORY_BYTES: POD_MEMORY_RATIO,
    Base.MEMORY_RATIO: POD_MEMORY_RATIO,
    Base.POWER: POD_GPUS,
    Base.TEMPERATURE: POD_GPUS,
    Base.IDLE: POD_IDLE,
}


def query(base: Base, window_seconds: int) -> str:
    """One query for every pod: (pod, GPU) values of complete pods, and each pod's last gate sample time."""
    gate = GATES[base]
    values = f"({values_expr(base, window_seconds)}) and on ({_POD}) {gate}"
    stamps = f'label_replace(max by ({_POD}) (timestamp({gate})), "{STAT_LABEL}", "{STAT_TIMESTAMP}", "", "")'
    return f"{values} or {stamps}"
