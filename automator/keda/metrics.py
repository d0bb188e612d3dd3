"""The KEDA endpoints' own metrics (prefix gpu_steward_automator_keda_), on the service's registry."""

from __future__ import annotations

from functools import partial
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from automator.metrics import TRANSPORT_LABEL, Row, declare, row

PREFIX: Final = "gpu_steward_automator_keda_"
# Label values of `status`: HTTP codes, and the gRPC codes the scaler answers with.
HTTP_STATUSES: Final = ("200", "400", "401", "404", "413", "503")
GRPC_STATUSES: Final = (
    "OK",
    "INVALID_ARGUMENT",
    "NOT_FOUND",
    "UNAVAILABLE",
    "RESOURCE_EXHAUSTED",
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
)

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
        "last_refresh",
        "gauge",
        "last_successful_refresh_timestamp_seconds",
        "Unix time the last refresh finished without any error.",
    ),
)


# Workloads with a workload_available series (the least recently asked is dropped past it).
MAX_WORKLOAD_SERIES: Final = 500


class KedaMetrics:
    requests: Counter
    refresh_duration: Histogram
    prometheus_errors: Counter
    kubernetes_errors: Counter
    cache_age: Gauge
    cached_queries: Gauge
    cached_namespaces: Gauge
    workload_available: Gauge
    last_refresh: Gauge

    def __init__(self, registry: CollectorRegistry) -> None:
        declare(self, registry, TABLE)
        for status in HTTP_STATUSES:
            self.requests.labels("http", status)
        for status in GRPC_STATUSES:
            self.requests.labels("grpc", status)
