"""A stand-in for KEDA's polling loop and the HorizontalPodAutoscaler it drives, for `make demo` only.

Not KEDA: the demo has no cluster to run KEDA in. It reads a ScaledObject with one `metrics-api` trigger
and its TriggerAuthentication (deploy/demo/keda.yaml) and does, every `pollingInterval`, what KEDA's
metrics-api scaler and the HPA controller would do with them:

- KEDA: a plain GET of the trigger's `url` with the TriggerAuthentication's credentials (`authMode:
  bearer`: `Authorization: Bearer <token>`), the scaler's 3 s timeout, only HTTP 200 accepted, the number
  at `valueLocation` (a top-level key here; NaN, Inf and negatives read as 0). A failed GET is retried once
  (KEDA refreshes the scaler and asks again); a poll whose retry fails too is one failure. Once the
  consecutive failures pass `fallback.failureThreshold` (KEDA: NumberOfFailures > FailureThreshold),
  KEDA hands the HPA the metric that makes it ask for `fallback.replicas`: target x replicas for
  AverageValue (KEDA's doFallback); for Value (fallback for Value triggers since KEDA 2.18), the value
  whose Value formula gives that count, target x replicas / current replicas. Before that, and without a
  fallback, the HPA gets no metric and keeps its size.
- The HPA (pkg/controller/podautoscaler, replica_calculator.go and horizontal.go), `hpa_replicas`: the
  metric and target in milli-units; `Value`: ratio = value / target, desired = ceil(ratio x ready pods);
  `AverageValue`: ratio = value / (target x current replicas), desired = ceil(value / target); no change
  while |1 - ratio| <= tolerance (0.1); the recommendation stabilized over the ScaledObject's
  `advanced.horizontalPodAutoscalerConfig.behavior` windows (scale-up: the lowest recommendation of its
  window, 0 s by default; scale-down: the highest of its window, 300 s by default), then held to
  `minReplicaCount`..`maxReplicaCount`. A Deployment outside that range is brought into it first.
  The behaviour's rate policies (by default at most +100 % or +4 pods per 15 s up) are not applied: the
  demo's steps stay within them.
- The result is written to the Deployment's `spec.replicas` in the (fake) API server with a merge patch;
  its ReplicaSet controller then creates or deletes the pods.

The 0 <-> 1 activation (`activationTargetValue`) does not apply: the demo's minimum is 1.
"""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

MetricType = Literal["Value", "AverageValue"]
HTTP_TIMEOUT = 3.0  # KEDA_HTTP_DEFAULT_TIMEOUT: 3000 ms
TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
DEFAULT_SCALE_DOWN_WINDOW = 300.0  # the HPA's default scale-down stabilization
API_TIMEOUT = 10.0


class ScaledObjectError(ValueError):
    """The ScaledObject or TriggerAuthentication is not one the stand-in can play: names the field."""


# --- the HPA's arithmetic (pure) ------------------------------------------------------------------------


def milli(value: float) -> int:
    """A number as the milli-quantity KEDA hands the HPA (GenerateMetricInMili: truncated)."""
    return int(value * 1000)


def raw_replicas(
    metric_type: MetricType,
    value: float,
    target: float,
    current: int,
    ready: int,
    tolerance: float = TOLERANCE,
) -> int:
    """The HPA's replica count for one external metric, before stabilization and limits."""
    usage, goal = milli(value), milli(target)
    if goal <= 0:
        raise ScaledObjectError("targetValue: must be above 0")
    if metric_type == "Value":  # GetExternalMetricReplicas
        ratio = usage / goal
        if current == 0:
            return math.ceil(ratio)
        if abs(1.0 - ratio) <= tolerance:
            return current
        return math.ceil(ratio * ready)
    # AverageValue: GetExternalPerPodMetricReplicas
    ratio = usage / (goal * current) if current else math.inf
    if abs(1.0 - ratio) > tolerance:
        return math.ceil(usage / goal)
    return current


@dataclass
class Hpa:
    """The HPA's state for one ScaledObject: its recommendations, stabilized as horizontal.go does."""

    min_replicas: int
    max_replicas: int
    scale_down_window: float = DEFAULT_SCALE_DOWN_WINDOW
    scale_up_window: float = 0.0
    recommendations: list[tuple[float, int]] = field(default_factory=list)

    def _stabilize(self, now: float, current: int, desired: int) -> int:
        up, down = desired, desired
        for at, rec in self.recommendations:
            if at > now - self.scale_up_window:
                up = min(up, rec)
            if at > now - self.scale_down_window:
                down = max(down, rec)
        keep = max(self.scale_up_window, self.scale_down_window)
        self.recommendations = [(at, r) for at, r in self.recommendations if at > now - keep]
        self.recommendations.append((now, desired))
        return min(max(current, up), down)

    def replicas(self, now: float, current: int, desired: int | None) -> int:
        """The replica count for a reconcile at `now`; `desired` None: no metric (the HPA keeps its size)."""
        if current > self.max_replicas:
            return self.max_replicas
        if current < self.min_replicas:
            return self.min_replicas
        if desired is None:
            return current
        stable = self._stabilize(now, current, desired)
        return min(max(stable, self.min_replicas), self.max_replicas)


def hpa_replicas(
    hpa: Hpa,
    now: float,
    metric_type: MetricType,
    value: float | None,
    target: float,
    current: int,
    ready: int,
    tolerance: float = TOLERANCE,
) -> int:
    """One HPA reconcile: the replica count for `value` (None: no metric) at `now`."""
    if current > hpa.max_replicas or current < hpa.min_replicas or value is None:
        return hpa.replicas(now, current, None)
    return hpa.replicas(now, current, raw_replicas(metric_type, value, target, current, ready, tolerance))


def fallback_value(metric_type: MetricType, target: float, replicas: int, current: int) -> float:
    """The metric KEDA hands the HPA in fallback, so that it asks for `replicas`."""
    if metric_type == "AverageValue" or current <= 0:
        return target * replicas
    return target * replicas / current


# --- the ScaledObject -----------------------------------------------------------------------------------


def _number(obj: Mapping[str, Any], key: str, path: str, default: float | None = None) -> float:
    raw = obj.get(key, default)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ScaledObjectError(f"{path}.{key}: expected a number, got {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ScaledObjectError(f"{path}.{key}: expected a finite number >= 0, got {raw!r}")
    return value


@dataclass(frozen=True)
class ScaledObject:
    name: str
    namespace: str
    deployment: str
    url: str
    metric_type: MetricType
    target: float
    polling_interval: float
    min_replicas: int
    max_replicas: int
    failure_threshold: int | None
    fallback_replicas: int | None
    scale_down_window: float
    scale_up_window: float
    bearer_secret: tuple[str, str] | None  # (Secret name, key) of the TriggerAuthentication's token

    @property
    def profile(self) -> str:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.url).query)
        return (query.get("profile") or query.get("signal") or ["?"])[0]

    @classmethod
    def from_manifests(cls, docs: Sequence[Mapping[str, Any]]) -> ScaledObject:
        """The one ScaledObject of `docs` and the TriggerAuthentication its trigger names."""
        objs = [d for d in docs if d.get("kind") == "ScaledObject"]
        if len(objs) != 1:
            raise ScaledObjectError(f"expected one ScaledObject, found {len(objs)}")
        so = objs[0]
        meta, spec = so.get("metadata") or {}, so.get("spec") or {}
        target_ref = spec.get("scaleTargetRef") or {}
        if target_ref.get("kind", "Deployment") != "Deployment":
            raise ScaledObjectError("spec.scaleTargetRef.kind: the stand-in scales Deployments only")
        triggers = spec.get("triggers") or []
        if len(triggers) != 1 or triggers[0].get("type") != "metrics-api":
            raise ScaledObjectError("spec.triggers: expected one metrics-api trigger")
        trigger = triggers[0]
        md = trigger.get("metadata") or {}
        if md.get("valueLocation") != "value" or md.get("format", "json") != "json":
            raise ScaledObjectError("spec.triggers[0].metadata: expected format json, valueLocation value")
        metric_type = trigger.get("metricType", "AverageValue")
        if metric_type not in ("Value", "AverageValue"):
            raise ScaledObjectError(f"spec.triggers[0].metricType: {metric_type!r}")
        bearer = None
        if md.get("authMode"):
            if md["authMode"] != "bearer":
                raise ScaledObjectError("spec.triggers[0].metadata.authMode: the stand-in speaks bearer only")
            ref = (trigger.get("authenticationRef") or {}).get("name")
            auths = [
                d
                for d in docs
                if d.get("kind") == "TriggerAuthentication" and (d.get("metadata") or {}).get("name") == ref
            ]
            if not auths:
                raise ScaledObjectError(
                    f"spec.triggers[0].authenticationRef: no TriggerAuthentication {ref!r}"
                )
            refs = (auths[0].get("spec") or {}).get("secretTargetRef") or []
            targets = [t for t in refs if t.get("parameter") == "token"]
            if not targets:
                raise ScaledObjectError("TriggerAuthentication spec.secretTargetRef: no `token` parameter")
            bearer = (str(targets[0]["name"]), str(targets[0]["key"]))
        fallback = spec.get("fallback")
        hpa_config = (spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}
        behavior = hpa_config.get("behavior") or {}
        down = (behavior.get("scaleDown") or {}).get("stabilizationWindowSeconds", DEFAULT_SCALE_DOWN_WINDOW)
        up = (behavior.get("scaleUp") or {}).get("stabilizationWindowSeconds", 0)
        minimum = int(_number(spec, "minReplicaCount", "spec", 0))
        maximum = int(_number(spec, "maxReplicaCount", "spec", 100))
        if minimum < 1 or maximum < minimum:
            raise ScaledObjectError("spec.minReplicaCount, maxReplicaCount: expected 1 <= min <= max")
        return cls(
            name=str(meta.get("name")),
            namespace=str(meta.get("namespace") or "default"),
            deployment=str(target_ref.get("name")),
            url=str(md.get("url")),
            metric_type=metric_type,
            target=_number(md, "targetValue", "spec.triggers[0].metadata"),
            polling_interval=_number(spec, "pollingInterval", "spec", 30),
            min_replicas=minimum,
            max_replicas=maximum,
            failure_threshold=(
                int(_number(fallback, "failureThreshold", "spec.fallback")) if fallback else None
            ),
            fallback_replicas=int(_number(fallback, "replicas", "spec.fallback")) if fallback else None,
            scale_down_window=float(down),
            scale_up_window=float(up),
            bearer_secret=bearer,
        )


# --- the loop -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Poll:
    """One poll: what the endpoint answered, and what the HPA did with it."""

    at: float  # time.monotonic()
    current: int
    replicas: int
    value: float | None = None  # the endpoint's value, when it answered 200
    unit: str = ""
    error: str = ""  # why the poll failed (HTTP status and the endpoint's reason)
    failures: int = 0  # consecutive failed polls, this one included
    fallback: bool = False  # the HPA got the fallback metric
    raw: int | None = None  # the HPA's recommendation before stabilization and limits

    @property
    def answer(self) -> tuple[Any, ...]:
        """What a reader of the story needs to know changed."""
        return (self.replicas, self.error == "", self.fallback, self.replicas != self.current)


@dataclass
class KedaStandIn:
    """Polls the endpoint every polling interval in a thread and scales the Deployment (see the module)."""

    scaled_object: ScaledObject
    url: str  # the trigger's URL as reachable here
    api_url: str  # the (fake) API server
    token: str | None = None
    clock: Callable[[], float] = time.monotonic
    polls: list[Poll] = field(default_factory=list)
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        so = self.scaled_object
        self.hpa = Hpa(so.min_replicas, so.max_replicas, so.scale_down_window, so.scale_up_window)

    # --- I/O ---

    def _get_once(self) -> tuple[float, str]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        req = urllib.request.Request(self.url, headers=headers, method="GET")
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as r:
            body = json.load(r)
        raw = body["value"]  # valueLocation: value
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ValueError(f"value is not a number: {raw!r}")
        value = float(raw)
        return (value if math.isfinite(value) and value > 0 else 0.0), str(body.get("unit", ""))

    def _get(self) -> tuple[float | None, str, str]:
        """(value, unit, "") or (None, "", why): one GET, retried once on any failure as KEDA does."""
        why = ""
        for _ in range(2):
            try:
                value, unit = self._get_once()
                return value, unit, ""
            except urllib.error.HTTPError as e:
                try:
                    reason = str(json.loads(e.read() or b"{}").get("error", ""))
                except ValueError:
                    reason = ""
                why = f"HTTP {e.code}" + (f" {reason}" if reason else "")
            except (OSError, ValueError, KeyError, TypeError) as e:
                why = type(e).__name__
        return None, "", why

    def _api(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/merge-patch+json"} if body is not None else {}
        req = urllib.request.Request(self.api_url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=API_TIMEOUT) as r:
            return json.load(r)

    def _deployment_path(self) -> str:
        so = self.scaled_object
        return f"/apis/apps/v1/namespaces/{so.namespace}/deployments/{so.deployment}"

    def _replicas_and_ready(self) -> tuple[int, int]:
        deployment = self._api("GET", self._deployment_path())
        current = int((deployment.get("spec") or {}).get("replicas", 1))
        labels = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = urllib.parse.quote(",".join(f"{k}={v}" for k, v in sorted(labels.items())))
        namespace = self.scaled_object.namespace
        pods = self._api("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
        ready = sum(
            1
            for p in pods.get("items") or []
            if (p.get("status") or {}).get("phase") == "Running"
            and p["metadata"].get("deletionTimestamp") is None  # the kubelet marks a terminating pod unready
            and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        )
        return current, ready

    # --- one poll ---

    def poll(self) -> Poll:
        so = self.scaled_object
        value, unit, error = self._get()
        current, ready = self._replicas_and_ready()
        now = self.clock()
        fallback = False
        metric = value
        if error:
            self.failures += 1
            threshold, replicas = so.failure_threshold, so.fallback_replicas
            if threshold is not None and replicas is not None and self.failures > threshold:
                fallback = True
                metric = fallback_value(so.metric_type, so.target, replicas, current)
        else:
            self.failures = 0
        raw = None
        if metric is not None and so.min_replicas <= current <= so.max_replicas:
            raw = raw_replicas(so.metric_type, metric, so.target, current, ready)
        replicas = hpa_replicas(self.hpa, now, so.metric_type, metric, so.target, current, ready)
        if replicas != current:
            self._api("PATCH", self._deployment_path(), {"spec": {"replicas": replicas}})
        failures = self.failures if error else 0
        result = Poll(now, current, replicas, value, unit, error, failures, fallback, raw)
        with self._lock:
            self.polls.append(result)
        return result

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except (OSError, ValueError, KeyError) as e:  # the API server busy: ask at the next interval
                with self._lock:
                    self.polls.append(Poll(self.clock(), -1, -1, error=f"API server: {type(e).__name__}"))
            self._stop.wait(self.scaled_object.polling_interval)

    def start(self) -> KedaStandIn:
        self._thread = threading.Thread(target=self._run, name="keda-stand-in", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=HTTP_TIMEOUT * 2 + API_TIMEOUT)

    def history(self) -> list[Poll]:
        with self._lock:
            return list(self.polls)


# --- the story's words ------------------------------------------------------------------------------------

SIGNAL_WORDS = {"percent": 100.0}  # the endpoint's unit -> the divisor that shows it as a ratio


def describe(so: ScaledObject, poll: Poll) -> str:
    """A poll as the demo tells it."""
    head = f"KEDA (metrics-api, {so.profile}): {so.namespace}/{so.deployment}"
    if poll.error:
        threshold = so.failure_threshold
        if poll.fallback:
            what = f"fallback to {so.fallback_replicas} replicas (failure {poll.failures}, over {threshold})"
        else:
            left = "" if threshold is None else f"failure {poll.failures} of {threshold}"
            what = "the HPA keeps its size" + (f" ({left} before the fallback)" if left else "")
        return f"{head} endpoint answered {poll.error}: {what} -> {_step(so, poll)}"
    assert poll.value is not None
    divisor = SIGNAL_WORDS.get(poll.unit, 1.0)
    value, target = poll.value / divisor, so.target / divisor
    word = "over" if poll.value > so.target else "under" if poll.value < so.target else "at"
    signal = "GPU utilization" if poll.unit == "percent" else f"value ({poll.unit})"
    return f"{head} {signal} {value:.2f} {word} target {target:.2f} -> {_step(so, poll)}"


def _replicas(n: int) -> str:
    return f"{n} replica" + ("" if n == 1 else "s")


def _step(so: ScaledObject, poll: Poll) -> str:
    if poll.replicas != poll.current:
        return f"{poll.current} to {_replicas(poll.replicas)}"
    held = ""
    if poll.raw is not None and poll.raw < poll.replicas and poll.replicas > so.min_replicas:
        held = f" (wants {poll.raw}; scale-down stabilization window {so.scale_down_window:g} s)"
    elif poll.raw is not None and poll.raw > poll.replicas and poll.replicas < so.max_replicas:
        held = f" (wants {poll.raw}; scale-up stabilization window {so.scale_up_window:g} s)"
    return f"stays at {_replicas(poll.replicas)}{held}"
