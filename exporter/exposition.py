"""What a scrape serves. The snapshot's families are rendered once per collection (Prometheus text, its
gzip, and OpenMetrics on the first scrape that asks), so a scrape only picks ready bytes and appends the
exporter's own few series (build info, errors, snapshot age, `process_*`), which change between scrapes.

`ExporterCollector` wraps the same snapshot as a prometheus_client collector (tests, and the benchmark's
comparison with plain prometheus_client rendering).
"""

from __future__ import annotations

import gzip
import math
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.samples import Sample

import exporter
from exporter.families import FamilyData
from exporter.loop import CollectionLoop, Snapshot
from steward_common import metrics as m

TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
GZIP_LEVEL = 6
PROCESS_METRICS_TTL = 1.0  # seconds the process_* block is reused (it reads /proc)


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_value(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: float) -> str:
    """A sample value as Prometheus parses it (Go's ParseFloat accepts Python's repr)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _line(sample: Sample, name: str) -> str:
    if sample.labels:
        # sorted, as prometheus_client writes them: the same bytes whichever way a family was built
        pairs = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(sample.labels.items()))
        return f"{name}{{{pairs}}} {_number(sample.value)}\n"
    return f"{name} {_number(sample.value)}\n"


def render_family(spec: m.MetricSpec, samples: Sequence[Sample], openmetrics: bool = False) -> bytes:
    """One family in the Prometheus text format (0.0.4), or OpenMetrics 1.0. Counters keep their
    sample names; in OpenMetrics a counter whose samples lack `_total` (dcgm-exporter's) is `unknown`."""
    if not samples:
        return b""
    if openmetrics:
        kind = spec.kind if spec.kind == "gauge" or spec.total_suffix else "unknown"
        head = spec.name if kind == "counter" else spec.sample_name
    else:
        kind, head = spec.kind, spec.sample_name
    out = [f"# HELP {head} {_escape_help(spec.help)}\n# TYPE {head} {kind}\n"]
    out += [_line(s, s.name) for s in samples]
    return "".join(out).encode()


@dataclass
class Rendered:
    """A snapshot's families as bytes, kept until the next collection."""

    names: tuple[frozenset[str], ...]  # per family: the names a `name[]` filter may use
    text: tuple[bytes, ...]
    text_joined: bytes
    text_gzip: bytes
    _families: tuple[FamilyData, ...]
    _openmetrics: tuple[bytes, ...] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, families: Sequence[FamilyData]) -> Rendered:
        kept = tuple(f for f in families if f.samples)
        text = tuple(render_family(f.spec, f.samples) for f in kept)
        joined = b"".join(text)
        return cls(
            names=tuple(frozenset({f.spec.name, f.spec.sample_name}) for f in kept),
            text=text,
            text_joined=joined,
            text_gzip=gzip.compress(joined, GZIP_LEVEL, mtime=0),
            _families=kept,
        )

    def openmetrics(self) -> tuple[bytes, ...]:
        with self._lock:  # rendered by the first scrape that asks, once per snapshot
            if self._openmetrics is None:
                self._openmetrics = tuple(render_family(f.spec, f.samples, True) for f in self._families)
            return self._openmetrics


def _family(spec: m.MetricSpec, *samples: tuple[Sequence[str], float]) -> FamilyData:
    return FamilyData(
        spec,
        tuple(
            Sample(spec.sample_name, dict(zip(spec.labels, labels, strict=True)), value)
            for labels, value in samples
        ),
    )


def exporter_families(loop: CollectionLoop, source_name: str, snap: Snapshot | None) -> list[FamilyData]:
    """The exporter's own series, computed at scrape time (the snapshot's age grows between scrapes)."""
    node = loop.node
    out = [
        _family(m.EXPORTER_BUILD_INFO, ([node, exporter.__version__, source_name], 1)),
        _family(m.EXPORTER_COLLECTION_ERRORS, ([node], loop.collection_errors)),
    ]
    if snap is not None:
        out += [
            _family(m.EXPORTER_SNAPSHOT_AGE, ([node], max(0.0, loop.clock() - snap.monotonic))),
            _family(m.EXPORTER_LAST_COLLECTION, ([node], snap.timestamp)),
            _family(m.EXPORTER_COLLECTION_DURATION, ([node], snap.duration_seconds)),
            _family(
                m.EXPORTER_ATTRIBUTION_AVAILABLE,
                *(([node, source], 1 if ok else 0) for source, ok in sorted(snap.attribution.items())),
            ),
        ]
    return out


def parse_names(values: Iterable[str]) -> frozenset[str] | None:
    """`name[]` query values -> the wanted names; None (no filter) when none is given or all are empty."""
    names = frozenset(v for v in values if v)
    return names or None


class Exposition:
    """Serves the loop's last snapshot as bytes; `prepare` renders a new snapshot (the loop calls it)."""

    def __init__(
        self,
        loop: CollectionLoop,
        source_name: str,
        process_metrics: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._loop = loop
        self._source_name = source_name
        self._clock = clock
        self._rendered: tuple[Snapshot, Rendered] | None = None
        self._lock = threading.Lock()
        self._process_registry: CollectorRegistry | None = None
        if process_metrics:
            self._process_registry = CollectorRegistry(auto_describe=False)
            ProcessCollector(registry=self._process_registry)
        self._process_cache: dict[bool, tuple[float, bytes]] = {}

    def prepare(self, snap: Snapshot) -> Rendered:
        rendered = Rendered.of(snap.families)
        with self._lock:
            self._rendered = (snap, rendered)
        return rendered

    def _current(self) -> tuple[Snapshot | None, Rendered | None]:
        snap = self._loop.snapshot
        cached = self._rendered
        if snap is None:
            return None, None
        if cached is None or cached[0] is not snap:
            return snap, self.prepare(snap)  # a snapshot the loop did not hand over (tests)
        return snap, cached[1]

    def _process_block(self, openmetrics: bool) -> bytes:
        if self._process_registry is None:
            return b""
        now = self._clock()
        cached = self._process_cache.get(openmetrics)
        if cached is not None and now - cached[0] < PROCESS_METRICS_TTL:
            return cached[1]
        body = (generate_openmetrics if openmetrics else generate_latest)(self._process_registry)
        body = body.removesuffix(b"# EOF\n")
        self._process_cache[openmetrics] = (now, body)
        return body

    def body(
        self, *, openmetrics: bool = False, compress: bool = False, names: Collection[str] | None = None
    ) -> bytes:
        """The exposition; gzip-compressed when asked (the snapshot part is compressed once per
        collection, the per-scrape tail is a second gzip member: a valid multi-member stream)."""
        snap, rendered = self._current()
        own = exporter_families(self._loop, self._source_name, snap)
        wanted = None if names is None else set(names)

        def keep(candidates: Iterable[str]) -> bool:
            return wanted is None or not wanted.isdisjoint(candidates)

        tail = b"".join(
            render_family(f.spec, f.samples, openmetrics)
            for f in own
            if keep({f.spec.name, f.spec.sample_name})
        )
        if wanted is None or any(n.startswith("process_") for n in wanted):
            tail += self._process_filtered(openmetrics, wanted)
        if openmetrics:
            tail += b"# EOF\n"
        if rendered is None:
            head = b""
        elif wanted is None and not openmetrics:
            if compress:
                return rendered.text_gzip + gzip.compress(tail, GZIP_LEVEL, mtime=0)
            head = rendered.text_joined
        else:
            chunks = rendered.openmetrics() if openmetrics else rendered.text
            head = b"".join(c for c, n in zip(chunks, rendered.names, strict=True) if keep(n))
        body = head + tail
        return gzip.compress(body, GZIP_LEVEL, mtime=0) if compress else body

    def _process_filtered(self, openmetrics: bool, wanted: set[str] | None) -> bytes:
        block = self._process_block(openmetrics)
        if wanted is None:
            return block
        out, keep = [], False
        for line in block.decode().splitlines(keepends=True):
            if line.startswith("# HELP "):
                name = line.split()[2]
                keep = name in wanted or name.removesuffix("_total") in wanted
            if keep:
                out.append(line)
        return "".join(out).encode()


# --- the same snapshot as a prometheus_client collector ---------------------------------------------


def to_metric(data: FamilyData) -> Metric:
    """A fresh metric family holding the snapshot's ready-made samples."""
    family: Metric = (
        GaugeMetricFamily(data.spec.name, data.spec.help)
        if data.spec.kind == "gauge"
        else CounterMetricFamily(data.spec.name, data.spec.help)
    )
    family.samples.extend(data.samples)
    return family


class ExporterCollector:
    """prometheus_client collector: fresh families per scrape from the loop's last snapshot."""

    def __init__(self, loop: CollectionLoop, source_name: str) -> None:
        self._loop = loop
        self._source_name = source_name

    def collect(self) -> Iterator[Metric]:
        snap = self._loop.snapshot
        own = exporter_families(self._loop, self._source_name, snap)
        yield from (to_metric(f) for f in own[:2])
        if snap is None:
            return
        yield from (to_metric(f) for f in snap.families)
        yield from (to_metric(f) for f in own[2:])
