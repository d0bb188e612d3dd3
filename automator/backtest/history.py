"""History through the Prometheus adapter: kube-state-metrics series by range query, chunk by chunk.

The number of queries depends on the window and the step, never on the cluster: one range query per
kube-state-metrics metric per chunk of CHUNK_STEPS steps, one evidence query per chunk (where pods were
bound), and the live adapter's own usage queries at each step (automator/prom.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from automator.backtest.cluster import KSM_QUERIES, POD_INFO, Evidence, Frame
from automator.ports import PrometheusUnavailable
from automator.prom import PrometheusAdapter

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


def _frames(
    grid: Grid, first: int, count: int, answers: dict[str, list[dict[str, Any]]]
) -> list[dict[str, list[tuple[dict[str, str], float]]]]:
    frames: list[dict[str, list[tuple[dict[str, str], float]]]] = [{} for _ in range(count)]
    for metric, matrix in answers.items():
        for series in matrix:
            labels = series.get("metric") or {}
            for stamp, text in series.get("values") or []:
                i = round((float(stamp) - grid.start) / grid.step) - first
                try:
                    value = float(text)
                except (TypeError, ValueError) as e:
                    raise PrometheusUnavailable(f"{metric}: unparsable sample {text!r}") from e
                if 0 <= i < count:
                    frames[i].setdefault(metric, []).append((labels, value))
    return frames


def ksm_frames(prom: PrometheusAdapter, grid: Grid, first: int, count: int) -> list[Frame]:
    """The kube-state-metrics samples at each step of one chunk (one range query per metric)."""
    start, end = grid.at(first), grid.at(first + count - 1)
    answers = {m: prom.query_range(q, start, end, grid.step, m) for m, q in KSM_QUERIES.items()}
    return list(_frames(grid, first, count, answers))


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
