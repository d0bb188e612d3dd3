"""What a scrape serves: a prometheus_client collector over the collection loop's last snapshot, plus
the exporter's own series (build info, errors, snapshot age), computed at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

import exporter
from exporter import metrics as m
from exporter.families import FamilyData
from exporter.loop import CollectionLoop, Snapshot


def to_metric(data: FamilyData) -> Metric:
    """A fresh metric family holding the snapshot's ready-made samples."""
    family: Metric = (
        GaugeMetricFamily(data.spec.name, data.spec.help)
        if data.spec.kind == "gauge"
        else CounterMetricFamily(data.spec.name, data.spec.help)
    )
    family.samples.extend(data.samples)
    return family


def _family(spec: m.MetricSpec, *samples: tuple[Sequence[str], float]) -> Metric:
    family: GaugeMetricFamily | CounterMetricFamily = (
        GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
        if spec.kind == "gauge"
        else CounterMetricFamily(spec.name, spec.help, labels=spec.labels)
    )
    for labels, value in samples:
        family.add_metric(labels, value)
    return family


class ExporterCollector:
    """prometheus_client collector: fresh families per scrape from the loop's last snapshot."""

    def __init__(self, loop: CollectionLoop, source_name: str) -> None:
        self._loop = loop
        self._source_name = source_name

    def collect(self) -> Iterator[Metric]:
        loop, node = self._loop, self._loop.node
        snap = loop.snapshot
        yield _family(m.EXPORTER_BUILD_INFO, ([node, exporter.__version__, self._source_name], 1))
        yield _family(m.EXPORTER_COLLECTION_ERRORS, ([node], loop.collection_errors))
        if snap is None:
            return
        yield from (to_metric(f) for f in snap.families)
        yield from _exporter_gauges(node, snap, loop.clock())


def _exporter_gauges(node: str, snap: Snapshot, now: float) -> Iterable[Metric]:
    return (
        _family(m.EXPORTER_SNAPSHOT_AGE, ([node], max(0.0, now - snap.monotonic))),
        _family(m.EXPORTER_LAST_COLLECTION, ([node], snap.timestamp)),
        _family(m.EXPORTER_COLLECTION_DURATION, ([node], snap.duration_seconds)),
        _family(
            m.EXPORTER_ATTRIBUTION_AVAILABLE,
            *(([node, source], 1 if ok else 0) for source, ok in sorted(snap.attribution.items())),
        ),
    )
