"""Every annotation and label key, Event reason and component name the automator reads or writes.

One home: the planner, the adapters, the docs tables (tests/automator/test_docs_consistency.py) and the
tests take them from here. Pure: constants only.
"""

from __future__ import annotations

from typing import Final

# --- annotations -------------------------------------------------------------------------------------
# On a PriorityClass: its pending pods may reclaim idle GPUs (value "true").
RECLAIM_ANNOTATION: Final = "gpu-steward.io/reclaim-idle-gpus"
# On a preemptor: when victims were last evicted for it (RFC 3339), for the cooldown.
LAST_RECLAIM_ANNOTATION: Final = "gpu-steward.io/last-reclaim-time"
# Victim-side keys are the scheduler plugin's, so existing PriorityClasses keep working.
PLUGIN_PREFIX: Final = "reclaim-idle-resource.scheduling.x-k8s.io/"
ANN_MIN_PREEMPTABLE_PRIORITY: Final = PLUGIN_PREFIX + "minimum-preemptable-priority"
ANN_TOLERATION_SECONDS: Final = PLUGIN_PREFIX + "toleration-seconds"
ANN_GPU_IDLE_SECONDS: Final = PLUGIN_PREFIX + "gpu-idle-seconds"
ANN_GPU_IDLE_THRESHOLD: Final = PLUGIN_PREFIX + "gpu-idle-usage-threshold"
ANN_CPU_IDLE_SECONDS: Final = PLUGIN_PREFIX + "cpu-idle-seconds"
ANN_CPU_IDLE_THRESHOLD: Final = PLUGIN_PREFIX + "cpu-idle-usage-threshold"
# Every PriorityClass annotation the planner reads, in docs/reclaim.md's table order.
CLASS_ANNOTATIONS: Final[tuple[str, ...]] = (
    RECLAIM_ANNOTATION,
    ANN_MIN_PREEMPTABLE_PRIORITY,
    ANN_TOLERATION_SECONDS,
    ANN_GPU_IDLE_SECONDS,
    ANN_GPU_IDLE_THRESHOLD,
    ANN_CPU_IDLE_SECONDS,
    ANN_CPU_IDLE_THRESHOLD,
)

# --- labels ------------------------------------------------------------------------------------------
# Labels of the Prometheus series the automator reads (the recorded series carry them).
NAMESPACE_LABEL: Final = "namespace"
POD_LABEL: Final = "pod"

# --- resources ---------------------------------------------------------------------------------------
DEFAULT_GPU_RESOURCE: Final = "nvidia.com/gpu"

# --- Events (reasons CamelCase, as Kubernetes components write them) ----------------------------------
REASON_VICTIM: Final = "GpuIdleReclaimed"
REASON_PREEMPTOR: Final = "GpuReclaimPreemptor"
REASON_EVICTION_FAILED: Final = "GpuReclaimEvictionFailed"
REASON_INVALID_ANNOTATION: Final = "InvalidReclaimAnnotation"
EVENT_REASONS: Final[tuple[str, ...]] = (
    REASON_VICTIM,
    REASON_PREEMPTOR,
    REASON_EVICTION_FAILED,
    REASON_INVALID_ANNOTATION,
)
# Event source component and the events.k8s.io reporting controller.
COMPONENT: Final = "gpu-steward-automator"
REPORTING_COMPONENT: Final = "gpu-steward.io/automator"
DEFAULT_LEASE_NAME: Final = "gpu-steward-automator"
