"""Fleet overview: how many GPUs there are, how many are held, how many of those sit idle, and the waste."""

from __future__ import annotations

from typing import Any, Final

from dashboards import contracts as c
from dashboards import house as h

UID: Final = "gpu-steward-fleet"

# GPUs the exporters report, each counted once (lost and unreadable ones included).
GPUS_TOTAL: Final = f"count(max by (node, uuid) ({c.GPU_COLLECTION_SUCCESS}))"
# GPUs held by pods whose activity is unknown: neither idle nor busy, never counted as waste.
GPUS_UNKNOWN: Final = f"sum({c.POD_GPUS} unless on (namespace, pod) {c.POD_IDLE}) or vector(0)"
# `> -1` drops the NaN of 0/0: no GPUs held shows "no data", not a share.
IDLE_SHARE: Final = f"{c.FLEET_GPUS_IDLE} / {c.FLEET_GPUS} > -1"


def idle_gpu_hours_trend() -> Any:
    """The waste accumulated, over time (also on the reclaim dashboard, next to the evictions)."""
    return h.timeseries(
        "Idle GPU-hours in the trailing 24 h",
        "Each point: GPU-hours spent idle in the 24 hours before it. A falling line means less waste; "
        "reclaiming idle GPUs flattens it.",
        [h.Query(c.FLEET_IDLE_GPU_HOURS_24H, "fleet")],
        unit=h.GPU_HOURS,
        colours={"fleet": h.IDLE},
    )


def build() -> Any:
    lay = h.Layout()
    lay.stats(
        h.stat(
            "GPUs total",
            "GPUs the exporters report, each counted once, lost or unreadable ones included.",
            GPUS_TOTAL,
            unit=h.GPUS,
            colour=h.NEUTRAL,
        ),
        h.stat(
            "Allocated",
            "GPUs held by pods (allocated by the kubelet or in use). A GPU shared by n pods counts 1/n to "
            "each, so every GPU counts once.",
            c.FLEET_GPUS,
            unit=h.GPUS,
            colour=h.ALLOCATED,
        ),
        h.stat(
            "Allocated but idle",
            f"GPUs held by pods whose activity is at or below {c.IDLE_THRESHOLD:.0%} right now: the waste.",
            c.FLEET_GPUS_IDLE,
            unit=h.GPUS,
            colour=h.IDLE,
        ),
        h.stat(
            "Unknown",
            "GPUs held by pods whose activity is unknown (stale or failed readings, unattributed processes). "
            "Unknown is never counted as idle; see the node dashboard's exporter health.",
            GPUS_UNKNOWN,
            unit=h.GPUS,
            thresholds=h.ZERO_IS_GOOD,
        ),
        h.stat(
            "Idle share",
            "Allocated-but-idle GPUs over allocated GPUs.",
            IDLE_SHARE,
            unit=h.RATIO,
            thresholds=h.steps(h.BUSY, (0.1, h.IDLE), (0.3, h.BAD)),
        ),
        h.stat(
            "Idle GPU-hours, last 24 h",
            "GPU-hours spent allocated and idle in the trailing 24 hours, all namespaces.",
            c.FLEET_IDLE_GPU_HOURS_24H,
            unit=h.GPU_HOURS,
            colour=h.IDLE,
            decimals=1,
        ),
    )

    lay.row("Waste")
    lay.add(
        h.timeseries(
            "Allocated, idle and unknown GPUs",
            "The waste trend: allocated GPUs, those idle, and those whose activity is unknown.",
            [
                h.Query(c.FLEET_GPUS, "allocated"),
                h.Query(c.FLEET_GPUS_IDLE, "idle"),
                h.Query(GPUS_UNKNOWN, "unknown"),
            ],
            unit=h.GPUS,
            colours={"allocated": h.ALLOCATED, "idle": h.IDLE, "unknown": h.UNKNOWN},
        ),
        w=12,
    )
    lay.add(idle_gpu_hours_trend(), w=12)
    lay.add(
        h.table(
            "Idle GPU-hours by namespace",
            "Per namespace: GPU-hours idle in the last 24 h, GPUs held and GPUs idle now.",
            [
                ("idle GPU-hours, 24 h", h.Query(c.NAMESPACE_IDLE_GPU_HOURS_24H), h.GPU_HOURS),
                ("GPUs held", h.Query(f"sum by (namespace) ({c.POD_GPUS})"), h.GPUS),
                ("GPUs idle", h.Query(f"sum by (namespace) ({c.POD_GPUS_IDLE})"), h.GPUS),
            ],
            sort_by="idle GPU-hours, 24 h",
        ),
        w=12,
        h=9,
    )
    lay.add(
        h.table(
            "Top idle pods",
            "The ten pods idle the longest without a break, with the GPUs they hold. The automator "
            "reclaims such pods only when a higher-priority pod waits and the pod's class allows it "
            "(docs/reclaim.md).",
            [
                ("idle for", h.Query(f"topk(10, {c.POD_IDLE_SECONDS} > 0)"), h.SECONDS),
                (
                    "GPUs",
                    h.Query(f"{c.POD_GPUS} and on (namespace, pod) topk(10, {c.POD_IDLE_SECONDS} > 0)"),
                    h.GPUS,
                ),
            ],
            sort_by="idle for",
        ),
        w=12,
        h=9,
    )
    lay.add(
        h.timeseries(
            "Idle GPUs by namespace",
            "Allocated-but-idle GPUs per namespace, stacked.",
            [h.Query(f"sum by (namespace) ({c.POD_GPUS_IDLE})", "{{namespace}}")],
            unit=h.GPUS,
            stacked=True,
        ),
        w=24,
    )
    return h.dashboard(
        UID,
        "GPU Steward / Fleet overview",
        "GPUs total, allocated, allocated-but-idle and unknown; idle GPU-hours by namespace; top idle pods.",
        lay,
    )
