"""`gpu-automator keda scaledobject`: a ready ScaledObject (and TriggerAuthentication) for a workload and
profile, for either trigger type (pure: builds plain dicts; the CLI prints them as YAML)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode

from automator.keda.auth import API_KEY_HEADER
from automator.keda.request import METRICS_PATH, VALUE_LOCATION, Question

DEFAULT_URL: Final = "http://gpu-steward-automator.gpu-steward.svc:8080"
DEFAULT_SCALER_ADDRESS: Final = "gpu-steward-automator.gpu-steward.svc:9000"
AUTH_MODES: Final = ("none", "bearer", "apiKey", "basic")
TRIGGERS: Final = ("metrics-api", "external")
# The keys of the Secret the TriggerAuthentication reads, per mode (KEDA's metrics-api parameter names).
SECRET_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "bearer": ("token",),
    "apiKey": ("apiKey",),
    "basic": ("username", "password"),
}


@dataclass(frozen=True)
class Options:
    trigger: str = "metrics-api"
    url: str = DEFAULT_URL
    scaler_address: str = DEFAULT_SCALER_ADDRESS
    auth: str = "bearer"
    secret: str = "gpu-steward-keda"
    min_replicas: int = 1
    max_replicas: int = 10
    fallback_replicas: int | None = None  # default: min_replicas (at least 1)
    scale_target: tuple[str, str] | None = None  # (kind, name): required for a selector workload


def _params(q: Question, explicit: dict[str, str]) -> dict[str, str]:
    wl = q.workload
    params = {"namespace": wl.namespace}
    params[wl.kind] = explicit.get(wl.kind, wl.name)
    if q.profile:
        params["profile"] = q.profile
    for key in ("signal", "aggregation", "window"):
        if explicit.get(key):
            params[key] = explicit[key]
    return params


def _target(q: Question, opts: Options) -> tuple[str, str]:
    if opts.scale_target is not None:
        return opts.scale_target
    if q.workload.kind == "deployment":
        return "Deployment", q.workload.name
    if q.workload.kind == "statefulset":
        return "StatefulSet", q.workload.name
    raise ValueError("--scale-target KIND/NAME is required with --selector")


def _check(q: Question, opts: Options) -> None:
    if opts.trigger not in TRIGGERS:
        raise ValueError(f"--trigger: expected one of {', '.join(TRIGGERS)}")
    if opts.auth not in AUTH_MODES:
        raise ValueError(f"--auth: expected one of {', '.join(AUTH_MODES)}")
    if q.target is None:
        raise ValueError("--target-value is required without a profile")
    if not 0 <= opts.min_replicas <= opts.max_replicas or opts.max_replicas < 1:
        raise ValueError("--min-replicas and --max-replicas: expected 0 <= min <= max, max >= 1")


def _trigger(q: Question, params: dict[str, str], opts: Options) -> dict[str, Any]:
    """The ScaledObject's trigger: metrics-api (a URL with the query) or external (the scaler's address)."""
    metadata: dict[str, str]
    if opts.trigger == "metrics-api":
        metadata = {
            "url": f"{opts.url.rstrip('/')}{METRICS_PATH}?{urlencode(params)}",
            "format": "json",
            "valueLocation": VALUE_LOCATION,
            "targetValue": f"{q.target:g}",
            "activationTargetValue": f"{q.activation or 0:g}",
        }
        if opts.auth != "none":
            metadata["authMode"] = opts.auth
            if opts.auth == "apiKey":
                metadata.update({"method": "header", "keyParamName": API_KEY_HEADER})
    else:
        metadata = {
            "scalerAddress": opts.scaler_address,
            **params,
            "targetValue": f"{q.target:g}",
            "activationThreshold": f"{q.activation or 0:g}",
        }
    return {"type": opts.trigger, "metricType": q.metric_type or "AverageValue", "metadata": metadata}


def _auth_documents(opts: Options, namespace: str) -> list[dict[str, Any]]:
    """The Secret template and the TriggerAuthentication that reads it."""
    keys = SECRET_KEYS[opts.auth]
    metadata = {"name": opts.secret, "namespace": namespace}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "stringData": {k: f"REPLACE-WITH-THE-{k.upper()}-THE-AUTOMATOR-ACCEPTS" for k in keys},
    }
    refs = [{"parameter": k, "name": opts.secret, "key": k} for k in keys]
    auth = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": dict(metadata),
        "spec": {"secretTargetRef": refs},
    }
    return [secret, auth]


def render(q: Question, explicit: dict[str, str], opts: Options) -> list[dict[str, Any]]:
    """[TriggerAuthentication, Secret template] (with auth) + [ScaledObject]; ValueError on bad options."""
    _check(q, opts)
    kind, name = _target(q, opts)
    ns = q.workload.namespace
    trigger = _trigger(q, _params(q, explicit), opts)
    docs: list[dict[str, Any]] = []
    if opts.auth != "none" and opts.trigger == "metrics-api":
        trigger["authenticationRef"] = {"name": opts.secret}
        docs += _auth_documents(opts, ns)
    fallback = opts.fallback_replicas if opts.fallback_replicas is not None else max(1, opts.min_replicas)
    docs.append(
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": f"{name}-gpu", "namespace": ns},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": name},
                "pollingInterval": 30,
                "minReplicaCount": opts.min_replicas,
                "maxReplicaCount": opts.max_replicas,
                # Data missing or stale: the endpoint answers 503 and KEDA holds this many replicas.
                "fallback": {"failureThreshold": 3, "replicas": fallback},
                "triggers": [trigger],
            },
        }
    )
    return docs
