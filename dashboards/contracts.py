"""Every series name and number the dashboards take from the rest of the project, in one place.

Nothing here is retyped: recorded series come from steward_common.series, the exporter's metric names from the
exporter's metric table (steward_common/metrics.py), the automator's from automator.metrics and
automator/dra/report.py, the coverage minimum from the planner's defaults. When one of those homes moves,
only this module changes. Importing it fails, naming the series, when a name the dashboards need is gone, so
`make dashboards` and the tests fail instead of committing a dashboard that queries nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from automator.dra import checks as dra_checks
from automator.dra import model as dra_model
from automator.dra import report as dra_report
from automator.keda.metrics import KedaMetrics
from automator.metrics import TRANSPORT_LABEL, AutomatorMetrics
from automator.reclaim.model import PlannerConfig
from steward_common import metrics as exporter_metrics
from steward_common import series

# --- numbers -----------------------------------------------------------------------------------------

IDLE_THRESHOLD: Final = series.IDLE_THRESHOLD
FRESHNESS_SECONDS: Final = series.FRESHNESS_SECONDS
MIN_COVERAGE: Final = PlannerConfig().min_coverage

# --- recorded series (rules/, named in steward_common/series.py) -------------------------------------------
POD_ACTIVITY: Final = series.POD_ACTIVITY
POD_IDLE: Final = series.POD_IDLE
POD_IDLE_SECONDS: Final = series.POD_IDLE_SECONDS
POD_MEMORY_RATIO: Final = series.POD_MEMORY_RATIO
POD_GPUS: Final = series.POD_GPUS
POD_GPUS_IDLE: Final = series.POD_GPUS_IDLE
FLEET_GPUS: Final = series.FLEET_GPUS
FLEET_GPUS_IDLE: Final = series.FLEET_GPUS_IDLE
NAMESPACE_IDLE_GPU_HOURS_24H: Final = series.NAMESPACE_IDLE_GPU_HOURS_24H
FLEET_IDLE_GPU_HOURS_24H: Final = series.FLEET_IDLE_GPU_HOURS_24H
RULE_EVALUATION_TIMESTAMP: Final = series.RULE_EVALUATION_TIMESTAMP


def sibling(name: str, *, level: str | None = None, operation: str | None = None) -> str:
    """The recorded series `level:metric:operation` next to `name`, checked against series.RECORDED.

    For series that steward_common/series.py lists but does not name: derived from a named one by the
    level:metric:operations convention, so only the part that differs is written here.
    """
    parts = name.split(":")
    if len(parts) != 3:
        raise ValueError(f"{name!r} is not a level:metric:operations name")
    lvl = parts[0] if level is None else level
    derived = f"{lvl}:{parts[1]}:{parts[2] if operation is None else operation}"
    if derived not in series.RECORDED:
        raise LookupError(
            f"recorded series {derived!r} (from {name!r}) is not in steward_common.series.RECORDED"
        )
    return derived


POD_COVERAGE: Final[Mapping[str, str]] = {"1h": sibling(POD_ACTIVITY, operation="coverage_1h")}
# Per (node, namespace, pod, container, GPU): the building block the node dashboard counts GPUs from (the
# pod-level series drop the node label).
HELD_GPU_BY_CONTAINER: Final = series.CONTAINER_EXPECTED


# --- the exporter's metrics (steward_common/metrics.py, the one metric table) ------------------------------
# Every sample name the exporter serves (for the test that the dashboards read nothing else).
EXPORTER_SAMPLES: Final = frozenset(m.sample_name for m in exporter_metrics.ALL_METRICS)
GPU_UTILIZATION: Final = exporter_metrics.GPU_UTILIZATION.sample_name
GPU_MEMORY_UTILIZATION: Final = exporter_metrics.GPU_MEMORY_UTILIZATION.sample_name
GPU_MEMORY_USED: Final = exporter_metrics.GPU_MEMORY_USED.sample_name
GPU_MEMORY_TOTAL: Final = exporter_metrics.GPU_MEMORY_TOTAL.sample_name
GPU_TEMPERATURE: Final = exporter_metrics.GPU_TEMPERATURE.sample_name
GPU_POWER: Final = exporter_metrics.GPU_POWER.sample_name
GPU_COLLECTION_SUCCESS: Final = exporter_metrics.GPU_COLLECTION_SUCCESS.sample_name
GPU_LOST: Final = exporter_metrics.GPU_LOST.sample_name
GPU_ALLOCATION: Final = exporter_metrics.GPU_ALLOCATION.sample_name
GPU_READ_ERRORS: Final = exporter_metrics.GPU_READ_ERRORS.sample_name
CONTAINER_UTILIZATION: Final = exporter_metrics.CONTAINER_UTILIZATION.sample_name
CONTAINER_MEMORY_USED: Final = exporter_metrics.CONTAINER_MEMORY_USED.sample_name
CONTAINER_PROCESSES: Final = exporter_metrics.CONTAINER_PROCESSES.sample_name
UNATTRIBUTED_UTILIZATION: Final = exporter_metrics.UNATTRIBUTED_UTILIZATION.sample_name
UNATTRIBUTED_MEMORY_USED: Final = exporter_metrics.UNATTRIBUTED_MEMORY_USED.sample_name
UNATTRIBUTED_PROCESSES: Final = exporter_metrics.UNATTRIBUTED_PROCESSES.sample_name
EXPORTER_SNAPSHOT_AGE: Final = exporter_metrics.EXPORTER_SNAPSHOT_AGE.sample_name
EXPORTER_COLLECTION_ERRORS: Final = exporter_metrics.EXPORTER_COLLECTION_ERRORS.sample_name
EXPORTER_COLLECTION_DURATION: Final = exporter_metrics.EXPORTER_COLLECTION_DURATION.sample_name
EXPORTER_ATTRIBUTION_AVAILABLE: Final = exporter_metrics.EXPORTER_ATTRIBUTION_AVAILABLE.sample_name


# --- the automator's metrics (automator/metrics.py) ---------------------------------------------------
_AUTOMATOR: Final = AutomatorMetrics(CollectorRegistry())


def _family(metric: MetricWrapperBase) -> str:
    (described,) = metric.describe()
    return described.name


def _counter(metric: MetricWrapperBase) -> str:
    return _family(metric) + "_total"


AUTOMATOR_PASSES: Final = _counter(_AUTOMATOR.passes)
AUTOMATOR_DECISIONS: Final = _counter(_AUTOMATOR.decisions)
AUTOMATOR_EVICTIONS: Final = _counter(_AUTOMATOR.evictions)
AUTOMATOR_REPLANS: Final = _counter(_AUTOMATOR.replans)
AUTOMATOR_RECLAIMED_GPUS: Final = _counter(_AUTOMATOR.reclaimed_gpus)
AUTOMATOR_RECLAIMED_GPUS_HELD: Final = _family(_AUTOMATOR.reclaimed_gpus_held)
AUTOMATOR_PASS_DURATION_BUCKET: Final = _family(_AUTOMATOR.pass_duration) + "_bucket"
AUTOMATOR_QUERY_DURATION_BUCKET: Final = _family(_AUTOMATOR.query_duration) + "_bucket"
AUTOMATOR_QUERIES_PER_PASS: Final = _family(_AUTOMATOR.queries_per_pass)
AUTOMATOR_LAST_SUCCESS: Final = _family(_AUTOMATOR.last_success)
AUTOMATOR_IS_LEADER: Final = _family(_AUTOMATOR.is_leader)
AUTOMATOR_UNRESOLVED: Final = _family(_AUTOMATOR.unresolved)
AUTOMATOR_BUILD_INFO: Final = _family(_AUTOMATOR.build_info)
AUTOMATOR_UNDER_NOTICE: Final = _family(_AUTOMATOR.under_notice)
AUTOMATOR_NOTICES: Final = _counter(_AUTOMATOR.notices)
AUTOMATOR_NOTICES_WITHDRAWN: Final = _counter(_AUTOMATOR.notices_withdrawn)
AUTOMATOR_EVICTIONS_AFTER_NOTICE: Final = _counter(_AUTOMATOR.evictions_after_notice)
AUTOMATOR_KUEUE_ACTIONS: Final = _counter(_AUTOMATOR.kueue_actions)
AUTOMATOR_KUEUE_WAITING: Final = _family(_AUTOMATOR.kueue_waiting)
AUTOMATOR_KUEUE_WAITING_GPUS: Final = _family(_AUTOMATOR.kueue_waiting_gpus)
AUTOMATOR_KUEUE_IDLE_QUOTA: Final = _family(_AUTOMATOR.kueue_idle_quota)

# --- the automator's KEDA endpoints (automator/keda/metrics.py) -----------------------------------------
_KEDA: Final = KedaMetrics(CollectorRegistry())
AUTOMATOR_KEDA_REQUESTS: Final = _counter(_KEDA.requests)
AUTOMATOR_KEDA_TRANSPORT: Final = TRANSPORT_LABEL
AUTOMATOR_KEDA_REFRESH_DURATION_BUCKET: Final = _family(_KEDA.refresh_duration) + "_bucket"
AUTOMATOR_KEDA_PROMETHEUS_ERRORS: Final = _counter(_KEDA.prometheus_errors)
AUTOMATOR_KEDA_KUBERNETES_ERRORS: Final = _counter(_KEDA.kubernetes_errors)
AUTOMATOR_KEDA_CACHE_AGE: Final = _family(_KEDA.cache_age)
AUTOMATOR_KEDA_CACHED_QUERIES: Final = _family(_KEDA.cached_queries)

# --- the DRA check's metrics (automator/dra/report.py) and its finding kinds (automator/dra/model.py) ---
DRA_CAPACITY: Final = dra_report.CAPACITY_METRIC
DRA_CONSUMED: Final = dra_report.CONSUMED_METRIC
DRA_FINDINGS: Final = dra_report.FINDINGS_METRIC
DRA_CHECKS: Final = dra_report.CHECKS_METRIC + "_total"
DRA_EVENTS: Final = dra_report.EVENTS_METRIC + "_total"
DRA_LAST_SUCCESS: Final = dra_report.LAST_SUCCESS_METRIC
DRA_USAGE_CHECKED: Final = dra_report.USAGE_CHECKED_METRIC
DRA_CHECK_DURATION_BUCKET: Final = dra_report.CHECK_DURATION_METRIC + "_bucket"
DRA_SAMPLES: Final = frozenset(
    {DRA_CAPACITY, DRA_CONSUMED, DRA_FINDINGS, DRA_CHECKS, DRA_EVENTS, DRA_LAST_SUCCESS, DRA_USAGE_CHECKED}
    | {DRA_CHECK_DURATION_BUCKET}
)
# The capacity measured memory is compared with (HAMi's `memory`, bytes).
DRA_MEMORY: Final = dra_checks.MEMORY
DRA_CRITICAL_KINDS: Final = tuple(k for k in dra_model.KINDS if dra_model.SEVERITY[k] == dra_model.CRITICAL)
DRA_WARNING_KINDS: Final = tuple(k for k in dra_model.KINDS if dra_model.SEVERITY[k] == dra_model.WARNING)
