"""History through the Prometheus adapter: kube-state-metrics series by range query, chunk by chunk.

The number of queries depends on the window and the step, never on the cluster: one range query per
kube-state-metrics metric per chunk of CHUNK_STEPS steps, one evidence query per chunk (where pods were
bound), and the live adapter's own usage queries at each step (automator/prom.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from automator.backtest.cluster import KSM_QUERIES, POD_INFO, Evidence, Frame
from automator.backtest.replay import Policy
from automator.ports import PrometheusUnavailable
from automator.prom import PrometheusAdapter, point_problem

# Steps per range query: Prometheus refuses more than 11,000 points per series, and a chunk's answers are
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
    return PrometheusUnavailable(f"{metric} query {KSM_QUERIES[metric]!r} unreadable: {problem}")


def _frames(
    grid: Grid, first: int, count: int, answers: dict[str, list[dict[str, Any]]]
) -> list[dict[str, list[tuple[dict[str, str], float]]]]:
    """Each step's samples; every point checked (a [finite time, finite value] pair): anything else makes
    the answer unreadable, naming the query (the adapter has checked the series and their labels)."""
    frames: list[dict[str, list[tuple[dict[str, str], float]]]] = [{} for _ in range(count)]
    for metric, matrix in answers.items():
        for series in matrix:
            labels = series.get("metric") or {}
            for point in series.get("values") or ():
                problem = point_problem(point)
                if problem is not None:
                    raise _unreadable(metric, f"{labels!r:.100}: {problem}")
                try:
                    value = float(point[1])
                except ValueError:
                    value = math.nan
                if not math.isfinite(value):
                    raise _unreadable(
                        metric, f"{labels!r:.100}: sample {point[1]!r:.40} is not a finite number"
                    )
                i = round((point[0] - grid.start) / grid.step) - first
                if 0 <= i < count:
                    frames[i].setdefault(metric, []).append((labels, value))
    return frames


def ksm_frames(prom: PrometheusAdapter, grid: Grid, first: int, count: int) -> list[Frame]:
    """The kube-state-metrics samples at each step of one chunk (one range query per metric)."""
    start, end = grid.at(first), grid.at(first + count - 1)
    answers = {m: prom.query_range(q, start, end, grid.step, m) for m, q in KSM_QUERIES.items()}
    return list(_frames(grid, first, count, answers))


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
