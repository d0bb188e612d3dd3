"""Recorded series: the one home of their names, the idle threshold and the rule timing.

rules/*.yaml is written by hand (PromQL reads best as PromQL); tests/rules/test_series_home.py fails when
a rule name, the threshold or the group interval there drifts from this module. The automator, KEDA and the
dashboards import the names from here instead of retyping them. Pure: no client library.
"""

from __future__ import annotations

from typing import Final

# The rules run in two groups. The fast group (clean-up, activity, idle flag and clock, running idle
# total) evaluates every RULE_INTERVAL_SECONDS; a POD_ACTIVITY sample per pod per evaluation is what
# the automator counts. The slow group (waste, idle GPU-hours, coverage) every SLOW_INTERVAL_SECONDS.
FAST_GROUP: Final = "gpu-steward-activity"
SLOW_GROUP: Final = "gpu-steward-waste"
RULE_INTERVAL_SECONDS: Final = 30
SLOW_INTERVAL_SECONDS: Final = 120
GROUP_INTERVALS: Final[dict[str, int]] = {
    FAST_GROUP: RULE_INTERVAL_SECONDS,
    SLOW_GROUP: SLOW_INTERVAL_SECONDS,
}
# A pod's recent usage is known only while its newest POD_ACTIVITY sample is at most this many rule
# intervals old at the query's evaluation time: one missed evaluation is tolerated, an exporter that
# stopped reporting is not (its last idle sample would otherwise stand for the whole recent window).
FRESH_RULE_INTERVALS: Final = 2
# The same bound for an offline usage file, whose rules are taken to run every RULE_INTERVAL_SECONDS.
MAX_SAMPLE_AGE_SECONDS: Final = FRESH_RULE_INTERVALS * RULE_INTERVAL_SECONDS
# A raw reading counts only when its exporter's snapshot is younger than this.
FRESHNESS_SECONDS: Final = 60
# A pod whose GPU activity is at or below this ratio is idle (the default of the reclaim class annotation).
IDLE_THRESHOLD: Final = 0.05
# Labels every aggregation and join keeps (an absent label groups as empty), so that several
# clusters' data can meet in one store; POD_KEY is how a pod is told apart (pod_uid when the
# exporter sets it: a recreated pod is a new pod).
OUTER_LABELS: Final[tuple[str, ...]] = ("cluster",)
POD_KEY: Final[tuple[str, ...]] = ("namespace", "pod", "pod_uid")

_UTIL = "gpu_steward_container_gpu_utilization_ratio"
_ALLOC = "gpu_steward_gpu_allocation"
_CNT = "node_namespace_pod_container_uuid"

# What the readers use (docs/rules.md names the reader of each).
POD_ACTIVITY: Final = f"namespace_pod:{_UTIL}:max"
POD_IDLE: Final = f"namespace_pod:{_UTIL}:idle"
POD_IDLE_SECONDS: Final = f"namespace_pod:{_UTIL}:idle_seconds"
POD_MEMORY_RATIO: Final = "namespace_pod:gpu_steward_container_gpu_memory_used_bytes:max_ratio"
POD_COVERAGE_1H: Final = f"namespace_pod:{_UTIL}:coverage_1h"
POD_GPUS: Final = f"namespace_pod:{_ALLOC}:count"
POD_GPUS_IDLE: Final = f"namespace_pod:{_ALLOC}:count_idle"
NAMESPACE_GPUS: Final = f"namespace:{_ALLOC}:count"
NAMESPACE_GPUS_IDLE: Final = f"namespace:{_ALLOC}:count_idle"
FLEET_GPUS: Final = f":{_ALLOC}:count"
FLEET_GPUS_IDLE: Final = f":{_ALLOC}:count_idle"
FLEET_GPUS_UNKNOWN: Final = f":{_ALLOC}:count_unknown"
NAMESPACE_IDLE_GPU_HOURS_1H: Final = f"namespace:{_ALLOC}:idle_gpu_hours_1h"
NAMESPACE_IDLE_GPU_HOURS_24H: Final = f"namespace:{_ALLOC}:idle_gpu_hours_24h"
FLEET_IDLE_GPU_HOURS_1H: Final = f":{_ALLOC}:idle_gpu_hours_1h"
FLEET_IDLE_GPU_HOURS_24H: Final = f":{_ALLOC}:idle_gpu_hours_24h"
NAMESPACE_IDLE_GPU_SECONDS_TOTAL: Final = f"namespace:{_ALLOC}:idle_gpu_seconds_total"
RULE_EVALUATION_TIMESTAMP: Final = ":gpu_steward_rule_evaluation:timestamp"

# Building blocks only the rules read.
CONTAINER_UTILIZATION: Final = f"{_CNT}:{_UTIL}:max"
CONTAINER_EXPECTED: Final = f"{_CNT}:{_ALLOC}:group"
CONTAINER_MEMORY: Final = f"{_CNT}:gpu_steward_container_gpu_memory_used_bytes:max"
POD_GPU_HELD: Final = f"node_namespace_pod_uuid:{_ALLOC}:group"
POD_IDLE_SECONDS_CARRY: Final = f"node_namespace_pod:{_UTIL}:idle_seconds_carry"
NAMESPACE_IDLE_GPU_SECONDS: Final = f"namespace:{_ALLOC}:idle_gpu_seconds"

# Every series the recording rules write, by group, in file order.
RECORDED_BY_GROUP: Final[dict[str, tuple[str, ...]]] = {
    FAST_GROUP: (
        RULE_EVALUATION_TIMESTAMP,
        CONTAINER_UTILIZATION,
        CONTAINER_EXPECTED,
        CONTAINER_MEMORY,
        POD_GPU_HELD,
        POD_ACTIVITY,
        POD_MEMORY_RATIO,
        POD_IDLE,
        POD_IDLE_SECONDS,
        POD_IDLE_SECONDS_CARRY,
        POD_GPUS,
        NAMESPACE_IDLE_GPU_SECONDS,
        NAMESPACE_IDLE_GPU_SECONDS_TOTAL,
    ),
    SLOW_GROUP: (
        POD_GPUS_IDLE,
        NAMESPACE_GPUS,
        NAMESPACE_GPUS_IDLE,
        FLEET_GPUS,
        FLEET_GPUS_IDLE,
        FLEET_GPUS_UNKNOWN,
        NAMESPACE_IDLE_GPU_HOURS_1H,
        NAMESPACE_IDLE_GPU_HOURS_24H,
        FLEET_IDLE_GPU_HOURS_1H,
        FLEET_IDLE_GPU_HOURS_24H,
        POD_COVERAGE_1H,
    ),
}
RECORDED: Final[tuple[str, ...]] = tuple(n for names in RECORDED_BY_GROUP.values() for n in names)
