"""A victim PriorityClass's annotations (the plugin's, docs/reclaim.md) read into ClassSettings with the
automator's defaults filled in; malformed values are recorded, and the class's pods are then protected.
Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeVar

from automator.objects.priority_class import PriorityClass
from automator.reclaim.model import AnnotationWarning, PlannerConfig, UsageWindow
from steward_common.conventions import (
    ANN_CPU_IDLE_SECONDS,
    ANN_CPU_IDLE_THRESHOLD,
    ANN_GPU_IDLE_SECONDS,
    ANN_GPU_IDLE_THRESHOLD,
    ANN_MIN_PREEMPTABLE_PRIORITY,
    ANN_TOLERATION_SECONDS,
)
from steward_common.settingspec import MAX_NUMBER_LENGTH, shown, whole_number

# The longest usage window (and guaranteed run time) an annotation may ask for: 7 days. Longer is a typo
# (and a query Prometheus' retention cannot answer); the class's pods are then protected.
MAX_WINDOW_SECONDS = 7 * 86_400
# CPU thresholds are in cores, not a ratio: bounded by the largest machine anyone runs.
MAX_CPU_THRESHOLD_CORES = 4096.0


_N = TypeVar("_N", int, float)


@dataclass(frozen=True)
class ClassSettings:
    """A victim PriorityClass's annotations with the automator's defaults filled in."""

    min_preemptable: int | None
    toleration_seconds: int
    gpu_idle_seconds: int
    gpu_threshold: float
    cpu_idle_seconds: int
    cpu_threshold: float
    # without the class name and pods (the index adds them when it warns)
    malformed: tuple[AnnotationWarning, ...] = ()

    @property
    def window(self) -> UsageWindow:
        return UsageWindow(self.gpu_idle_seconds, self.cpu_idle_seconds)


def _checked(
    value: _N | None, problem: str | None, key: str, raw: Any, bad: list[AnnotationWarning]
) -> _N | None:
    """value, or None with the problem recorded (the class's pods are then protected)."""
    if problem is None:
        return value
    bad.append(AnnotationWarning("", key, str(raw), f"{key}: {problem}", ()))
    return None


def _int(
    raw: Any, key: str, minimum: int | None, bad: list[AnnotationWarning], maximum: int | None = None
) -> int | None:
    try:
        value = whole_number(str(raw))
    except ValueError:
        return _checked(None, f"{shown(str(raw))} is not an integer", key, raw, bad)
    problem = None
    if minimum is not None and value < minimum:
        problem = f"{value} is below {minimum}"
    elif maximum is not None and value > maximum:
        problem = f"{value} is above {maximum} (7 days)"
    return _checked(value, problem, key, raw, bad)


def _float(raw: Any, key: str, bad: list[AnnotationWarning], upper: float | None = None) -> float | None:
    try:
        if len(str(raw)) > MAX_NUMBER_LENGTH:
            raise ValueError(str(raw))
        value = float(str(raw).strip())
    except ValueError:
        return _checked(None, f"{shown(str(raw))} is not a number", key, raw, bad)
    problem = None
    if not math.isfinite(value) or value < 0:
        problem = f"{str(raw)!r} is not a finite number >= 0"
    elif upper is not None and value > upper:
        # GPU activity is a 0-1 ratio: a threshold like 5 (percent?) would make every pod idle.
        problem = f"{str(raw)!r} is above {upper:g} (a 0-1 ratio)"
    return _checked(value, problem, key, raw, bad)


def class_settings(pc: PriorityClass | None, config: PlannerConfig) -> ClassSettings:
    """Read the plugin's annotations: missing -> defaults, malformed -> recorded (the pod is protected)."""
    ann = pc.annotations if pc is not None else {}
    bad: list[AnnotationWarning] = []
    minimum = (
        _int(ann[ANN_MIN_PREEMPTABLE_PRIORITY], ANN_MIN_PREEMPTABLE_PRIORITY, None, bad)
        if (ANN_MIN_PREEMPTABLE_PRIORITY in ann)
        else None
    )
    toleration = config.default_toleration_seconds
    if ANN_TOLERATION_SECONDS in ann:
        toleration = (
            _int(ann[ANN_TOLERATION_SECONDS], ANN_TOLERATION_SECONDS, None, bad, MAX_WINDOW_SECONDS) or 0
        )
    gpu_seconds = 0
    if ANN_GPU_IDLE_SECONDS in ann:
        gpu_seconds = _int(ann[ANN_GPU_IDLE_SECONDS], ANN_GPU_IDLE_SECONDS, 0, bad, MAX_WINDOW_SECONDS) or 0
    # The plugin's default window of 0 made `[0s]` queries read as idle: never use a zero window.
    if gpu_seconds <= 0:
        gpu_seconds = config.default_gpu_idle_seconds
    gpu_threshold = config.default_gpu_idle_threshold
    if ANN_GPU_IDLE_THRESHOLD in ann:
        parsed = _float(ann[ANN_GPU_IDLE_THRESHOLD], ANN_GPU_IDLE_THRESHOLD, bad, upper=1.0)
        gpu_threshold = parsed if parsed is not None else gpu_threshold
    cpu_seconds = 0
    if ANN_CPU_IDLE_SECONDS in ann:
        cpu_seconds = _int(ann[ANN_CPU_IDLE_SECONDS], ANN_CPU_IDLE_SECONDS, 0, bad, MAX_WINDOW_SECONDS) or 0
    cpu_threshold = 0.0
    if ANN_CPU_IDLE_THRESHOLD in ann:
        parsed = _float(ann[ANN_CPU_IDLE_THRESHOLD], ANN_CPU_IDLE_THRESHOLD, bad, MAX_CPU_THRESHOLD_CORES)
        cpu_threshold = parsed if parsed is not None else 0.0
    return ClassSettings(
        minimum, toleration, gpu_seconds, gpu_threshold, cpu_seconds, cpu_threshold, tuple(bad)
    )
