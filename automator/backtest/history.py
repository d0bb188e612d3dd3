"""History through the Prometheus adapter: kube-state-metrics series by range query, chunk by chunk.

The number of queries depends on the window and the step, never on the cluster: one range query per
kube-state-metrics metric per chunk of CHUNK_STEPS steps, one evidence query per chunk (where pods were
bound), and the live adapter's own usage queries at each step (automator/prom.py).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

from automator.backtest.cluster import KSM_QUERIES, POD_INFO, Evidence, Frame
from automator.backtest.replay import Policy
from automator.ports import PrometheusUnavailable
from automator.prom import PrometheusAdapter, RangeSeries

# Steps per range query: Prometheus refuses more than 11,000 points per series, and a chunk's samples are
# held in memory while its steps are replayed.
CHUNK_STEPS = 240


@dataclass(frozen=True)
class Grid:
    """The step times: start, start + step, ... up to end (whole seconds)."""

    start: int
    end: int
    step: int

    @property
    def count(self) -> int:
        return (self.end - self.start) // self.step + 1

    def at(self, i: int) -> int:
        return self.start + i * self.step

    def chunks(self) -> Iterator[tuple[int, int]]:
        """(first step index, step count) of each chunk."""
        for first in range(0, self.count, CHUNK_STEPS):
            yield first, min(CHUNK_STEPS, self.count - first)


def _unreadable(metric: str, problem: str) -> PrometheusUnavailable:
    return PrometheusUnavailable(f"{metric} query unreadable ({KSM_QUERIES[metric]!r}): {problem}")


# One series of a chunk: its labels and its value at each step of the chunk (NaN: no sample then; a
# sample is never NaN, every one is checked finite).
_Series = tuple[dict[str, str], "array[float]"]


class ChunkFrames(Sequence[Frame]):
    """The kube-state-metrics samples of one chunk, 8 bytes per series and step: each step's Frame is made
    when that step is replayed, and dropped after it."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.series: dict[str, list[_Series]] = {}

    def __len__(self) -> int:
        return self.steps

    @overload
    def __getitem__(self, i: int) -> Frame: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Frame]: ...
    def __getitem__(self, i: int | slice) -> Frame | Sequence[Frame]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.steps))]
        if not -self.steps <= i < self.steps:
            raise IndexError(i)
        i %= self.steps
        frame: dict[str, Sequence[tuple[Mapping[str, str], float]]] = {}
        for metric, series in self.series.items():
            samples = [(labels, value) for labels, values in series if (value := values[i]) == value]
            if samples:
                frame[metric] = samples
        return frame

    def add(self, metric: str, grid: Grid, first: int, answer: Iterable[RangeSeries]) -> None:
        """One metric's answer, read series by series; every point checked (finite time and value):
        anything else makes the answer unreadable, naming the query."""
        series = self.series.setdefault(metric, [])
        for labels, points in answer:
            values = array("d", _ABSENT) * self.steps
            for stamp, text in points:
                try:
                    value = float(text)
                except ValueError:
                    value = math.nan
                if not (math.isfinite(value) and math.isfinite(stamp)):
                    problem = f"sample [{stamp!r}, {text!r:.40}] is not a finite time and number"
                    raise _unreadable(metric, f"{labels!r:.100}: {problem}")
                i = round((stamp - grid.start) / grid.step) - first
                if 0 <= i < self.steps:
                    values[i] = value
            series.append((labels, values))


_ABSENT = (math.nan,)


def ksm_frames(prom: PrometheusAdapter, grid: Grid, first: int, count: int) -> ChunkFrames:
    """The kube-state-metrics samples at each step of one chunk: one range query per metric, each answer
    read into the chunk's arrays and dropped before the next query."""
    start, end = grid.at(first), grid.at(first + count - 1)
    frames = ChunkFrames(count)
    for metric, query in KSM_QUERIES.items():
        frames.add(metric, grid, first, prom.query_range(query, start, end, grid.step, metric))
    return frames


def estimated_queries(grid: Grid, policies: Sequence[Policy]) -> int:
    """The queries a run makes, about: per step the usage queries of the policies' distinct windows (the
    recent window's and the default idle window's: a class's own window or CPU idleness adds more), per
    chunk one range query per kube-state-metrics metric and the evidence query; look-aheads not counted."""
    recent = {p.config.recent_window_seconds for p in policies}
    windows = {p.config.default_gpu_idle_seconds for p in policies}
    chunks = -(-grid.count // CHUNK_STEPS)
    return grid.count * (len(recent) + len(windows)) + chunks * (len(KSM_QUERIES) + 1)


def evidence_query(seconds: int) -> str:
    labels = "namespace, pod, uid, node, created_by_kind, created_by_name"
    return f'max by ({labels}) (max_over_time({POD_INFO}{{node!=""}}[{seconds}s]))'


def evidence(prom: PrometheusAdapter, grid: Grid) -> Evidence:
    """Where each pod (and each owner's pods) was bound at some time in the window (one query per chunk)."""
    found = Evidence()
    for first, count in grid.chunks():
        end = grid.at(first + count - 1)
        span = max(grid.step, end - grid.at(first) + grid.step)
        for sample in prom.query_at(evidence_query(span), "evidence", end):
            found.add(sample.get("metric") or {})
    return found


# Kueue's own gauges (its controller's /metrics, which a cluster that queues with Kueue scrapes): Workloads
# are not in kube-state-metrics by default, so the backtest cannot replay Kueue, and says so when these show
# that the cluster has Workloads (docs/kueue.md, docs/backtest.md).
KUEUE_SERIES = ("kueue_admitted_active_workloads", "kueue_pending_workloads")


def kueue_query(seconds: int) -> str:
    names = "|".join(KUEUE_SERIES)
    return f'max(max_over_time({{__name__=~"{names}"}}[{seconds}s]))'


def kueue_seen(prom: PrometheusAdapter, grid: Grid) -> bool:
    """Whether Kueue had Workloads (admitted or pending) at some time in the window (one query)."""
    span = max(grid.step, grid.end - grid.start + grid.step)
    for sample in prom.query_at(kueue_query(span), "kueue", grid.end):
        try:
            if float((sample.get("value") or [0, "0"])[1]) > 0:
                return True
        except (TypeError, ValueError, IndexError):
            continue  # an unreadable answer shows nothing
    return False
