"""Recorded series: the one home of their names, the idle threshold and the rule timing.

rules/*.yaml is written by hand (PromQL reads best as PromQL); tests/rules/test_series_home.py fails when
a rule name, the threshold or the group interval there drifts from this module. The automator, KEDA and the
dashboards import the names from here instead of retyping them. Pure: no client library.
"""

from __future__ import annotations

from typing import Final

# Evaluation interval of the recording group and the age after which a raw sample no longer counts.
RULE_INTERVAL_SECONDS: Final = 30
FRESHNESS_SECONDS: Final = 60
# A pod whose GPU activity is at or below this ratio is idle (the default of the reclaim class annotation).
IDLE_THRESHOLD: Final = 0.05

_UTIL = "gpu_steward_container_gpu_utilization_ratio"
_ALLOC = "gpu_steward_gpu_allocation"

# What the readers use.
POD_ACTIVITY: Final = f"namespace_pod:{_UTIL}:max"
POD_IDLE: Final = f"namespace_pod:{_UTIL}:idle"
POD_IDLE_SECONDS: Final = f"namespace_pod:{_UTIL}:idle_seconds"
POD_MEMORY_RATIO: Final = "namespace_pod:gpu_steward_container_gpu_memory_used_bytes:max_ratio"
POD_GPUS: Final = f"namespace_pod:{_ALLOC}:count"
POD_GPUS_IDLE: Final = f"namespace_pod:{_ALLOC}:count_idle"
FLEET_GPUS: Final = f":{_ALLOC}:count"
FLEET_GPUS_IDLE: Final = f":{_ALLOC}:count_idle"
NAMESPACE_IDLE_GPU_HOURS_24H: Final = f"namespace:{_ALLOC}:idle_gpu_hours_24h"
FLEET_IDLE_GPU_HOURS_24H: Final = f":{_ALLOC}:idle_gpu_hours_24h"
RULE_EVALUATION_TIMESTAMP: Final = ":gpu_steward_rule_evaluation:timestamp"

# Every series the recording rules write, in file order.
RECORDED: Final[tuple[str, ...]] = (
    "node_namespace_pod_container_uuid:gpu_steward_container_gpu_utilization_ratio:max",
    "node_namespace_pod_container_uuid:gpu_steward_gpu_allocation:max",
    "node_namespace_pod_uuid:gpu_steward_container_gpu_utilization_ratio:sum",
    "namespace_pod_container:gpu_steward_container_gpu_utilization_ratio:max",
    "namespace_pod:gpu_steward_container_gpu_utilization_ratio:max",
    "namespace:gpu_steward_container_gpu_utilization_ratio:avg",
    "namespace_pod:gpu_steward_container_gpu_memory_used_bytes:max_ratio",
    "namespace_pod:gpu_steward_container_gpu_utilization_ratio:idle",
    "namespace_pod:gpu_steward_container_gpu_utilization_ratio:idle_interval_seconds",
    "namespace_pod:gpu_steward_container_gpu_utilization_ratio:idle_seconds",
    "namespace_pod:gpu_steward_container_gpu_utilization_ratio:idle_previous",
    "node_namespace_pod:gpu_steward_gpu_allocation:count",
    "node_namespace_pod:gpu_steward_gpu_allocation:count_idle",
    "namespace_pod:gpu_steward_gpu_allocation:count",
    "namespace_pod:gpu_steward_gpu_allocation:count_idle",
    "namespace:gpu_steward_gpu_allocation:count",
    "node:gpu_steward_gpu_allocation:count",
    ":gpu_steward_gpu_allocation:count",
    "namespace:gpu_steward_gpu_allocation:count_idle",
    "node:gpu_steward_gpu_allocation:count_idle",
    ":gpu_steward_gpu_allocation:count_idle",
    "namespace:gpu_steward_gpu_allocation:idle_gpu_seconds",
    "node:gpu_steward_gpu_allocation:idle_gpu_seconds",
    ":gpu_steward_gpu_allocation:idle_gpu_seconds",
    "namespace_pod_container:gpu_steward_container_gpu_utilization_ratio:avg_over_time_5m",
    "namespace_pod_container:gpu_steward_container_gpu_utilization_ratio:coverage_5m",
    "namespace_pod:gpu_steward_container_gpu_utilization_ratio:avg_over_time_5m",
    "namespace_pod:gpu_steward_container_gpu_utilization_ratio:coverage_5m",
    "namespace:gpu_steward_container_gpu_utilization_ratio:avg_over_time_5m",
    "namespace:gpu_steward_container_gpu_utilization_ratio:coverage_5m",
    "namespace_pod_container:gpu_steward_container_gpu_utilization_ratio:avg_over_time_30m",
    "namespace_pod_container:gpu_steward_container_gpu_utilization_ratio:coverage_30m",
    "namespace_pod:gpu_steward_container_gpu_utilization_ratio:avg_over_time_30m",
    "namespace_pod:gpu_steward_container_gpu_utilization_ratio:coverage_30m",
    "namespace:gpu_steward_container_gpu_utilization_ratio:avg_over_time_30m",
    "namespace:gpu_steward_container_gpu_utilization_ratio:coverage_30m",
    "namespace_pod_container:gpu_steward_container_gpu_utilization_ratio:avg_over_time_1h",
    "namespace_pod_container:gpu_steward_container_gpu_utilization_ratio:coverage_1h",
    "namespace_pod:gpu_steward_container_gpu_utilization_ratio:avg_over_time_1h",
    "namespace_pod:gpu_steward_container_gpu_utilization_ratio:coverage_1h",
    "namespace:gpu_steward_container_gpu_utilization_ratio:avg_over_time_1h",
    "namespace:gpu_steward_container_gpu_utilization_ratio:coverage_1h",
    "namespace:gpu_steward_gpu_allocation:idle_gpu_hours_1h",
    "node:gpu_steward_gpu_allocation:idle_gpu_hours_1h",
    ":gpu_steward_gpu_allocation:idle_gpu_hours_1h",
    "namespace:gpu_steward_gpu_allocation:idle_gpu_hours_24h",
    "node:gpu_steward_gpu_allocation:idle_gpu_hours_24h",
    ":gpu_steward_gpu_allocation:idle_gpu_hours_24h",
    ":gpu_steward_rule_evaluation:timestamp",
)
