"""The KEDA endpoints' own metrics (prefix gpu_steward_automator_keda_), on the service's registry."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX: Final = "gpu_steward_automator_keda_"
# Label values of `status`: HTTP codes, and the gRPC codes the scaler answers with.
HTTP_STATUSES: Final = ("200", "400", "401", "404", "503")
GRPC_STATUSES: Final = ("OK", "INVALID_ARGUMENT", "NOT_FOUND", "UNAVAILABLE", "RESOURCE_EXHAUSTED")


class KedaMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            PREFIX + "requests",
            "KEDA requests by endpoint (http, grpc) and status (HTTP code or gRPC code).",
            ["endpoint", "status"],
            registry=registry,
        )
        self.refresh_duration = Histogram(
            PREFIX + "refresh_duration_seconds",
            "Duration of one background refresh (every cached query and namespace).",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )
        self.prometheus_errors = Counter(
            PREFIX + "prometheus_errors",
            "Prometheus queries of the KEDA cache that failed.",
            registry=registry,
        )
        self.kubernetes_errors = Counter(
            PREFIX + "kubernetes_errors", "Kubernetes lists of the KEDA cache that failed.", registry=registry
        )
        self.cache_age = Gauge(
            PREFIX + "cache_age_seconds",
            "Seconds since the oldest cached query was last refreshed successfully (0 with none cached).",
            registry=registry,
        )
        self.cached_queries = Gauge(
            PREFIX + "cached_queries",
            "Queries (signal base x window) kept fresh for KEDA; each refresh runs each once.",
            registry=registry,
        )
        self.cached_namespaces = Gauge(
            PREFIX + "cached_namespaces", "Namespaces whose pods are kept for KEDA.", registry=registry
        )
        self.last_refresh = Gauge(
            PREFIX + "last_successful_refresh_timestamp_seconds",
            "Unix time the last refresh finished without any error.",
            registry=registry,
        )
        for status in HTTP_STATUSES:
            self.requests.labels(endpoint="http", status=status)
        for status in GRPC_STATUSES:
            self.requests.labels(endpoint="grpc", status=status)
