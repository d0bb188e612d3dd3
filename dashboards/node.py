"""Node and GPU detail: per GPU and per container readings, unattributed use, and the exporter's health."""

from __future__ import annotations

from typing import Any, Final

from dashboards import contracts as c
from dashboards import house as h
from dashboards import panels as p

UID: Final = "gpu-steward-node"

NODE: Final = f"{{node=~{h.regex('node')}}}"
GPU: Final = f"{{node=~{h.regex('node')}, uuid=~{h.regex('gpu')}}}"
GPU_LEGEND: Final = "{{node}} gpu {{gpu}}"
CONTAINER_LEGEND: Final = "{{namespace}}/{{pod}}/{{container}} on gpu {{gpu}}"


def build() -> Any:
    return h.dashboard(
        UID,
        "GPU Steward / Node and GPU detail",
        "Per GPU and per container readings, unattributed usage, and the exporter's health.",
        [_summary, _per_gpu, _per_container, _unattributed, _exporter_health],
        [
            h.label_variable("node", "Node", c.GPU_COLLECTION_SUCCESS, "node"),
            h.label_variable("gpu", "GPU (uuid)", f"{c.GPU_COLLECTION_SUCCESS}{NODE}", "uuid"),
        ],
    )


def _held(pods: str = "") -> str:
    """GPUs of the selected nodes held by containers (of the pods `pods` joins to), each GPU once."""
    return f"count(group by (cluster, node, uuid) ({c.HELD_GPU_BY_CONTAINER}{NODE}{pods})) or vector(0)"


def _gpu_series(title: str, description: str, metric: str, legend: str = GPU_LEGEND, **options: Any) -> Any:
    """One series per selected GPU (or per container on it, by `legend`) of an exporter metric."""
    return p.series(title, description, f"{metric}{GPU}", legend, **options)


def _summary(lay: h.Layout) -> None:
    lay.stats(
        p.stat(
            "GPUs",
            "GPUs the selected nodes' exporters report.",
            f"count({c.GPU_COLLECTION_SUCCESS}{GPU})",
            unit=h.GPUS,
            colour=h.NEUTRAL,
        ),
        p.gpus_stat(
            "Held by pods",
            "GPUs on the selected nodes held by at least one pod (a time-sliced GPU counts once).",
            _held(),
            h.ALLOCATED,
        ),
        p.gpus_stat(
            "Held idle",
            "GPUs on the selected nodes held by at least one idle pod.",
            _held(f" * on (cluster, namespace, pod, pod_uid) group_left () ({c.POD_IDLE} == 1)"),
            h.IDLE,
        ),
        p.problem_stat(
            "Lost or unreadable",
            "GPUs NVML reports lost, or with a field that failed to read in the last collection. Their "
            "containers have no activity series (unknown, never idle).",
            f"count(({c.GPU_LOST}{GPU} == 1) or ({c.GPU_COLLECTION_SUCCESS}{GPU} == 0)) or vector(0)",
            unit=h.GPUS,
        ),
        p.stat(
            "Oldest snapshot",
            f"Age of the oldest snapshot the selected exporters serve. From {c.FRESHNESS_SECONDS} s on the "
            "rules ignore the node's readings (stuck collector).",
            f"max({c.EXPORTER_SNAPSHOT_AGE}{NODE})",
            unit=h.SECONDS,
            thresholds=h.SNAPSHOT_AGE_STEPS,
        ),
        p.problem_stat(
            "Attribution sources degraded",
            "Attribution sources (proc, podresources, kubernetes_api) that did not answer in the last "
            "collection: processes become unresolved and containers' series disappear.",
            f"count({c.EXPORTER_ATTRIBUTION_AVAILABLE}{NODE} == 0) or vector(0)",
        ),
    )


def _per_gpu(lay: h.Layout) -> None:
    lay.row("Per GPU")
    lay.line(
        12,
        _gpu_series(
            "GPU utilization",
            "Share of time a kernel ran on each GPU (NVML device counter).",
            c.GPU_UTILIZATION,
            unit=h.RATIO,
            max_value=1,
        ),
        p.timeseries(
            "GPU memory used",
            "Framebuffer memory in use per GPU, and each GPU's size.",
            [
                p.Query(f"{c.GPU_MEMORY_USED}{GPU}", GPU_LEGEND),
                p.Query(f"{c.GPU_MEMORY_TOTAL}{GPU}", GPU_LEGEND + " size"),
            ],
            unit=h.BYTES,
        ),
    )
    lay.line(
        8,
        _gpu_series(
            "Memory bandwidth utilization",
            "Share of time device memory was read or written.",
            c.GPU_MEMORY_UTILIZATION,
            unit=h.RATIO,
            max_value=1,
        ),
        _gpu_series("Temperature", "GPU core temperature.", c.GPU_TEMPERATURE, unit=h.CELSIUS),
        _gpu_series("Power", "GPU power draw.", c.GPU_POWER, unit=h.WATTS),
    )


def _per_container(lay: h.Layout) -> None:
    lay.row("Per container")
    lay.line(
        12,
        _gpu_series(
            "Container GPU utilization",
            "Each container's share of each GPU's time. 0 while it holds the GPU without running on it; "
            "absent when the share is unknown (GPU unreadable, unresolved processes on a shared GPU).",
            c.CONTAINER_UTILIZATION,
            CONTAINER_LEGEND,
            unit=h.RATIO,
            thresholds=h.ACTIVITY_STEPS,
            threshold_line=True,
            max_value=1,
        ),
        _gpu_series(
            "Container GPU memory",
            "GPU memory used by each container's processes, per GPU.",
            c.CONTAINER_MEMORY_USED,
            CONTAINER_LEGEND,
            unit=h.BYTES,
        ),
    )
    allocations = [
        ("allocated", p.Query(f"{c.GPU_ALLOCATION}{GPU}"), h.COUNT),
        ("processes", p.Query(f"{c.CONTAINER_PROCESSES}{GPU}"), h.COUNT),
    ]
    lay.add(
        p.table(
            "Allocations now",
            "Which container the kubelet allocated each GPU to, and how many of its processes run there.",
            allocations,
        ),
        w=24,
        h=8,
    )


def _unattributed(lay: h.Layout) -> None:
    lay.row("Unattributed usage")
    by_reason = GPU_LEGEND + " {{reason}}"
    lay.line(
        8,
        _gpu_series(
            "Unattributed utilization",
            "GPU use by processes in no container: reason host (outside Kubernetes) or unresolved "
            "(attribution failed). Unresolved use on a shared GPU makes its containers' shares unknown.",
            c.UNATTRIBUTED_UTILIZATION,
            by_reason,
            unit=h.RATIO,
            max_value=1,
        ),
        _gpu_series(
            "Unattributed memory",
            "GPU memory of processes in no container.",
            c.UNATTRIBUTED_MEMORY_USED,
            by_reason,
            unit=h.BYTES,
        ),
        p.series(
            "Unattributed processes",
            "Processes in no container, by reason.",
            f"sum by (node, reason) ({c.UNATTRIBUTED_PROCESSES}{GPU})",
            "{{node}} {{reason}}",
        ),
    )


def _exporter_health(lay: h.Layout) -> None:
    lay.row("Exporter health")
    lay.line(
        8,
        p.series(
            "Snapshot age",
            f"Age of the snapshot each exporter serves. At {c.FRESHNESS_SECONDS} s (the line) the rules stop "
            "using the node's readings: its pods become unknown, not idle.",
            f"{c.EXPORTER_SNAPSHOT_AGE}{NODE}",
            "{{node}}",
            unit=h.SECONDS,
            thresholds=h.SNAPSHOT_AGE_STEPS,
            threshold_line=True,
        ),
        p.timeseries(
            "Collection errors",
            "Collections that failed as a whole, and NVML field reads that failed (by field and error).",
            [
                p.Query(p.increase_by(c.EXPORTER_COLLECTION_ERRORS, "node", NODE), "{{node}} collections"),
                p.Query(
                    p.increase_by(c.GPU_READ_ERRORS, "node, field, error", GPU),
                    "{{node}} {{field}}: {{error}}",
                ),
            ],
            bars=True,
        ),
        p.series(
            "Attribution degraded",
            "1 while an attribution source does not answer (proc: /proc cgroups, podresources: the "
            "kubelet socket, kubernetes_api: the pod list). Processes are then unresolved.",
            f"1 - min by (node, source) ({c.EXPORTER_ATTRIBUTION_AVAILABLE}{NODE})",
            "{{node}} {{source}}",
            max_value=1,
            thresholds=h.ZERO_IS_GOOD,
        ),
    )
    failing = [
        p.Query(f"sum by (node) (1 - {c.GPU_COLLECTION_SUCCESS}{GPU})", "{{node}} read failures"),
        p.Query(f"sum by (node) ({c.GPU_LOST}{GPU})", "{{node}} lost"),
    ]
    lay.line(
        12,
        p.series(
            "Collection duration",
            "How long the collection behind each scrape took (NVML, attribution).",
            f"{c.EXPORTER_COLLECTION_DURATION}{NODE}",
            "{{node}}",
            unit=h.SECONDS,
        ),
        p.timeseries(
            "GPUs failing collection",
            "Per node: GPUs with a field that failed to read, and GPUs NVML reports lost.",
            failing,
            unit=h.GPUS,
        ),
    )
