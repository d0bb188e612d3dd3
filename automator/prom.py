"""Prometheus adapter: the usage every candidate victim needs, in a bounded number of queries.

One query per distinct GPU window and one per distinct CPU window, never one per pod, so the cost of a pass
does not grow with the cluster. Any doubt about the answer raises PrometheusUnavailable: the caller then
evicts nothing (fail safe; the scheduler plugin read errors as "idle").
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from automator.conventions import NAMESPACE_LABEL, POD_LABEL
from automator.dra.model import ContainerUsage
from automator.model import PodKey, PodUsage, UsageWindow
from automator.ports import PrometheusUnavailable
from automator.series import CONTAINER_MEMORY, FRESHNESS_SECONDS, POD_ACTIVITY
from exporter.metrics import CONTAINER_LABELS, DEVICE_LABELS

log = logging.getLogger(__name__)

GPU_SERIES = POD_ACTIVITY
CPU_SERIES = 'container_cpu_usage_seconds_total{container!="", image!=""}'
# Label that tells the sample count apart from the average in the combined GPU query.
STAT_LABEL = "stat"


def gpu_query(window_seconds: int) -> str:
    """Average activity and sample count of every pod's recorded series over one window, in one query.

    `max by (namespace, pod)` keeps one series per pod even if the recorded series gained extra labels
    (e.g. a replica label behind Thanos); max is the cautious choice (busier = protected).
    """
    sel = f"{GPU_SERIES}[{window_seconds}s]"
    avg = f"max by (namespace, pod) (avg_over_time({sel}))"
    count = f"max by (namespace, pod) (count_over_time({sel}))"
    return f'{avg} or label_replace({count}, "{STAT_LABEL}", "count", "", "")'


def cpu_query(window_seconds: int) -> str:
    """Average CPU cores of every pod over one window (cAdvisor; the pause container has no image)."""
    return f"sum by (namespace, pod) (rate({CPU_SERIES}[{window_seconds}s]))"


def coverage(count: float, rule_interval: float, window_seconds: int) -> float:
    """Fraction of the window covered by samples of a series recorded every rule_interval seconds."""
    return min(1.0, count * rule_interval / window_seconds)


def _value(sample: Mapping[str, Any], query: str) -> float:
    try:
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise PrometheusUnavailable(f"unparsable sample {sample!r} for {query!r}") from e
    if not math.isfinite(value):
        # The recorded series is 0-1 by construction: NaN/Inf means something upstream is broken.
        raise PrometheusUnavailable(f"non-finite value {value} for {sample.get('metric')} in {query!r}")
    return value


def _key(sample: Mapping[str, Any], query: str) -> PodKey:
    metric = sample.get("metric") or {}
    ns, pod = metric.get(NAMESPACE_LABEL), metric.get(POD_LABEL)
    if not ns or not pod:
        raise PrometheusUnavailable(f"sample without namespace/pod labels {metric!r} for {query!r}")
    return PodKey(str(ns), str(pod))


def parse_gpu_result(
    result: list[dict[str, Any]], query: str, window_seconds: int, rule_interval: float
) -> dict[PodKey, PodUsage]:
    """Pods with both an average and a sample count; anything else stays unknown (absent)."""
    averages: dict[PodKey, float] = {}
    counts: dict[PodKey, float] = {}
    for sample in result:
        key = _key(sample, query)
        stat = (sample.get("metric") or {}).get(STAT_LABEL)
        (counts if stat == "count" else averages)[key] = _value(sample, query)
    return {
        key: PodUsage(gpu_activity=avg, coverage=coverage(counts[key], rule_interval, window_seconds))
        for key, avg in averages.items()
        if key in counts
    }


def parse_cpu_result(result: list[dict[str, Any]], query: str) -> dict[PodKey, float]:
    return {_key(sample, query): _value(sample, query) for sample in result}


class PrometheusAdapter:
    """Reads the recorded GPU series and cAdvisor CPU usage for a pass."""

    def __init__(
        self,
        url: str,
        timeout: float = 10.0,
        rule_interval: float = 30.0,
        observe_query: Callable[[float], None] | None = None,
    ) -> None:
        # No retries: a pass runs every --interval seconds anyway, and a retry would hide a slow Prometheus.
        self._client = PrometheusConnect(
            url=url, timeout=timeout, retry=Retry(total=0, raise_on_status=False)
        )
        self.url = url
        self.timeout = timeout
        self.rule_interval = rule_interval
        self._observe = observe_query
        self.queries_last_call = 0

    def _query(self, expr: str, what: str, at: datetime | None) -> list[dict[str, Any]]:
        params = {"time": f"{at.timestamp():.3f}"} if at is not None else None
        self.queries_last_call += 1
        start = time.monotonic()
        try:
            result = self._client.custom_query(expr, params=params)
        except (requests.RequestException, PrometheusApiClientException, ValueError, KeyError) as e:
            # ValueError: a body that is not JSON (a proxy's HTML page); KeyError: JSON without data.result.
            # The exception text repeats the URL-encoded query: keep the reason readable.
            text = str(e)
            timed_out = isinstance(e, requests.Timeout) or "timed out" in text
            kind = f"timed out after {self.timeout:g}s" if timed_out else type(e).__name__
            if "(Caused by " in text:  # requests: the cause is at the end, after the encoded query
                text = text.split("(Caused by ", 1)[1].removesuffix(")")
            detail = text if len(text) <= 300 else text[:300] + "..."
            raise PrometheusUnavailable(f"{what} query to {self.url} failed ({kind}): {detail}") from e
        finally:
            if self._observe is not None:
                self._observe(time.monotonic() - start)
        if not isinstance(result, list):
            raise PrometheusUnavailable(
                f"{what} query to {self.url}: result is not a vector: {result!r:.200}"
            )
        return result

    def usage(
        self, windows: Mapping[PodKey, UsageWindow], at: datetime | None = None
    ) -> dict[PodKey, PodUsage]:
        """Usage of every pod in `windows` that Prometheus knows; a pod it lacks is left out (unknown).

        at: evaluation time of every query (default: Prometheus's now), so all windows end together.
        Raises PrometheusUnavailable on any error, timeout, non-success answer or non-finite value.
        """
        self.queries_last_call = 0
        gpu_by_window: dict[int, dict[PodKey, PodUsage]] = {}
        for seconds in sorted({w.gpu_seconds for w in windows.values()}):
            if seconds <= 0:
                raise ValueError(f"GPU window must be > 0 s, got {seconds} (a [0s] window reads as idle)")
            q = gpu_query(seconds)
            gpu_by_window[seconds] = parse_gpu_result(
                self._query(q, f"GPU {seconds}s", at), q, seconds, self.rule_interval
            )
        cpu_by_window: dict[int, dict[PodKey, float]] = {}
        for seconds in sorted({w.cpu_seconds for w in windows.values() if w.cpu_seconds > 0}):
            q = cpu_query(seconds)
            cpu_by_window[seconds] = parse_cpu_result(self._query(q, f"CPU {seconds}s", at), q)

        usage: dict[PodKey, PodUsage] = {}
        for key, window in windows.items():
            gpu = gpu_by_window[window.gpu_seconds].get(key)
            if gpu is None:
                continue
            cpu = cpu_by_window[window.cpu_seconds].get(key) if window.cpu_seconds > 0 else None
            usage[key] = PodUsage(gpu_activity=gpu.gpu_activity, coverage=gpu.coverage, cpu_cores=cpu)
        log.debug("usage: %d pods known of %d, %d queries", len(usage), len(windows), self.queries_last_call)
        return usage


# --- DRA capacity check (docs/dra.md): measured GPU memory per container and GPU ----------------------


# The exporter's labels of gpu_steward_container_gpu_memory_used_bytes that name a container and its GPU.
DRA_USAGE_LABELS: tuple[str, str, str, str] = (*CONTAINER_LABELS, DEVICE_LABELS[2])  # + "uuid"


def dra_memory_query(window_seconds: int = FRESHNESS_SECONDS) -> str:
    """Each container's GPU memory per GPU over the last `window_seconds`, from the recorded building block
    (raw samples that are fresh and from an exporter whose snapshot is not stale; absent otherwise)."""
    return f"max by ({', '.join(DRA_USAGE_LABELS)}) (max_over_time({CONTAINER_MEMORY}[{window_seconds}s]))"


class DraMemoryReader:
    """Measured per-container GPU memory for the DRA check, through the PrometheusAdapter's client."""

    def __init__(self, prom: PrometheusAdapter, window_seconds: int = FRESHNESS_SECONDS) -> None:
        self.prom = prom
        self.query = dra_memory_query(window_seconds)

    def container_memory(self) -> list[ContainerUsage]:
        """One entry per (namespace, pod, container, GPU uuid) Prometheus knows. A value that is not a finite
        number >= 0 is unknown (None: never compared); a sample without those labels is left out.
        Raises PrometheusUnavailable when the query fails."""
        usage: list[ContainerUsage] = []
        for sample in self.prom._query(self.query, "DRA memory", None):
            metric = sample.get("metric") or {}
            labels = [v for v in (metric.get(k) for k in DRA_USAGE_LABELS) if isinstance(v, str) and v]
            if len(labels) != len(DRA_USAGE_LABELS):
                continue
            try:
                value = float(sample["value"][1])
            except (KeyError, IndexError, TypeError, ValueError):
                value = math.nan
            memory = Decimal(repr(value)) if math.isfinite(value) and 0 <= value <= 2.0**63 else None
            usage.append(ContainerUsage(labels[0], labels[1], labels[2], labels[3], memory))
        return usage
