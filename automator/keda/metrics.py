"""The KEDA endpoints' own metrics (prefix gpu_steward_automator_keda_), on the service's registry."""

from __future__ import annotations

import time
from functools import partial
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from automator.metrics import TRANSPORT_LABEL, Row, declare, row

PREFIX: Final = "gpu_steward_automator_keda_"
# Label values of `status`: HTTP codes, and the gRPC codes the scaler answers with.
HTTP_STATUSES: Final = ("200", "400", "401", "403", "404", "413", "503")
GRPC_STATUSES: Final = (
    "OK",
    "INVALID_ARGUMENT",
    "NOT_FOUND",
    "UNAVAILABLE",
    "RESOURCE_EXHAUSTED",
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
)

# Label values of ondemand_refusals' `reason`.
REFUSALS: Final = ("table_full", "queue_full", "client_limit")

_row = partial(row, PREFIX)
TABLE: Final[tuple[Row, ...]] = (
    _row(
        "requests",
        "counter",
        "requests",
        "KEDA requests by transport (http, grpc) and status (HTTP code or gRPC code).",
        (TRANSPORT_LABEL, "status"),
    ),
    _row(
        "refresh_duration",
        "histogram",
        "refresh_duration_seconds",
        "Duration of one background refresh (every cached query and namespace).",
        buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    ),
    _row(
        "prometheus_errors",
        "counter",
        "prometheus_errors",
        "Prometheus queries of the KEDA cache that failed.",
    ),
    _row(
        "kubernetes_errors", "counter", "kubernetes_errors", "Kubernetes lists of the KEDA cache that failed."
    ),
    _row(
        "cache_age",
        "gauge",
        "cache_age_seconds",
        "Seconds since the oldest cached query was last refreshed successfully (0 with none cached).",
    ),
    _row(
        "cached_queries",
        "gauge",
        "cached_queries",
        "Queries (signal base x window) kept fresh for KEDA; each refresh runs each once.",
    ),
    _row("cached_namespaces", "gauge", "cached_namespaces", "Namespaces whose pods are kept for KEDA."),
    _row(
        "workload_available",
        "gauge",
        "workload_available",
        "1 when the last KEDA answer for the workload had a value, 0 when it was 503/UNAVAILABLE; kept "
        "while the workload is asked about (at most MAX_WORKLOAD_SERIES workloads).",
        ("workload_namespace", "workload"),
    ),
    _row(
        "ondemand_refusals",
        "counter",
        "ondemand_refusals",
        "New on-demand questions answered warming_up to keep the bounds, by reason: table_full (every kept "
        "entry was asked within the last refresh), queue_full (first fetches), client_limit (new entries "
        "per client and refresh).",
        ("reason",),
    ),
    _row(
        "declared_mode",
        "gauge",
        "declared_mode",
        "1 when answers come from the questions the ScaledObjects declare, 0 in on-demand mode (no "
        "ScaledObject API) or before the first refresh.",
    ),
    _row(
        "declared_questions",
        "gauge",
        "declared_questions",
        "Questions the listed ScaledObjects declare (each answered at every refresh).",
    ),
    _row(
        "declared_failing",
        "gauge",
        "declared_failing_questions",
        "Declared questions whose last computed answer was no value (503, UNAVAILABLE) or not found.",
    ),
    _row(
        "declaration_problems",
        "gauge",
        "declaration_problems",
        "Triggers pointing at this automator that the last refresh could not read (the log names them).",
    ),
    _row(
        "warming_up_refreshes",
        "gauge",
        "warming_up_refreshes",
        "Consecutive refreshes during each of which some question was answered warming_up (0 after a "
        "refresh period without one).",
    ),
    _row(
        "started",
        "gauge",
        "started_timestamp_seconds",
        "Unix time this automator process started serving KEDA (its answers start empty: a restart is a "
        "warming_up for every ScaledObject).",
    ),
    _row(
        "last_refresh",
        "gauge",
        "last_successful_refresh_timestamp_seconds",
        "Unix time the last refresh finished without any error.",
    ),
)


# Workloads with a workload_available series in on-demand mode (past it, a series not asked within the
# alert's `for:` is dropped for a new one; with none such, the new workload gets no series).
MAX_WORKLOAD_SERIES: Final = 500
# The `for:` of GpuStewardKedaWorkloadUnavailable (alerts/keda.yaml; a test compares): a series asked this
# recently is never dropped, so that its alert can fire.
AVAILABILITY_ALERT_SECONDS: Final = 600.0


class KedaMetrics:
    requests: Counter
    refresh_duration: Histogram
    prometheus_errors: Counter
    kubernetes_errors: Counter
    cache_age: Gauge
    cached_queries: Gauge
    cached_namespaces: Gauge
    workload_available: Gauge
    ondemand_refusals: Counter
    declared_mode: Gauge
    declared_questions: Gauge
    declared_failing: Gauge
    declaration_problems: Gauge
    warming_up_refreshes: Gauge
    started: Gauge
    last_refresh: Gauge

    def __init__(self, registry: CollectorRegistry) -> None:
        declare(self, registry, TABLE)
        for status in HTTP_STATUSES:
            self.requests.labels("http", status)
        for status in GRPC_STATUSES:
            self.requests.labels("grpc", status)
        for reason in REFUSALS:
            self.ondemand_refusals.labels(reason)
        self.started.set(time.time())
