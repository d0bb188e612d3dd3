"""The automator's own metrics (prefix gpu_steward_automator_), on a registry the caller owns."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from automator.model import Mode, PassOutcome
from automator.ports import EvictionOutcome

PREFIX = "gpu_steward_automator_"

# Label values, from the enums that are their only home.
PASS_RESULTS: tuple[str, ...] = tuple(PassOutcome)
EVICTION_RESULTS: tuple[str, ...] = tuple(EvictionOutcome)
MODES: tuple[str, ...] = tuple(Mode)


class AutomatorMetrics:
    """Every series the service exposes; label values are pre-created so rate() works from the first event."""

    def __init__(self, registry: CollectorRegistry, version: str = "unknown", mode: str = "dry-run") -> None:
        self.registry = registry
        self.passes = Counter(PREFIX + "passes", "Reclaim passes by result.", ["result"], registry=registry)
        self.decisions = Counter(
            PREFIX + "decisions",
            "Preemptors for which victims were chosen (acted on in enforce mode, only logged in dry-run).",
            ["mode"],
            registry=registry,
        )
        self.evictions = Counter(
            PREFIX + "evictions", "Eviction API calls by result.", ["result"], registry=registry
        )
        self.replans = Counter(
            PREFIX + "replans",
            "Re-plans after an eviction was refused (429) or failed (500).",
            registry=registry,
        )
        self.pass_duration = Histogram(
            PREFIX + "pass_duration_seconds",
            "Duration of a reclaim pass (snapshot, queries, plan, actions).",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self.query_duration = Histogram(
            PREFIX + "prometheus_query_duration_seconds",
            "Duration of each Prometheus query, failed ones included.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry,
        )
        self.queries_per_pass = Gauge(
            PREFIX + "prometheus_queries_per_pass",
            "Prometheus queries made by the last pass (one per distinct window, whatever the pod count).",
            registry=registry,
        )
        self.last_success = Gauge(
            PREFIX + "last_successful_pass_timestamp_seconds",
            "Unix time the last pass finished without error.",
            registry=registry,
        )
        self.is_leader = Gauge(
            PREFIX + "is_leader", "1 if this replica holds the lease and runs passes.", registry=registry
        )
        self.unresolved = Gauge(
            PREFIX + "unresolved_preemptors",
            "Preemptors the last pass could not make room for.",
            registry=registry,
        )
        self.evictions_last_hour = Gauge(
            PREFIX + "evictions_last_hour",
            "Accepted evictions in the last hour (sliding window; --max-evictions-per-hour caps it).",
            registry=registry,
        )
        self.max_evictions_per_hour = Gauge(
            PREFIX + "max_evictions_per_hour", "The --max-evictions-per-hour budget.", registry=registry
        )
        self.interval = Gauge(
            PREFIX + "interval_seconds", "Seconds between passes (--interval).", registry=registry
        )
        self.clock_skew = Gauge(
            PREFIX + "clock_skew_seconds",
            "Prometheus' clock minus the automator's, measured each pass (over 120 s: no eviction).",
            registry=registry,
        )
        self.candidates = Gauge(
            PREFIX + "candidate_victims",
            "GPU pods the last pass judged as possible victims.",
            registry=registry,
        )
        self.candidates_usage_unknown = Gauge(
            PREFIX + "candidate_victims_usage_unknown",
            "Candidate victims of the last pass whose GPU usage was unknown (protected).",
            registry=registry,
        )
        self.nonfinite = Counter(
            PREFIX + "nonfinite_series",
            "Pods whose series held NaN or Inf in a pass (each left unknown, i.e. protected).",
            registry=registry,
        )
        self.build_info = Gauge(
            PREFIX + "build_info", "Always 1; labels say what runs.", ["version", "mode"], registry=registry
        )
        self.build_info.labels(version=version, mode=mode).set(1)
        for result in PASS_RESULTS:
            self.passes.labels(result=result)
        for result in EVICTION_RESULTS:
            self.evictions.labels(result=result)
        for m in MODES:
            self.decisions.labels(mode=m)
