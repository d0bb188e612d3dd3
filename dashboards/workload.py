"""Namespace and workload: per pod, its GPU activity, memory, idle clock and how much data backs them."""

from __future__ import annotations

from typing import Any, Final

from dashboards import contracts as c
from dashboards import house as h
from dashboards import panels as p

UID: Final = "gpu-steward-workload"

NS: Final = f"namespace=~{h.regex('namespace')}"
PODS: Final = f"{{{NS}, pod=~{h.regex('pod')}}}"
POD_LEGEND: Final = "{{namespace}}/{{pod}}"


def build() -> Any:
    return h.dashboard(
        UID,
        "GPU Steward / Namespace and workload",
        "Per pod: GPU activity, memory, idle clock and coverage.",
        [_summary, _pods_now, _per_pod_over_time],
        [
            h.label_variable("namespace", "Namespace", c.POD_GPUS, "namespace"),
            h.label_variable("pod", "Pod", f"{c.POD_GPUS}{{{NS}}}", "pod"),
        ],
    )


def _summary(lay: h.Layout) -> None:
    lay.stats(
        p.gpus_stat(
            "GPUs held",
            "GPUs held by the selected namespaces' pods (a GPU shared by n pods counts 1/n to each).",
            f"sum({c.POD_GPUS}{{{NS}}})",
            h.ALLOCATED,
        ),
        p.gpus_stat(
            "GPUs idle",
            "GPUs held by pods that are idle right now.",
            f"sum({c.POD_GPUS_IDLE}{{{NS}}})",
            h.IDLE,
        ),
        p.problem_stat(
            "Pods with unknown activity",
            "Pods holding GPUs whose activity is unknown (no fresh, complete reading). Never idle.",
            f"count({c.POD_GPUS}{{{NS}}} unless on (namespace, pod) {c.POD_IDLE}) or vector(0)",
        ),
        p.idle_gpu_hours_stat(
            "GPU-hours the selected namespaces held idle in the trailing 24 hours.",
            f"sum({c.NAMESPACE_IDLE_GPU_HOURS_24H}{{{NS}}})",
        ),
    )


def _pods_now(lay: h.Layout) -> None:
    columns = [
        ("GPUs", p.Query(f"{c.POD_GPUS}{PODS}"), h.GPUS),
        ("activity", p.Query(f"{c.POD_ACTIVITY}{PODS}"), h.RATIO),
        ("idle for", p.Query(f"{c.POD_IDLE_SECONDS}{PODS}"), h.SECONDS),
        ("GPU memory", p.Query(f"{c.POD_MEMORY_RATIO}{PODS}"), h.RATIO),
        ("coverage 1h", p.Query(f"{c.POD_COVERAGE['1h']}{PODS}"), h.RATIO),
    ]
    pods = p.table(
        "Pods now",
        "One row per pod holding GPUs. Activity: max over the pod's GPUs of its containers' summed "
        f"share; at or below {c.IDLE_THRESHOLD:.0%} is idle. Idle for: continuous idle time (the "
        "automator's clock). Coverage: share of the last hour with readings; below "
        f"{c.MIN_COVERAGE:.0%} the automator does not trust the window. An empty "
        "activity cell means unknown, not idle.",
        columns,
        sort_by="idle for",
        thresholds={"activity": h.ACTIVITY_STEPS, "coverage 1h": h.COVERAGE_STEPS},
    )
    lay.add(pods, w=24, h=9)


def _per_pod_over_time(lay: h.Layout) -> None:
    lay.row("Per pod over time")
    coverage = [p.Query(f"{c.POD_COVERAGE[w]}{PODS}", f"{POD_LEGEND} {w}") for w in c.POD_COVERAGE]
    lay.line(
        12,
        p.series(
            "GPU activity",
            f"Each pod's GPU activity (0-1). The line is the idle threshold ({c.IDLE_THRESHOLD}): at or "
            "below it the pod is idle. Gaps are unknown readings, not idle time.",
            f"{c.POD_ACTIVITY}{PODS}",
            POD_LEGEND,
            unit=h.RATIO,
            thresholds=h.ACTIVITY_STEPS,
            threshold_line=True,
            max_value=1,
        ),
        p.series(
            "GPU memory",
            "Each pod's GPU memory as a share of its GPU's memory (max over its GPUs).",
            f"{c.POD_MEMORY_RATIO}{PODS}",
            POD_LEGEND,
            unit=h.RATIO,
            max_value=1,
        ),
        p.series(
            "Idle clock",
            "Continuous idle time per pod. It drops to 0 on any busy evaluation and pauses (keeps its value) "
            "while the activity is unknown. A pod class's gpu-idle-seconds is compared with this.",
            f"{c.POD_IDLE_SECONDS}{PODS}",
            POD_LEGEND,
            unit=h.SECONDS,
        ),
        p.timeseries(
            "Coverage",
            f"Share of the last hour with readings. Below {c.MIN_COVERAGE:.0%} (the line) an "
            "average over that window says little, and the automator leaves the pod alone.",
            coverage,
            unit=h.RATIO,
            thresholds=h.COVERAGE_STEPS,
            threshold_line=True,
            max_value=1,
        ),
    )
    held = [p.Query(f"sum({c.POD_GPUS}{PODS})", "held"), p.Query(f"sum({c.POD_GPUS_IDLE}{PODS})", "idle")]
    lay.add(
        p.timeseries(
            "GPUs held and idle",
            "GPUs held by the selected pods, and those held while idle.",
            held,
            unit=h.GPUS,
            colours={"held": h.ALLOCATED, "idle": h.IDLE},
        ),
        w=24,
    )
