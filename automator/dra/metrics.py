"""Prometheus metrics of the DRA check: the last report's families (fresh on every scrape) and the
service's check counters. Names: automator/dra/report.py."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from automator.dra.model import CheckOutcome, EventOutcome, Report
from automator.dra.report import (
    CAPACITY_METRIC,
    CHECK_DURATION_METRIC,
    CHECKS_METRIC,
    CONSUMED_METRIC,
    DEVICE_LABELS,
    EVENTS_METRIC,
    FINDINGS_METRIC,
    LAST_SUCCESS_METRIC,
    USAGE_CHECKED_METRIC,
    samples,
)

HELP = {
    CAPACITY_METRIC: "Capacity a DRA device publishes, per capacity name, in the capacity's unit "
    "(bytes for memory, percent for HAMi's cores).",
    CONSUMED_METRIC: "Sum of consumedCapacity of the claims allocated a DRA device, per capacity name "
    "(the whole capacity for an exclusive allocation).",
    FINDINGS_METRIC: "Findings of the last DRA check, by kind.",
}


class DraCollector(Collector):
    """Exposes `samples(report())`; exposes nothing until a check has run (report() returns None).

    unchecked(): finding kinds the last check could not look for (usage-over-claim while Prometheus is
    unreadable); their findings sample is left out (unknown) instead of reading 0.
    """

    def __init__(
        self,
        report: Callable[[], Report | None],
        unchecked: Callable[[], Collection[str]] = lambda: (),
    ) -> None:
        self._report = report
        self._unchecked = unchecked

    def collect(self) -> Iterator[Metric]:
        report = self._report()
        if report is None:
            return
        unchecked = self._unchecked()
        families = {
            CAPACITY_METRIC: GaugeMetricFamily(CAPACITY_METRIC, HELP[CAPACITY_METRIC], labels=DEVICE_LABELS),
            CONSUMED_METRIC: GaugeMetricFamily(CONSUMED_METRIC, HELP[CONSUMED_METRIC], labels=DEVICE_LABELS),
            FINDINGS_METRIC: GaugeMetricFamily(FINDINGS_METRIC, HELP[FINDINGS_METRIC], labels=("kind",)),
        }
        for sample in samples(report):
            if sample.name == FINDINGS_METRIC and sample.labels[0][1] in unchecked:
                continue
            families[sample.name].add_metric([v for _, v in sample.labels], sample.value)
        yield from families.values()


class DraCheckMetrics:
    """The periodic check's own series, on the service's registry; label values created at start."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.checks = Counter(CHECKS_METRIC, "DRA checks by result.", ["result"], registry=registry)
        self.last_success = Gauge(
            LAST_SUCCESS_METRIC,
            "Unix time the last DRA check read the cluster and finished.",
            registry=registry,
        )
        self.duration = Histogram(
            CHECK_DURATION_METRIC,
            "Duration of a DRA check (lists, usage query, checks, Events).",
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self.usage_checked = Gauge(
            USAGE_CHECKED_METRIC,
            "1 if the last DRA check compared measured GPU memory with the claims, 0 if it could not "
            "(Prometheus unreadable: usage-over-claim unknown).",
            registry=registry,
        )
        self.events = Counter(
            EVENTS_METRIC, "Event writes of the DRA check by result.", ["result"], registry=registry
        )
        for result in CheckOutcome:
            self.checks.labels(result=result.value)
        for outcome in EventOutcome:
            self.events.labels(result=outcome.value)
