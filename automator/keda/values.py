"""From a query result to a workload's value (pure).

A query result holds (pod, GPU) values for every pod whose reading is complete, and per pod the time of
its last gate sample. A workload's value aggregates the pairs of its running pods. Missing or stale data
is never read as 0: it raises NoValue, which the endpoints turn into HTTP 503 / gRPC UNAVAILABLE so that
KEDA's fallback applies. A workload with no running pod is the one honest 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from automator.keda.signals import AGGREGATIONS, STAT_LABEL, STAT_TIMESTAMP, Signal

PodName = tuple[str, str]  # (namespace, pod)


class NoValue(Exception):
    """No trustworthy value now; `reason` is a short code (stale, no_data, prometheus_unavailable, ...)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Entry:
    uid: str  # the pod_uid label, "" when the exporter does not set it
    uuid: str  # the GPU
    value: float


@dataclass(frozen=True)
class Reading:
    """One (base, window) query's result, grouped by pod."""

    entries: Mapping[PodName, tuple[Entry, ...]]
    stamps: Mapping[PodName, Mapping[str, float]]  # pod -> uid -> last gate sample (unix seconds)
    query: str


def parse(result: Iterable[Mapping[str, Any]], query: str) -> Reading:
    """Group a Prometheus vector by pod. Samples without namespace/pod or with a non-finite value make that
    pod unknown (left out), never 0."""
    entries: dict[PodName, list[Entry]] = {}
    stamps: dict[PodName, dict[str, float]] = {}
    broken: set[PodName] = set()
    for sample in result:
        metric = sample.get("metric") or {}
        ns, pod = metric.get("namespace"), metric.get("pod")
        if not ns or not pod:
            continue
        key = (str(ns), str(pod))
        try:
            value = float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            broken.add(key)
            continue
        if not math.isfinite(value):
            broken.add(key)
            continue
        uid = str(metric.get("pod_uid") or "")
        if metric.get(STAT_LABEL) == STAT_TIMESTAMP:
            stamps.setdefault(key, {})[uid] = max(value, stamps.get(key, {}).get(uid, -math.inf))
        else:
            entries.setdefault(key, []).append(Entry(uid, str(metric.get("uuid") or ""), value))
    return Reading(
        entries={k: tuple(v) for k, v in entries.items() if k not in broken},
        stamps={k: v for k, v in stamps.items() if k not in broken},
        query=query,
    )


@dataclass(frozen=True)
class PodRef:
    """A running pod of the workload, from the Kubernetes API."""

    namespace: str
    name: str
    uid: str = ""
    started_at: float | None = None  # unix seconds; None = unknown (no grace)


@dataclass(frozen=True)
class Value:
    value: float
    pods: int  # pods whose data made the value
    gpus: int  # distinct GPUs among them
    age_seconds: float  # age of the oldest reading used (now - its last recorded sample)
    pods_pending: tuple[str, ...] = field(default=())  # started within the grace period, no data yet


def _pod_entries(
    pod: PodRef, reading: Reading, now: float, max_age: float
) -> tuple[tuple[Entry, ...], float] | str:
    """The pod's entries and data age, or why there are none (a short phrase)."""
    key = (pod.namespace, pod.name)
    stamps = reading.stamps.get(key) or {}
    entries = reading.entries.get(key) or ()
    # With pod_uid set by the exporter, read this very pod, never an older pod of the same name.
    if pod.uid and pod.uid in stamps:
        usable = [pod.uid]
    elif "" in stamps:
        usable = [""]
    else:
        usable = [] if pod.uid else list(stamps)
    if not usable:
        return "no data"
    stamp = max(stamps[uid] for uid in usable)
    age = max(0.0, now - stamp)
    if age > max_age:
        return f"data {age:.0f} s old"
    chosen = tuple(e for e in entries if e.uid in usable)
    if not chosen:
        return "no data"
    return chosen, age


def compute(
    sig: Signal,
    aggregation: str,
    pods: Sequence[PodRef],
    reading: Reading,
    now: float,
    max_age: float,
    grace_seconds: float,
) -> Value:
    """The workload's value; NoValue when any running pod past its grace lacks fresh data."""
    if not pods:
        return Value(0.0, 0, 0, 0.0)
    values: list[float] = []
    gpus: set[str] = set()
    ages: list[float] = []
    pending: list[str] = []
    missing: list[str] = []
    for pod in pods:
        got = _pod_entries(pod, reading, now, max_age)
        if isinstance(got, str):
            young = pod.started_at is not None and now - pod.started_at < grace_seconds
            (pending if young and got == "no data" else missing).append(f"{pod.name} ({got})")
            continue
        chosen, age = got
        ages.append(age)
        values.extend(e.value * sig.scale for e in chosen)
        gpus.update(e.uuid for e in chosen)
    if missing:
        stale = all("old)" in m for m in missing)
        raise NoValue(
            "stale" if stale else "no_data",
            f"{len(missing)} of {len(pods)} running pods have no fresh data: "
            + ", ".join(sorted(missing)[:5]),
        )
    if not values:
        raise NoValue(
            "no_data", f"none of the {len(pods)} running pods has data yet: {', '.join(sorted(pending)[:5])}"
        )
    value = AGGREGATIONS[aggregation](values)
    if not math.isfinite(value):
        raise NoValue("no_data", "the aggregated value is not finite")
    return Value(value, len(ages), len(gpus), max(ages), tuple(sorted(pending)))
