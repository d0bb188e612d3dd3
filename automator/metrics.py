"""The automator's own metrics (prefix gpu_steward_automator_), on a registry the caller owns.

One table (attribute, name, type, help, labels, buckets: steward_common/metrics.py's MetricSpec, as the
exporter's) per component: `declare` creates its metrics from it, so a metric is written once. The KEDA
endpoints' table (automator/keda/metrics.py) uses the same `declare`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from automator.ports import EvictionOutcome, KueueAction, Mode, PassOutcome
from automator.reclaim.model import Unresolved
from steward_common.conventions import NoticeWithdrawal, UnresolvedReason
from steward_common.metrics import Kind, MetricSpec

PREFIX: Final = "gpu_steward_automator_"

# Label values, from the enums that are their only home.
PASS_RESULTS: tuple[str, ...] = tuple(PassOutcome)
EVICTION_RESULTS: tuple[str, ...] = tuple(EvictionOutcome)
MODES: tuple[str, ...] = tuple(Mode)
KUEUE_ACTIONS: tuple[str, ...] = tuple(KueueAction)

Metric = Counter | Gauge | Histogram

# The labels the Prometheus Operator gives every target of a ServiceMonitor (and `job`, `instance` any
# Prometheus): a metric's own label of one of these names would be renamed exported_<name> on the way in
# (the automator's ServiceMonitor keeps honorLabels false), so no table may use one.
TARGET_LABELS: Final = frozenset({"job", "instance", "namespace", "service", "pod", "container", "endpoint"})
# The KEDA requests' label naming how KEDA asked: `http` (the metrics-api endpoint) or `grpc` (the
# external scaler).
TRANSPORT_LABEL: Final = "transport"

# One row of a component's table: the attribute of the owner that holds the metric, and its declaration.
Row = tuple[str, MetricSpec]


def row(
    prefix: str,
    attr: str,
    kind: Kind,
    name: str,
    help: str,
    labels: tuple[str, ...] = (),
    *,
    buckets: tuple[float, ...] = (),
) -> Row:
    """The metric `prefix + name` (counters without `_total`) held by `attr`."""
    return attr, MetricSpec(prefix + name, kind, "", labels, help, buckets=buckets)


def declare(owner: object, registry: CollectorRegistry, table: Iterable[Row]) -> None:
    """Create every metric of `table` on `registry` and set it as `owner`'s attribute of the same name.

    The owner's class annotates each attribute with its type (for mypy); a table that names an attribute
    the class does not declare, or leaves one out, is a bug caught here, and so is a label that a scrape
    would rename (TARGET_LABELS)."""
    table = tuple(table)
    taken = {(spec.name, label) for _, spec in table for label in spec.labels if label in TARGET_LABELS}
    if taken:
        raise TypeError(f"{type(owner).__name__}: labels that are target labels: {sorted(taken)}")
    declared = {
        name
        for cls in type(owner).__mro__
        for name, kind in getattr(cls, "__annotations__", {}).items()
        if kind in ("Counter", "Gauge", "Histogram")
    }
    made: set[str] = set()
    for attr, spec in table:
        metric: Metric
        if spec.kind == "histogram":
            metric = Histogram(spec.name, spec.help, spec.labels, registry=registry, buckets=spec.buckets)
        else:
            made_as = Counter if spec.kind == "counter" else Gauge
            metric = made_as(spec.name, spec.help, spec.labels, registry=registry)
        setattr(owner, attr, metric)
        made.add(attr)
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

_row = partial(row, PREFIX)
TABLE: Final[tuple[Row, ...]] = (
    _row("passes", "counter", "passes", "Reclaim passes by result.", ("result",)),
    _row(
        "decisions",
        "counter",
        "decisions",
        "Preemptors for which victims were chosen (acted on in enforce mode, only logged in dry-run).",
        ("mode",),
    ),
    _row("evictions", "counter", "evictions", "Eviction API calls by result.", ("result",)),
    _row(
        "reclaimed_gpus",
        "counter",
        "reclaimed_gpus",
        "GPUs of the victims whose eviction the API accepted (result ok, enforce mode): GPUs freed for "
        "preemptors. Not GPU-hours: how long the preemptors then used them is not measured here.",
    ),
    _row(
        "reclaimed_gpus_held",
        "gauge",
        "reclaimed_gpus_held",
        "GPUs held now by running pods on the node the automator reclaimed for them (reclaim-node annotation "
        "= their node). Its integral over time is the GPU time reclaimed (GPU-hours on the dashboard).",
    ),
    _row("replans", "counter", "replans", "Re-plans after an eviction was refused (429) or failed (500)."),
    _row(
        "pass_duration",
        "histogram",
        "pass_duration_seconds",
        "Duration of a reclaim pass (snapshot, queries, plan, actions).",
        buckets=_BUCKETS_PASS,
    ),
    _row(
        "query_duration",
        "histogram",
        "prometheus_query_duration_seconds",
        "Duration of each Prometheus query, failed ones included.",
        buckets=_BUCKETS_QUERY,
    ),
    _row(
        "queries_per_pass",
        "gauge",
        "prometheus_queries_per_pass",
        "Prometheus queries made by the last pass (one per distinct window, whatever the pod count).",
    ),
    _row(
        "last_success",
        "gauge",
        "last_successful_pass_timestamp_seconds",
        "Unix time the last pass finished without error.",
    ),
    _row("is_leader", "gauge", "is_leader", "1 if this replica holds the lease and runs passes."),
    _row(
        "unresolved",
        "gauge",
        "unresolved_preemptors",
        "Preemptors the last pass could not make room for, by reason (docs/automator.md lists them).",
        ("reason",),
    ),
    _row(
        "evictions_last_hour",
        "gauge",
        "evictions_last_hour",
        "Accepted evictions in the last hour (sliding window; --max-evictions-per-hour caps it).",
    ),
    _row("max_evictions_per_hour", "gauge", "max_evictions_per_hour", "The --max-evictions-per-hour budget."),
    _row("interval", "gauge", "interval_seconds", "Seconds between passes (--interval)."),
    _row(
        "clock_skew",
        "gauge",
        "clock_skew_seconds",
        "Prometheus' clock minus the automator's, measured each pass (over 120 s: no eviction).",
    ),
    _row("candidates", "gauge", "candidate_victims", "GPU pods the last pass judged as possible victims."),
    _row(
        "candidates_usage_unknown",
        "gauge",
        "candidate_victims_usage_unknown",
        "Candidate victims of the last pass whose GPU usage was unknown (protected).",
    ),
    _row(
        "nonfinite",
        "counter",
        "nonfinite_series",
        "Pods whose series held NaN or Inf in a pass (each left unknown, i.e. protected).",
    ),
    _row("build_info", "gauge", "build_info", "Always 1; labels say what runs.", ("version", "mode")),
    _row(
        "notices", "counter", "notices", "Victims given notice before eviction (--notice-seconds, enforce)."
    ),
    _row(
        "notices_withdrawn",
        "counter",
        "notices_withdrawn",
        'Notices withdrawn (annotations removed, enforce), by reason (docs/reclaim.md, "Notice").',
        ("reason",),
    ),
    _row(
        "evictions_after_notice",
        "counter",
        "evictions_after_notice",
        "Accepted evictions of victims whose notice had passed: notices that ended in eviction.",
    ),
    _row(
        "under_notice",
        "gauge",
        "pods_under_notice",
        "Pods carrying a notice (gpu-steward.io/reclaim-notice) as the last pass read them.",
    ),
    _row(
        "kueue_actions",
        "counter",
        "kueue_actions",
        "Writes on Kueue Workloads by action (boost, unboost, deactivate): made in enforce mode, only "
        "logged in dry-run (docs/kueue.md).",
        ("action", "mode"),
    ),
    _row(
        "kueue_waiting",
        "gauge",
        "kueue_waiting_workloads",
        "Kueue Workloads waiting for GPU quota (active, not finished, no quota reserved), last pass.",
    ),
    _row(
        "kueue_waiting_gpus",
        "gauge",
        "kueue_waiting_gpus",
        "GPUs of quota the waiting Kueue Workloads need, last pass.",
    ),
    _row(
        "kueue_idle_quota",
        "gauge",
        "kueue_idle_quota_gpus",
        "GPUs of quota held by admitted Kueue Workloads idle for some waiting Workload, last pass.",
    ),
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
    notices: Counter
    notices_withdrawn: Counter
    evictions_after_notice: Counter
    under_notice: Gauge

    def __init__(self, registry: CollectorRegistry, version: str = "unknown", mode: str = "dry-run") -> None:
        self.registry = registry
        declare(self, registry, TABLE)
        self.build_info.labels(version=version, mode=mode).set(1)
        for result in PASS_RESULTS:
            self.passes.labels(result=result)
        for result in EVICTION_RESULTS:
            self.evictions.labels(result=result)
        for m in MODES:
            self.decisions.labels(mode=m)
            for action in KUEUE_ACTIONS:
                self.kueue_actions.labels(action=action, mode=m)
        for reason in NoticeWithdrawal:
            self.notices_withdrawn.labels(reason=str(reason))
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
