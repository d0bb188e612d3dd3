"""Namespace and workload: per pod, its GPU activity, memory, idle clock and how much data backs them."""

from __future__ import annotations

from typing import Any, Final

from dashboards import contracts as c
from dashboards import house as h

UID: Final = "gpu-steward-workload"

NS: Final = f"namespace=~{h.regex('namespace')}"
PODS: Final = f"{{{NS}, pod=~{h.regex('pod')}}}"


def build() -> Any:
    lay = h.Layout()
    lay.stats(
        h.stat(
            "GPUs held",
            "GPUs held by the selected namespaces' pods (a GPU shared by n pods counts 1/n to each).",
            f"sum({c.POD_GPUS}{{{NS}}})",
            unit=h.GPUS,
            colour=h.ALLOCATED,
        ),
        h.stat(
            "GPUs idle",
            "GPUs held by pods that are idle right now.",
            f"sum({c.POD_GPUS_IDLE}{{{NS}}})",
            unit=h.GPUS,
            colour=h.IDLE,
        ),
        h.stat(
            "Pods with unknown activity",
            "Pods holding GPUs whose activity is unknown (no fresh, complete reading). Never idle.",
            f"count({c.POD_GPUS}{{{NS}}} unless on (namespace, pod) {c.POD_IDLE}) or vector(0)",
            thresholds=h.ZERO_IS_GOOD,
        ),
        h.stat(
            "Idle GPU-hours, last 24 h",
            "GPU-hours the selected namespaces held idle in the trailing 24 hours.",
            f"sum({c.NAMESPACE_IDLE_GPU_HOURS_24H}{{{NS}}})",
            unit=h.GPU_HOURS,
            colour=h.IDLE,
            decimals=1,
        ),
    )
    lay.add(
        h.table(
            "Pods now",
            "One row per pod holding GPUs. Activity: max over the pod's GPUs of its containers' summed "
            f"share; at or below {c.IDLE_THRESHOLD:.0%} is idle. Idle for: continuous idle time (the "
            "automator's clock). Coverage: share of the last hour with readings; below "
            f"{c.MIN_COVERAGE:.0%} the automator does not trust the window. An empty "
            "activity cell means unknown, not idle.",
            [
                ("GPUs", h.Query(f"{c.POD_GPUS}{PODS}"), h.GPUS),
                ("activity", h.Query(f"{c.POD_ACTIVITY}{PODS}"), h.RATIO),
                ("idle for", h.Query(f"{c.POD_IDLE_SECONDS}{PODS}"), h.SECONDS),
                ("GPU memory", h.Query(f"{c.POD_MEMORY_RATIO}{PODS}"), h.RATIO),
                ("coverage 1h", h.Query(f"{c.POD_COVERAGE['1h']}{PODS}"), h.RATIO),
            ],
            sort_by="idle for",
            thresholds={"activity": h.ACTIVITY_STEPS, "coverage 1h": h.COVERAGE_STEPS},
        ),
        w=24,
        h=9,
    )

    lay.row("Per pod over time")
    lay.add(
        h.timeseries(
            "GPU activity",
            f"Each pod's GPU activity (0-1). The line is the idle threshold ({c.IDLE_THRESHOLD}): at or "
            "below it the pod is idle. Gaps are unknown readings, not idle time.",
            [h.Query(f"{c.POD_ACTIVITY}{PODS}", "{{namespace}}/{{pod}}")],
            unit=h.RATIO,
            thresholds=h.ACTIVITY_STEPS,
            threshold_line=True,
            max_value=1,
        ),
        w=12,
    )
    lay.add(
        h.timeseries(
            "GPU memory",
            "Each pod's GPU memory as a share of its GPU's memory (max over its GPUs).",
            [h.Query(f"{c.POD_MEMORY_RATIO}{PODS}", "{{namespace}}/{{pod}}")],
            unit=h.RATIO,
            max_value=1,
        ),
        w=12,
    )
    lay.add(
        h.timeseries(
            "Idle clock",
            "Continuous idle time per pod. It drops to 0 on any busy evaluation and pauses (keeps its value) "
            "while the activity is unknown. A pod class's gpu-idle-seconds is compared with this.",
            [h.Query(f"{c.POD_IDLE_SECONDS}{PODS}", "{{namespace}}/{{pod}}")],
            unit=h.SECONDS,
        ),
        w=12,
    )
    lay.add(
        h.timeseries(
            "Coverage",
            f"Share of the last hour with readings. Below {c.MIN_COVERAGE:.0%} (the line) an "
            "average over that window says little, and the automator leaves the pod alone.",
            [h.Query(f"{c.POD_COVERAGE[w]}{PODS}", "{{namespace}}/{{pod}} " + w) for w in c.POD_COVERAGE],
            unit=h.RATIO,
            thresholds=h.COVERAGE_STEPS,
            threshold_line=True,
            max_value=1,
        ),
        w=12,
    )
    lay.add(
        h.timeseries(
            "GPUs held and idle",
            "GPUs held by the selected pods, and those held while idle.",
            [
                h.Query(f"sum({c.POD_GPUS}{PODS})", "held"),
                h.Query(f"sum({c.POD_GPUS_IDLE}{PODS})", "idle"),
            ],
            unit=h.GPUS,
            colours={"held": h.ALLOCATED, "idle": h.IDLE},
        ),
        w=24,
    )
    return h.dashboard(
        UID,
        "GPU Steward / Namespace and workload",
        "Per pod: GPU activity, memory, idle clock and coverage.",
        lay,
        variables=[
            h.label_variable("namespace", "Namespace", c.POD_GPUS, "namespace"),
            h.label_variable("pod", "Pod", f"{c.POD_GPUS}{{{NS}}}", "pod"),
        ],
    )
