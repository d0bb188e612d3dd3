"""Prometheus adapter: the usage every candidate victim needs, in a bounded number of queries.

One query for the recent window's maximum (which also reads Prometheus' clock), then one per distinct GPU
window and one per distinct CPU window, never one per pod, so the cost of a pass does not grow with the
cluster. Every window ends at Prometheus' own time, not the automator's. A failed or malformed answer
raises PrometheusUnavailable: the caller then evicts nothing (fail safe; the scheduler plugin read errors as
"idle"); a non-finite value in one pod's series makes only that pod unknown, and is counted.
"""

from __future__ import annotations

import logging
import math
import re
import ssl
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

from automator.objects.keys import ObjectKey
from automator.ports import ContainerUsage, PrometheusUnavailable, Usage, When, Windows
from automator.prom_http import Endpoint, HttpFailure, get_body, result_of
from automator.reclaim.model import PodUsage
from steward_common.conventions import NAMESPACE_LABEL, POD_LABEL
from steward_common.metrics import CONTAINER_LABELS, DEVICE_LABELS
from steward_common.series import CONTAINER_MEMORY, FRESH_RULE_INTERVALS, FRESHNESS_SECONDS, POD_ACTIVITY
from steward_common.settingspec import SettingError, secret_file
from steward_common.urls import redact_url, userinfo

log = logging.getLogger(__name__)

GPU_SERIES = POD_ACTIVITY
CPU_SERIES = 'container_cpu_usage_seconds_total{container!="", image!=""}'
# Label that tells the sample count apart from the average in the combined GPU query, and Prometheus'
# clock apart from the pods' maxima in the recent query.
STAT_LABEL = "stat"
CLOCK_STAT = "clock"
# Tells each pod's newest sample time apart in the recent query.
NEWEST_STAT = "newest"


class _NonFinite(ValueError):
    """A NaN or infinite sample: its pod is unknown, the rest of the answer stands."""


def recent_query(window_seconds: int) -> str:
    """Each pod's highest activity over the recent window, the time of its newest sample, and Prometheus'
    evaluation time (one query)."""
    sel = f"{GPU_SERIES}[{window_seconds}s]"
    newest = f"max by (namespace, pod) (timestamp({GPU_SERIES}))"
    newest = f'label_replace({newest}, "{STAT_LABEL}", "{NEWEST_STAT}", "", "")'
    clock = f'label_replace(vector(time()), "{STAT_LABEL}", "{CLOCK_STAT}", "", "")'
    return f"max by (namespace, pod) (max_over_time({sel})) or {newest} or {clock}"


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


def _regex(values: Iterable[str]) -> str:
    """A PromQL string holding a regular expression matching exactly these values."""
    pattern = "|".join(re.escape(v) for v in sorted(set(values)))
    return '"' + pattern.replace("\\", "\\\\").replace('"', '\\"') + '"'


def activity_samples_query(pods: Iterable[ObjectKey], seconds: int) -> str:
    """The raw samples (each with its own time) of these pods' recorded activity over the last `seconds`:
    one query for many pods (the caller keeps only the exact namespace/pod pairs)."""
    keys = list(pods)
    matchers = (
        f"{NAMESPACE_LABEL}=~{_regex(k.namespace for k in keys)}, {POD_LABEL}=~{_regex(k.name for k in keys)}"
    )
    return f"{GPU_SERIES}{{{matchers}}}[{seconds}s]"


def coverage(count: float, rule_interval: float, window_seconds: int) -> float:
    """Fraction of the window covered by samples of a series recorded every rule_interval seconds."""
    return min(1.0, count * rule_interval / window_seconds)


def _value(sample: Mapping[str, Any], query: str) -> float:
    try:
        value = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise PrometheusUnavailable(f"unparsable sample {sample!r} for {query!r}") from e
    if not math.isfinite(value):
        # The recorded series is 0-1 by construction: NaN/Inf means something upstream is broken for this
        # pod. It is unknown (protected) and counted; the other pods' answers stand.
        raise _NonFinite(f"non-finite value {value} for {sample.get('metric')} in {query!r}")
    return value


def _key(sample: Mapping[str, Any], query: str) -> ObjectKey:
    metric = sample.get("metric") or {}
    ns, pod = metric.get(NAMESPACE_LABEL), metric.get(POD_LABEL)
    if not ns or not pod:
        raise PrometheusUnavailable(f"sample without namespace/pod labels {metric!r} for {query!r}")
    return ObjectKey(str(ns), str(pod))


def _pod_values(
    result: list[dict[str, Any]], query: str, bad: set[ObjectKey], stat: str | None = None
) -> dict[ObjectKey, float]:
    """Value per pod of the samples whose stat label is `stat`; a non-finite one puts its pod in `bad`."""
    values: dict[ObjectKey, float] = {}
    for sample in result:
        if (sample.get("metric") or {}).get(STAT_LABEL) != stat:
            continue
        key = _key(sample, query)
        try:
            values[key] = _value(sample, query)
        except _NonFinite as e:
            log.warning("%s: pod %s unknown", e, key)
            bad.add(key)
    return values


def parse_gpu_result(
    result: list[dict[str, Any]],
    query: str,
    window_seconds: int,
    rule_interval: float,
    bad: set[ObjectKey] | None = None,
) -> dict[ObjectKey, PodUsage]:
    """Pods with both an average and a sample count; anything else stays unknown (absent)."""
    bad = set() if bad is None else bad
    averages = _pod_values(result, query, bad)
    counts = _pod_values(result, query, bad, "count")
    return {
        key: PodUsage(gpu_activity=avg, coverage=coverage(counts[key], rule_interval, window_seconds))
        for key, avg in averages.items()
        if key in counts and key not in bad
    }


def parse_cpu_result(
    result: list[dict[str, Any]], query: str, bad: set[ObjectKey] | None = None
) -> dict[ObjectKey, float]:
    return _pod_values(result, query, set() if bad is None else bad)


def parse_recent_result(
    result: list[dict[str, Any]], query: str, bad: set[ObjectKey], max_age: float = math.inf
) -> tuple[dict[ObjectKey, float], float]:
    """(recent maximum per pod, Prometheus' evaluation time as a Unix timestamp).

    A pod whose newest sample is missing or more than max_age seconds old at that time is left out: its
    recent usage is unknown, so it is protected.
    """
    clock = next((s for s in result if (s.get("metric") or {}).get(STAT_LABEL) == CLOCK_STAT), None)
    if clock is None:
        raise PrometheusUnavailable(f"no {CLOCK_STAT} sample in the answer to {query!r}")
    try:
        at = _value(clock, query)
    except _NonFinite as e:
        raise PrometheusUnavailable(str(e)) from e
    maxima = _pod_values(result, query, bad)
    newest = _pod_values(result, query, bad, NEWEST_STAT)
    fresh: dict[ObjectKey, float] = {}
    for key, value in maxima.items():
        age = at - newest[key] if key in newest else math.inf
        if age > max_age:
            log.info("pod %s: newest sample %.0f s old (over %g s): recent usage unknown", key, age, max_age)
            continue
        fresh[key] = value
    return fresh, at


# A range answer, decoded by type: each series' values stay raw bytes until the caller reads that series.
class _RangeSeries(msgspec.Struct):
    metric: dict[str, str] = {}
    values: msgspec.Raw = msgspec.Raw(b"[]")


class _Matrix(msgspec.Struct):
    result: list[_RangeSeries]


class _RangeAnswer(msgspec.Struct):
    status: str
    data: _Matrix | None = None
    error: str = ""


_RANGE_ANSWER = msgspec.json.Decoder(_RangeAnswer)
_POINTS = msgspec.json.Decoder(list[tuple[float, str]])
_EMPTY_SERIES = _RangeSeries()
# One series of a range answer: its labels and its [time, "value"] pairs (times not yet checked finite).
RangeSeries = tuple[dict[str, str], list[tuple[float, str]]]


def _stamp_problem(stamp: Any) -> str | None:
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
        return f"time {stamp!r:.40} is not a finite number"
    return None


def point_problem(point: Any) -> str | None:
    """What is wrong with one [time, "value"] pair of an answer (None: nothing). The value is left as text:
    a non-finite one means something per reader (a pod unknown, or an unreadable history)."""
    if not isinstance(point, list) or len(point) != 2:
        return f"sample {point!r:.60} is not a [time, value] pair"
    if not isinstance(point[1], str):
        return f"sample value {point[1]!r:.40} is not text"
    return _stamp_problem(point[0])


def answer_problem(result: Any) -> str | None:
    """What is wrong with an answer's data.result (None: a vector or matrix of well-formed series): each
    series an object whose labels are an object of text, with one pair (`value`) or a list of pairs
    (`values`: each checked by its reader, which walks them anyway)."""
    if not isinstance(result, list):
        return f"not a vector or matrix: {result!r:.200}"
    for series in result:
        if not isinstance(series, dict):
            return f"series {series!r:.60} is not an object"
        labels = series.get("metric", {})
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            return f"labels {labels!r:.100} are not an object of text"
        if "value" in series:
            problem = point_problem(series["value"])
            if problem is not None:
                return problem
        elif not isinstance(series.get("values"), list):
            return f"series {labels!r:.100} has neither a value nor a list of values"
    return None


@dataclass(frozen=True)
class PrometheusCredentials:
    """How the adapter authenticates to Prometheus; read from files so no secret sits in a flag."""

    bearer_token: str | None = None
    basic_auth: tuple[str, str] | None = None
    ca_file: str | None = None

    def secrets(self) -> tuple[str, ...]:
        found = [self.bearer_token or "", *(self.basic_auth or ("", ""))]
        return tuple(x for x in found if x)


# The largest answer read: an instant answer carries one sample per pod and statistic (about 2 MB at
# 10,000 pods); a range answer (the backtest) up to 240 per series.
MAX_ANSWER_BYTES = 64 * 2**20
MAX_RANGE_ANSWER_BYTES = 512 * 2**20


def read_credentials(
    bearer_token_file: str | None, basic_auth_file: str | None, ca_file: str | None
) -> PrometheusCredentials:
    """The credentials for Prometheus from their files (run's and backtest's flags of the same names),
    read once; SettingError names the flag, never the content."""
    token = basic = None
    if bearer_token_file:
        token = secret_file("--prometheus-bearer-token-file", bearer_token_file)
    if basic_auth_file:
        flag = "--prometheus-basic-auth-file"
        user, sep, password = secret_file(flag, basic_auth_file).partition(":")
        if not sep or not user or not password:
            raise SettingError(f"{flag}: expected one line 'user:password'")
        basic = (user, password)
    if token and basic:
        raise SettingError(
            "--prometheus-bearer-token-file and --prometheus-basic-auth-file exclude each other"
        )
    if ca_file:
        if not Path(ca_file).is_file():
            raise SettingError(f"--prometheus-ca-file: {ca_file} is not a readable file")
        try:
            ssl.create_default_context(cafile=ca_file)
        except (ssl.SSLError, OSError) as e:
            raise SettingError(f"--prometheus-ca-file: {ca_file} holds no usable PEM certificate: {e}") from e
    return PrometheusCredentials(token, basic, ca_file)


class PrometheusAdapter:
    """Reads the recorded GPU series and cAdvisor CPU usage for a pass.

    Every query ends by one deadline (`timeout` seconds: connect, headers and body together), reads at most
    MAX_ANSWER_BYTES (MAX_RANGE_ANSWER_BYTES for range queries) and follows no redirect
    (automator/prom_http.py).
    """

    def __init__(
        self,
        url: str,
        timeout: float = 10.0,
        rule_interval: float = 30.0,
        observe_query: Callable[[float], None] | None = None,
        credentials: PrometheusCredentials | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        creds = credentials or PrometheusCredentials()
        # ValueError, showing no userinfo, for a URL that is not http(s) with a host
        self._endpoint = Endpoint.of(url, creds.bearer_token, creds.basic_auth, creds.ca_file)
        # What an error text must never carry: the URL's userinfo and the credentials' values.
        self._secrets = tuple(x for x in userinfo(url) or () if x) + creds.secrets()
        self.url = redact_url(url)
        self.timeout = timeout
        self.max_answer_bytes = max_answer_bytes
        self.max_range_answer_bytes = max(max_answer_bytes, MAX_RANGE_ANSWER_BYTES)
        self.rule_interval = rule_interval
        self._observe = observe_query
        self.queries_last_call = 0
        self.queries_total = 0  # every query since the adapter was made (the backtest reports it)
        # Answers kept by (query, evaluation time) while the caller wants them (the backtest, for one step:
        # the policies of a sweep ask the same queries at the same time, and Prometheus answers them once).
        # A failed query is kept as its failure.
        self.answers: dict[tuple[str, float], list[dict[str, Any]] | PrometheusUnavailable] | None = None
        self.nonfinite_last_call = 0
        self.clock_skew_seconds: float | None = None

    def _query(self, expr: str, what: str, at: datetime | float | None) -> list[dict[str, Any]]:
        stamp = at.timestamp() if isinstance(at, datetime) else at
        params = {"query": expr}
        if stamp is not None:
            params["time"] = f"{stamp:.3f}"
        if self.answers is None or stamp is None:
            return self._ask(what, "/api/v1/query", params, self.max_answer_bytes)
        key = (expr, stamp)
        if key not in self.answers:
            try:
                self.answers[key] = self._ask(what, "/api/v1/query", params, self.max_answer_bytes)
            except PrometheusUnavailable as e:
                # remembered too: the other policies of the step get the failure, not another wait
                self.answers[key] = e
        found = self.answers[key]
        if isinstance(found, PrometheusUnavailable):
            raise PrometheusUnavailable(found.reason)
        return found

    def query_at(self, expr: str, what: str, at: float) -> list[dict[str, Any]]:
        """One instant query evaluated at `at` (Unix seconds); PrometheusUnavailable on any failure."""
        return self._query(expr, what, at)

    def query_range(self, expr: str, start: int, end: int, step: int, what: str) -> Iterator[RangeSeries]:
        """A range query (whole seconds): each series' labels and [time, "value"] pairs, decoded one series
        at a time as the caller iterates (the answer's body is held until then, never the parsed JSON of
        every series at once). PrometheusUnavailable, naming the query, for a failure or an answer that is
        not a matrix of such series. The caller keeps (end - start) / step small: Prometheus refuses more
        than 11,000 points per series."""
        params = {"query": expr, "start": str(start), "end": str(end), "step": f"{step}s"}
        body = self._body(what, "/api/v1/query_range", params, self.max_range_answer_bytes)
        try:
            answer = _RANGE_ANSWER.decode(body)
        except msgspec.MsgspecError as e:
            raise self._unreadable(what, expr, str(e)) from None
        del body
        if answer.status != "success" or answer.data is None:
            raise self._unreadable(what, expr, f"status {answer.status!r}: {answer.error:.200}")
        return self._series(what, expr, answer.data.result)

    def _series(self, what: str, expr: str, result: list[_RangeSeries]) -> Iterator[RangeSeries]:
        for i, series in enumerate(result):
            try:
                points = _POINTS.decode(series.values)
            except msgspec.MsgspecError as e:
                raise self._unreadable(what, expr, f"series {series.metric!r:.100}: {e}") from None
            result[i] = _EMPTY_SERIES  # read: its share of the body is no longer needed
            yield series.metric, points

    def _unreadable(self, what: str, expr: str, problem: str) -> PrometheusUnavailable:
        shown = expr if len(expr) <= 200 else expr[:200] + "..."
        return PrometheusUnavailable(
            f"{what} query to {self.url} unreadable ({shown!r}): {self._scrub(problem)}"
        )

    def _body(self, what: str, path: str, params: dict[str, str], max_bytes: int) -> bytes:
        self.queries_last_call += 1
        self.queries_total += 1
        start = time.monotonic()
        try:
            return get_body(self._endpoint, path, params, self.timeout, max_bytes)
        except HttpFailure as e:
            raise self._failed(what, e) from None
        finally:
            if self._observe is not None:
                self._observe(time.monotonic() - start)

    def _failed(self, what: str, e: HttpFailure) -> PrometheusUnavailable:
        kind = f"timed out after {self.timeout:g}s" if e.timed_out else "failed"
        return PrometheusUnavailable(f"{what} query to {self.url} {kind}: {self._scrub(e.reason)}")

    def _ask(self, what: str, path: str, params: dict[str, str], max_bytes: int) -> list[dict[str, Any]]:
        body = self._body(what, path, params, max_bytes)
        try:
            result = result_of(body)
        except HttpFailure as e:
            raise self._failed(what, e) from None
        problem = answer_problem(result)
        if problem is not None:
            raise self._unreadable(what, params["query"], problem)
        return result  # type: ignore[no-any-return]

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def usage(self, windows: Windows, at: When = None, recent_seconds: int = 300, now: When = None) -> Usage:
        """Usage of every pod in `windows` that Prometheus knows; a pod it lacks is left out (unknown).

        at: evaluation time of every query (default: Prometheus' own now, read by the first query), so all
        windows end together. now: the caller's clock; clock_skew_seconds is then Prometheus' time minus it.
        Raises PrometheusUnavailable on any error, timeout, non-success or malformed answer.
        """
        self.queries_last_call = 0
        self.nonfinite_last_call = 0
        self.clock_skew_seconds = None
        if not windows:
            return {}
        if any(w.gpu_seconds <= 0 for w in windows.values()):
            raise ValueError("GPU window must be > 0 s (a [0s] window reads as idle)")
        bad: set[ObjectKey] = set()
        q = recent_query(recent_seconds)
        answer = self._query(q, f"recent {recent_seconds}s", at)
        recent, prom_time = parse_recent_result(answer, q, bad, FRESH_RULE_INTERVALS * self.rule_interval)
        if now is not None:
            self.clock_skew_seconds = prom_time - now.timestamp()
        gpu_by_window: dict[int, dict[ObjectKey, PodUsage]] = {}
        for seconds in sorted({w.gpu_seconds for w in windows.values()}):
            q = gpu_query(seconds)
            gpu_by_window[seconds] = parse_gpu_result(
                self._query(q, f"GPU {seconds}s", prom_time), q, seconds, self.rule_interval, bad
            )
        cpu_by_window: dict[int, dict[ObjectKey, float]] = {}
        for seconds in sorted({w.cpu_seconds for w in windows.values() if w.cpu_seconds > 0}):
            q = cpu_query(seconds)
            cpu_by_window[seconds] = parse_cpu_result(self._query(q, f"CPU {seconds}s", prom_time), q, bad)

        usage: dict[ObjectKey, PodUsage] = {}
        for key, window in windows.items():
            gpu = gpu_by_window[window.gpu_seconds].get(key)
            if gpu is None or key in bad:
                continue
            cpu = cpu_by_window[window.cpu_seconds].get(key) if window.cpu_seconds > 0 else None
            usage[key] = PodUsage(gpu.gpu_activity, gpu.coverage, cpu, recent.get(key))
        self.nonfinite_last_call = len(bad)
        log.debug("usage: %d pods known of %d, %d queries", len(usage), len(windows), self.queries_last_call)
        return usage

    def activity_after(
        self, pods: Iterable[ObjectKey], start: float, seconds: int
    ) -> dict[ObjectKey, list[tuple[float, float]]]:
        """Each pod's recorded activity samples (time, value) in (start, start + seconds], in time order; a
        pod without samples is left out, a non-finite sample is dropped (unknown, not busy)."""
        keys = set(pods)
        if not keys:
            return {}
        q = activity_samples_query(keys, seconds)
        found: dict[ObjectKey, list[tuple[float, float]]] = {}
        for series in self._query(q, f"activity {seconds}s", start + seconds):
            key = _key(series, q)
            if key not in keys:
                continue
            values = series.get("values") or []
            try:
                problem = next(filter(None, map(point_problem, values)), None)
                if problem is not None:
                    raise ValueError(problem)
                points = [(float(t), float(v)) for t, v in values]
            except ValueError as e:
                raise PrometheusUnavailable(f"unparsable samples for {key} in {q!r:.300}: {e}") from e
            found[key] = sorted(p for p in points if math.isfinite(p[1]))
        return found

    # --- KEDA: the cache's one query per signal base and window (automator/keda/signals.py) ---

    def keda_query(self, expr: str) -> list[dict[str, Any]]:
        """One KEDA query at Prometheus's now; PrometheusUnavailable on any error (never an empty answer)."""
        return self._query(expr, "KEDA", None)


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
