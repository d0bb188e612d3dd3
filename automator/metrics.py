"""The automator's own metrics (prefix gpu_steward_automator_), on a registry the caller owns.

One table (name, type, help, labels, buckets) per component: `declare` creates its metrics from it, so a
metric is written once. The KEDA endpoints' table (automator/keda/metrics.py) uses the same `declare`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from automator.ports import EvictionOutcome, KueueAction, Mode, PassOutcome
from automator.reclaim.model import Unresolved
from steward_common.conventions import UnresolvedReason

PREFIX: Final = "gpu_steward_automator_"

# Label values, from the enums that are their only home.
PASS_RESULTS: tuple[str, ...] = tuple(PassOutcome)
EVICTION_RESULTS: tuple[str, ...] = tuple(EvictionOutcome)
MODES: tuple[str, ...] = tuple(Mode)
KUEUE_ACTIONS: tuple[str, ...] = tuple(KueueAction)

Metric = Counter | Gauge | Histogram


@dataclass(frozen=True)
class MetricSpec:
    """One metric: the attribute that holds it, its type, name (after the prefix; counters without
    `_total`), help, label names and, for a histogram, its buckets."""

    attr: str
    kind: type[Metric]
    name: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


def declare(owner: object, registry: CollectorRegistry, prefix: str, table: Iterable[MetricSpec]) -> None:
    """Create every metric of `table` on `registry` and set it as `owner`'s attribute of the same name.

    The owner's class annotates each attribute with its type (for mypy); a table that names an attribute
    the class does not declare, or leaves one out, is a bug caught here."""
    declared = {
        name
        for cls in type(owner).__mro__
        for name, kind in getattr(cls, "__annotations__", {}).items()
        if kind in ("Counter", "Gauge", "Histogram")
    }
    made: set[str] = set()
    for spec in table:
        metric: Metric
        if spec.kind is Histogram:
            metric = Histogram(
                prefix + spec.name, spec.help, spec.labels, registry=registry, buckets=spec.buckets
            )
        else:
            metric = spec.kind(prefix + spec.name, spec.help, spec.labels, registry=registry)
        setattr(owner, spec.attr, metric)
        made.add(spec.attr)
    if made != declared:
        raise TypeError(f"{type(owner).__name__}: metric table and attributes differ: {made ^ declared}")


def unresolved_by_reason(unresolved: Iterable[Unresolved]) -> dict[UnresolvedReason, int]:
    """How many unresolved preemptors per reason, every reason present (0 when none)."""
    counts = dict.fromkeys(UnresolvedReason, 0)
    for u in unresolved:
        counts[u.kind] += 1
    return counts


_BUCKETS_PASS: Final = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_BUCKETS_QUERY: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

TABLE: Final[tuple[MetricSpec, ...]] = (
    MetricSpec("passes", Counter, "passes", "Reclaim passes by result.", ("result",)),
    MetricSpec(
        "decisions",
        Counter,
        "decisions",
        "Preemptors for which victims were chosen (acted on in enforce mode, only logged in dry-run).",
        ("mode",),
    ),
    MetricSpec("evictions", Counter, "evictions", "Eviction API calls by result.", ("result",)),
    MetricSpec(
        "reclaimed_gpus",
        Counter,
        "reclaimed_gpus",
        "GPUs of the victims whose eviction the API accepted (result ok, enforce mode): GPUs freed for "
        "preemptors. Not GPU-hours: how long the preemptors then used them is not measured here.",
    ),
    MetricSpec(
        "reclaimed_gpus_held",
        Gauge,
        "reclaimed_gpus_held",
        "GPUs held now by running pods on the node the automator reclaimed for them (reclaim-node annotation "
        "= their node). Its integral over time is the GPU time reclaimed (GPU-hours on the dashboard).",
    ),
    MetricSpec(
        "replans", Counter, "replans", "Re-plans after an eviction was refused (429) or failed (500)."
    ),
    MetricSpec(
        "pass_duration",
        Histogram,
        "pass_duration_seconds",
        "Duration of a reclaim pass (snapshot, queries, plan, actions).",
        buckets=_BUCKETS_PASS,
    ),
    MetricSpec(
        "query_duration",
        Histogram,
        "prometheus_query_duration_seconds",
        "Duration of each Prometheus query, failed ones included.",
        buckets=_BUCKETS_QUERY,
    ),
    MetricSpec(
        "queries_per_pass",
        Gauge,
        "prometheus_queries_per_pass",
        "Prometheus queries made by the last pass (one per distinct window, whatever the pod count).",
    ),
    MetricSpec(
        "last_success",
        Gauge,
        "last_successful_pass_timestamp_seconds",
        "Unix time the last pass finished without error.",
    ),
    MetricSpec("is_leader", Gauge, "is_leader", "1 if this replica holds the lease and runs passes."),
    MetricSpec(
        "unresolved",
        Gauge,
        "unresolved_preemptors",
        "Preemptors the last pass could not make room for, by reason (docs/automator.md lists them).",
        ("reason",),
    ),
    MetricSpec(
        "evictions_last_hour",
        Gauge,
        "evictions_last_hour",
        "Accepted evictions in the last hour (sliding window; --max-evictions-per-hour caps it).",
    ),
    MetricSpec(
        "max_evictions_per_hour", Gauge, "max_evictions_per_hour", "The --max-evictions-per-hour budget."
    ),
    MetricSpec("interval", Gauge, "interval_seconds", "Seconds between passes (--interval)."),
    MetricSpec(
        "clock_skew",
        Gauge,
        "clock_skew_seconds",
        "Prometheus' clock minus the automator's, measured each pass (over 120 s: no eviction).",
    ),
    MetricSpec(
        "candidates", Gauge, "candidate_victims", "GPU pods the last pass judged as possible victims."
    ),
    MetricSpec(
        "candidates_usage_unknown",
        Gauge,
        "candidate_victims_usage_unknown",
        "Candidate victims of the last pass whose GPU usage was unknown (protected).",
    ),
    MetricSpec(
        "nonfinite",
        Counter,
        "nonfinite_series",
        "Pods whose series held NaN or Inf in a pass (each left unknown, i.e. protected).",
    ),
    MetricSpec(
        "kueue_actions",
        Counter,
        "kueue_actions",
        "Writes on Kueue Workloads by action (boost, unboost, deactivate): made in enforce mode, only "
        "logged in dry-run (docs/kueue.md).",
        ("action", "mode"),
    ),
    MetricSpec(
        "kueue_waiting",
        Gauge,
        "kueue_waiting_workloads",
        "Kueue Workloads waiting for GPU quota (active, not finished, no quota reserved), last pass.",
    ),
    MetricSpec(
        "kueue_waiting_gpus",
        Gauge,
        "kueue_waiting_gpus",
        "GPUs of quota the waiting Kueue Workloads need, last pass.",
    ),
    MetricSpec(
        "kueue_idle_quota",
        Gauge,
        "kueue_idle_quota_gpus",
        "GPUs of quota held by admitted Kueue Workloads idle for some waiting Workload, last pass.",
    ),
    MetricSpec("build_info", Gauge, "build_info", "Always 1; labels say what runs.", ("version", "mode")),
)


class AutomatorMetrics:
    """Every series the service exposes; label values are pre-created so rate() works from the first event."""

    passes: Counter
    decisions: Counter
    evictions: Counter
    reclaimed_gpus: Counter
    reclaimed_gpus_held: Gauge
    replans: Counter
    pass_duration: Histogram
    query_duration: Histogram
    queries_per_pass: Gauge
    last_success: Gauge
    is_leader: Gauge
    unresolved: Gauge
    evictions_last_hour: Gauge
    max_evictions_per_hour: Gauge
    interval: Gauge
    clock_skew: Gauge
    candidates: Gauge
    candidates_usage_unknown: Gauge
    nonfinite: Counter
    kueue_actions: Counter
    kueue_waiting: Gauge
    kueue_waiting_gpus: Gauge
    kueue_idle_quota: Gauge
    build_info: Gauge

    def __init__(self, registry: CollectorRegistry, version: str = "unknown", mode: str = "dry-run") -> None:
        self.registry = registry
        declare(self, registry, PREFIX, TABLE)
        self.build_info.labels(version=version, mode=mode).set(1)
        for result in PASS_RESULTS:
            self.passes.labels(result=result)
        for result in EVICTION_RESULTS:
            self.evictions.labels(result=result)
        for m in MODES:
            self.decisions.labels(mode=m)
            for action in KUEUE_ACTIONS:
                self.kueue_actions.labels(action=action, mode=m)
        self.set_unresolved(dict.fromkeys(UnresolvedReason, 0))

    def set_leader(self, leading: bool) -> None:
        """Leadership as exported; a standby holds no reclaimed GPUs, so a sum over replicas counts the
        leader's alone (the GPU-hours integral must not count an old leader's last value)."""
        self.is_leader.set(1 if leading else 0)
        if not leading:
            self.reclaimed_gpus_held.set(0)

    def set_unresolved(self, counts: Mapping[UnresolvedReason, int]) -> None:
        """The unresolved preemptors of the last pass, every reason set (0 when absent)."""
        for reason in UnresolvedReason:
            self.unresolved.labels(reason=str(reason)).set(counts.get(reason, 0))
