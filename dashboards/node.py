"""Node and GPU detail: per GPU and per container readings, unattributed use, and the exporter's health."""

from __future__ import annotations

from typing import Any, Final

from dashboards import contracts as c
from dashboards import house as h

UID: Final = "gpu-steward-node"

NODE: Final = f"{{node=~{h.regex('node')}}}"
GPU: Final = f"{{node=~{h.regex('node')}, uuid=~{h.regex('gpu')}}}"
GPU_LEGEND: Final = "{{node}} gpu {{gpu}}"
CONTAINER_LEGEND: Final = "{{namespace}}/{{pod}}/{{container}} on gpu {{gpu}}"


def build() -> Any:
    lay = h.Layout()
    lay.stats(
        h.stat(
            "GPUs",
            "GPUs the selected nodes' exporters report.",
            f"count({c.GPU_COLLECTION_SUCCESS}{GPU})",
            unit=h.GPUS,
            colour=h.NEUTRAL,
        ),
        h.stat(
            "Held by pods",
            "GPUs on the selected nodes held by at least one pod (a time-sliced GPU counts once).",
            f"count(group by (cluster, node, uuid) ({c.HELD_GPU_BY_CONTAINER}{NODE})) or vector(0)",
            unit=h.GPUS,
            colour=h.ALLOCATED,
        ),
        h.stat(
            "Held idle",
            "GPUs on the selected nodes held by at least one idle pod.",
            f"count(group by (cluster, node, uuid) ({c.HELD_GPU_BY_CONTAINER}{NODE} "
            f"* on (cluster, namespace, pod, pod_uid) group_left () ({c.POD_IDLE} == 1))) or vector(0)",
            unit=h.GPUS,
            colour=h.IDLE,
        ),
        h.stat(
            "Lost or unreadable",
            "GPUs NVML reports lost, or with a field that failed to read in the last collection. Their "
            "containers have no activity series (unknown, never idle).",
            f"count(({c.GPU_LOST}{GPU} == 1) or ({c.GPU_COLLECTION_SUCCESS}{GPU} == 0)) or vector(0)",
            unit=h.GPUS,
            thresholds=h.ZERO_IS_GOOD,
        ),
        h.stat(
            "Oldest snapshot",
            f"Age of the oldest snapshot the selected exporters serve. From {c.FRESHNESS_SECONDS} s on the "
            "rules ignore the node's readings (stuck collector).",
            f"max({c.EXPORTER_SNAPSHOT_AGE}{NODE})",
            unit=h.SECONDS,
            thresholds=h.SNAPSHOT_AGE_STEPS,
        ),
        h.stat(
            "Attribution sources degraded",
            "Attribution sources (proc, podresources, kubernetes_api) that did not answer in the last "
            "collection: processes become unresolved and containers' series disappear.",
            f"count({c.EXPORTER_ATTRIBUTION_AVAILABLE}{NODE} == 0) or vector(0)",
            thresholds=h.ZERO_IS_GOOD,
        ),
    )

    lay.row("Per GPU")
    lay.add(
        h.timeseries(
            "GPU utilization",
            "Share of time a kernel ran on each GPU (NVML device counter).",
            [h.Query(f"{c.GPU_UTILIZATION}{GPU}", GPU_LEGEND)],
            unit=h.RATIO,
            max_value=1,
        ),
        w=12,
    )
    lay.add(
        h.timeseries(
            "GPU memory used",
            "Framebuffer memory in use per GPU, and each GPU's size.",
            [
                h.Query(f"{c.GPU_MEMORY_USED}{GPU}", GPU_LEGEND),
                h.Query(f"{c.GPU_MEMORY_TOTAL}{GPU}", GPU_LEGEND + " size"),
            ],
            unit=h.BYTES,
        ),
        w=12,
    )
    lay.add(
        h.timeseries(
            "Memory bandwidth utilization",
            "Share of time device memory was read or written.",
            [h.Query(f"{c.GPU_MEMORY_UTILIZATION}{GPU}", GPU_LEGEND)],
            unit=h.RATIO,
            max_value=1,
        ),
        w=8,
    )
    lay.add(
        h.timeseries(
            "Temperature",
            "GPU core temperature.",
            [h.Query(f"{c.GPU_TEMPERATURE}{GPU}", GPU_LEGEND)],
            unit=h.CELSIUS,
        ),
        w=8,
    )
    lay.add(
        h.timeseries(
            "Power",
            "GPU power draw.",
            [h.Query(f"{c.GPU_POWER}{GPU}", GPU_LEGEND)],
            unit=h.WATTS,
        ),
        w=8,
    )

    lay.row("Per container")
    lay.add(
        h.timeseries(
            "Container GPU utilization",
            "Each container's share of each GPU's time. 0 while it holds the GPU without running on it; "
            "absent when the share is unknown (GPU unreadable, unresolved processes on a shared GPU).",
            [h.Query(f"{c.CONTAINER_UTILIZATION}{GPU}", CONTAINER_LEGEND)],
            unit=h.RATIO,
            thresholds=h.ACTIVITY_STEPS,
            threshold_line=True,
            max_value=1,
        ),
        w=12,
    )
    lay.add(
        h.timeseries(
            "Container GPU memory",
            "GPU memory used by each container's processes, per GPU.",
            [h.Query(f"{c.CONTAINER_MEMORY_USED}{GPU}", CONTAINER_LEGEND)],
            unit=h.BYTES,
        ),
        w=12,
    )
    lay.add(
        h.table(
            "Allocations now",
            "Which container the kubelet allocated each GPU to, and how many of its processes run there.",
            [
                ("allocated", h.Query(f"{c.GPU_ALLOCATION}{GPU}"), h.COUNT),
                ("processes", h.Query(f"{c.CONTAINER_PROCESSES}{GPU}"), h.COUNT),
            ],
        ),
        w=24,
        h=8,
    )

    lay.row("Unattributed usage")
    lay.add(
        h.timeseries(
            "Unattributed utilization",
            "GPU use by processes in no container: reason host (outside Kubernetes) or unresolved "
            "(attribution failed). Unresolved use on a shared GPU makes its containers' shares unknown.",
            [h.Query(f"{c.UNATTRIBUTED_UTILIZATION}{GPU}", GPU_LEGEND + " {{reason}}")],
            unit=h.RATIO,
            max_value=1,
        ),
        w=8,
    )
    lay.add(
        h.timeseries(
            "Unattributed memory",
            "GPU memory of processes in no container.",
            [h.Query(f"{c.UNATTRIBUTED_MEMORY_USED}{GPU}", GPU_LEGEND + " {{reason}}")],
            unit=h.BYTES,
        ),
        w=8,
    )
    lay.add(
        h.timeseries(
            "Unattributed processes",
            "Processes in no container, by reason.",
            [h.Query(f"sum by (node, reason) ({c.UNATTRIBUTED_PROCESSES}{GPU})", "{{node}} {{reason}}")],
        ),
        w=8,
    )

    lay.row("Exporter health")
    lay.add(
        h.timeseries(
            "Snapshot age",
            f"Age of the snapshot each exporter serves. At {c.FRESHNESS_SECONDS} s (the line) the rules stop "
            "using the node's readings: its pods become unknown, not idle.",
            [h.Query(f"{c.EXPORTER_SNAPSHOT_AGE}{NODE}", "{{node}}")],
            unit=h.SECONDS,
            thresholds=h.SNAPSHOT_AGE_STEPS,
            threshold_line=True,
        ),
        w=8,
    )
    lay.add(
        h.timeseries(
            "Collection errors",
            "Collections that failed as a whole, and NVML field reads that failed (by field and error).",
            [
                h.Query(
                    f"sum by (node) (increase({c.EXPORTER_COLLECTION_ERRORS}{NODE}[{h.RATE_INTERVAL}]))",
                    "{{node}} collections",
                ),
                h.Query(
                    f"sum by (node, field, error) (increase({c.GPU_READ_ERRORS}{GPU}[{h.RATE_INTERVAL}]))",
                    "{{node}} {{field}}: {{error}}",
                ),
            ],
            bars=True,
        ),
        w=8,
    )
    lay.add(
        h.timeseries(
            "Attribution degraded",
            "1 while an attribution source does not answer (proc: /proc cgroups, podresources: the "
            "kubelet socket, kubernetes_api: the pod list). Processes are then unresolved.",
            [
                h.Query(
                    f"1 - min by (node, source) ({c.EXPORTER_ATTRIBUTION_AVAILABLE}{NODE})",
                    "{{node}} {{source}}",
                )
            ],
            max_value=1,
            thresholds=h.ZERO_IS_GOOD,
        ),
        w=8,
    )
    lay.add(
        h.timeseries(
            "Collection duration",
            "How long the collection behind each scrape took (NVML, attribution).",
            [h.Query(f"{c.EXPORTER_COLLECTION_DURATION}{NODE}", "{{node}}")],
            unit=h.SECONDS,
        ),
        w=12,
    )
    lay.add(
        h.timeseries(
            "GPUs failing collection",
            "Per node: GPUs with a field that failed to read, and GPUs NVML reports lost.",
            [
                h.Query(f"sum by (node) (1 - {c.GPU_COLLECTION_SUCCESS}{GPU})", "{{node}} read failures"),
                h.Query(f"sum by (node) ({c.GPU_LOST}{GPU})", "{{node}} lost"),
            ],
            unit=h.GPUS,
        ),
        w=12,
    )
    return h.dashboard(
        UID,
        "GPU Steward / Node and GPU detail",
        "Per GPU and per container readings, unattributed usage, and the exporter's health.",
        lay,
        variables=[
            h.label_variable("node", "Node", c.GPU_COLLECTION_SUCCESS, "node"),
            h.label_variable("gpu", "GPU (uuid)", f"{c.GPU_COLLECTION_SUCCESS}{NODE}", "uuid"),
        ],
    )
