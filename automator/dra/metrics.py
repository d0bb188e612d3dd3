"""Prometheus collector for the last DRA check report: fresh families on every scrape."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from automator.dra.model import Report
from automator.dra.report import CAPACITY_METRIC, CONSUMED_METRIC, DEVICE_LABELS, FINDINGS_METRIC, samples

HELP = {
    CAPACITY_METRIC: "Capacity a DRA device publishes, per capacity name, in the capacity's unit "
    "(bytes for memory, percent for HAMi's cores).",
    CONSUMED_METRIC: "Sum of consumedCapacity of the claims allocated a DRA device, per capacity name "
    "(the whole capacity for an exclusive allocation).",
    FINDINGS_METRIC: "Findings of the last DRA check, by kind.",
}


class DraCollector(Collector):
    """Exposes `samples(report())`; exposes nothing until a check has run (report() returns None)."""

    def __init__(self, report: Callable[[], Report | None]) -> None:
        self._report = report

    def collect(self) -> Iterator[Metric]:
        report = self._report()
        if report is None:
            return
        families = {
            CAPACITY_METRIC: GaugeMetricFamily(CAPACITY_METRIC, HELP[CAPACITY_METRIC], labels=DEVICE_LABELS),
            CONSUMED_METRIC: GaugeMetricFamily(CONSUMED_METRIC, HELP[CONSUMED_METRIC], labels=DEVICE_LABELS),
            FINDINGS_METRIC: GaugeMetricFamily(FINDINGS_METRIC, HELP[FINDINGS_METRIC], labels=("kind",)),
        }
        for sample in samples(report):
            families[sample.name].add_metric([v for _, v in sample.labels], sample.value)
        yield from families.values()
