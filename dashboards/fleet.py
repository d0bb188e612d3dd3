"""Fleet overview: how many GPUs there are, how many are held, how many of those sit idle, and the waste."""

from __future__ import annotations

from typing import Any, Final

from dashboards import contracts as c
from dashboards import house as h
from dashboards import panels as p

UID: Final = "gpu-steward-fleet"

# GPUs the exporters report, each counted once (lost and unreadable ones included).
GPUS_TOTAL: Final = f"count(max by (node, uuid) ({c.GPU_COLLECTION_SUCCESS}))"
# GPUs held by pods whose activity is unknown: neither idle nor busy, never counted as waste.
GPUS_UNKNOWN: Final = f"sum({c.POD_GPUS} unless on (namespace, pod) {c.POD_IDLE}) or vector(0)"
# `> -1` drops the NaN of 0/0: no GPUs held shows "no data", not a share.
IDLE_SHARE: Final = f"{c.FLEET_GPUS_IDLE} / {c.FLEET_GPUS} > -1"


def idle_gpu_hours_trend() -> Any:
    """The waste accumulated, over time (also on the reclaim dashboard, next to the evictions)."""
    return p.series(
        "Idle GPU-hours in the trailing 24 h",
        "Each point: GPU-hours spent idle in the 24 hours before it. A falling line means less waste; "
        "reclaiming idle GPUs flattens it.",
        c.FLEET_IDLE_GPU_HOURS_24H,
        "fleet",
        unit=h.GPU_HOURS,
        colours={"fleet": h.IDLE},
    )


def build() -> Any:
    return h.dashboard(
        UID,
        "GPU Steward / Fleet overview",
        "GPUs total, allocated, allocated-but-idle and unknown; idle GPU-hours by namespace; top idle pods.",
        [_summary, _waste],
    )


def _summary(lay: h.Layout) -> None:
    lay.stats(
        p.gpus_stat(
            "GPUs total",
            "GPUs the exporters report, each counted once, lost or unreadable ones included.",
            GPUS_TOTAL,
            h.NEUTRAL,
        ),
        p.gpus_stat(
            "Allocated",
            "GPUs held by pods (allocated by the kubelet or in use). A GPU shared by n pods counts 1/n to "
            "each, so every GPU counts once.",
            c.FLEET_GPUS,
            h.ALLOCATED,
        ),
        p.gpus_stat(
            "Allocated but idle",
            f"GPUs held by pods whose activity is at or below {c.IDLE_THRESHOLD:.0%} right now: the waste.",
            c.FLEET_GPUS_IDLE,
            h.IDLE,
        ),
        p.problem_stat(
            "Unknown",
            "GPUs held by pods whose activity is unknown (stale or failed readings, unattributed processes). "
            "Unknown is never counted as idle; see the node dashboard's exporter health.",
            GPUS_UNKNOWN,
            unit=h.GPUS,
        ),
        p.stat(
            "Idle share",
            "Allocated-but-idle GPUs over allocated GPUs.",
            IDLE_SHARE,
            unit=h.RATIO,
            thresholds=h.steps(h.BUSY, (0.1, h.IDLE), (0.3, h.BAD)),
        ),
        p.idle_gpu_hours_stat(
            "GPU-hours spent allocated and idle in the trailing 24 hours, all namespaces.",
            c.FLEET_IDLE_GPU_HOURS_24H,
        ),
    )


def _waste(lay: h.Layout) -> None:
    lay.row("Waste")
    trend = [
        p.Query(c.FLEET_GPUS, "allocated"),
        p.Query(c.FLEET_GPUS_IDLE, "idle"),
        p.Query(GPUS_UNKNOWN, "unknown"),
    ]
    lay.line(
        12,
        p.timeseries(
            "Allocated, idle and unknown GPUs",
            "The waste trend: allocated GPUs, those idle, and those whose activity is unknown.",
            trend,
            unit=h.GPUS,
            colours={"allocated": h.ALLOCATED, "idle": h.IDLE, "unknown": h.UNKNOWN},
        ),
        idle_gpu_hours_trend(),
    )
    lay.line(12, _by_namespace(), _top_idle_pods(), h=9)
    lay.add(
        p.series(
            "Idle GPUs by namespace",
            "Allocated-but-idle GPUs per namespace, stacked.",
            f"sum by (namespace) ({c.POD_GPUS_IDLE})",
            "{{namespace}}",
            unit=h.GPUS,
            stacked=True,
        ),
        w=24,
    )


def _by_namespace() -> Any:
    columns = [
        ("idle GPU-hours, 24 h", p.Query(c.NAMESPACE_IDLE_GPU_HOURS_24H), h.GPU_HOURS),
        ("GPUs held", p.Query(f"sum by (namespace) ({c.POD_GPUS})"), h.GPUS),
        ("GPUs idle", p.Query(f"sum by (namespace) ({c.POD_GPUS_IDLE})"), h.GPUS),
    ]
    return p.table(
        "Idle GPU-hours by namespace",
        "Per namespace: GPU-hours idle in the last 24 h, GPUs held and GPUs idle now.",
        columns,
        sort_by="idle GPU-hours, 24 h",
    )


def _top_idle_pods() -> Any:
    top = f"topk(10, {c.POD_IDLE_SECONDS} > 0)"
    columns = [
        ("idle for", p.Query(top), h.SECONDS),
        ("GPUs", p.Query(f"{c.POD_GPUS} and on (namespace, pod) {top}"), h.GPUS),
    ]
    return p.table(
        "Top idle pods",
        "The ten pods idle the longest without a break, with the GPUs they hold. The automator "
        "reclaims such pods only when a higher-priority pod waits and the pod's class allows it "
        "(docs/reclaim.md).",
        columns,
        sort_by="idle for",
    )
