"""`gpu-automator keda scaledobject`: a ready ScaledObject (and TriggerAuthentication) for a workload and
profile, for either trigger type (pure: builds plain dicts; the CLI prints them as YAML)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode

from automator.keda.auth import API_KEY_HEADER
from automator.keda.declared import SCALED_OBJECT_PARAM
from automator.keda.request import DNS1123_SUBDOMAIN, METRICS_PATH, VALUE_LOCATION, Question

DEFAULT_URL: Final = "http://gpu-steward-automator.gpu-steward.svc:8080"
# The KEDA HTTPS listener of deploy/components/keda-tls: where `--auth tls` points by default.
DEFAULT_TLS_URL: Final = "https://gpu-steward-automator.gpu-steward.svc:8443"
DEFAULT_SCALER_ADDRESS: Final = "gpu-steward-automator.gpu-steward.svc:9000"
AUTH_MODES: Final = ("none", "bearer", "apiKey", "basic", "tls")
TRIGGERS: Final = ("metrics-api", "external")
# KEDA's external scaler sends no per-call metadata (pkg/scalers/external_scaler.go): mutual TLS or nothing.
EXTERNAL_AUTH_MODES: Final = ("none", "tls")
# --auth by trigger when not given: a token for the metrics-api endpoint; none for the external scaler.
DEFAULT_AUTH: Final = {"metrics-api": "bearer", "external": "none"}
# KEDA releases, as (major, minor): the newest at this writing, and the first whose admission webhook accepts
# `fallback` with `metricType: Value` (earlier webhooks refuse it; KEDA without the webhook ignores fallback).
CURRENT_KEDA: Final = (2, 20)
VALUE_WITH_FALLBACK_KEDA: Final = (2, 18)
OLDEST_KEDA: Final = (2, 0)
# KEDA 2.20+ refuses longer ScaledObject names: the HPA it creates is keda-hpa-<name>, at most 63 characters.
MAX_NAME: Final = 54
# The keys of the Secret the TriggerAuthentication reads, per mode (KEDA's metrics-api parameter names).
SECRET_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "bearer": ("token",),
    "apiKey": ("apiKey",),
    "basic": ("username", "password"),
    # Mutual TLS: KEDA's client certificate and key, and the CA that signed the automator's certificate.
    "tls": ("cert", "key", "ca"),
}
# The same for the external trigger: its TriggerAuthentication parameters, as KEDA reads them.
EXTERNAL_TLS_KEYS: Final = ("caCert", "tlsClientCert", "tlsClientKey")


@dataclass(frozen=True)
class Options:
    trigger: str = "metrics-api"
    url: str = DEFAULT_URL
    scaler_address: str = DEFAULT_SCALER_ADDRESS
    auth: str | None = None  # None: DEFAULT_AUTH of the trigger
    secret: str = "gpu-steward-keda"
    min_replicas: int = 1
    max_replicas: int = 10
    fallback_replicas: int | None = None  # default: min_replicas (at least 1)
    scale_target: tuple[str, str] | None = None  # (kind, name): required for a selector workload
    keda_version: tuple[int, int] = CURRENT_KEDA  # the KEDA the objects must be accepted by
    tls: bool = False  # metrics-api: the automator's HTTPS listener (implied by auth tls)


def parse_keda_version(text: str) -> tuple[int, int]:
    """--keda-version MAJOR.MINOR[.PATCH] (2.0 or newer); ValueError naming the flag otherwise."""
    parts = text.strip().removeprefix("v").split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isascii() and p.isdigit() and len(p) <= 4 for p in parts):
        raise ValueError(f"--keda-version: expected MAJOR.MINOR such as 2.17, got {text[:20]!r}")
    version = (int(parts[0]), int(parts[1]))
    if not OLDEST_KEDA <= version < (3, 0):
        raise ValueError(f"--keda-version: expected a KEDA 2.x release, got {text[:20]!r}")
    return version


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


def auth_of(opts: Options) -> str:
    return opts.auth or DEFAULT_AUTH.get(opts.trigger, "none")


def _check(q: Question, opts: Options) -> None:
    if opts.trigger not in TRIGGERS:
        raise ValueError(f"--trigger: expected one of {', '.join(TRIGGERS)}")
    if auth_of(opts) not in AUTH_MODES:
        raise ValueError(f"--auth: expected one of {', '.join(AUTH_MODES)}")
    if opts.trigger == "external" and auth_of(opts) not in EXTERNAL_AUTH_MODES:
        raise ValueError(
            f"--auth {auth_of(opts)}: KEDA sends no tokens to external scalers (only a client certificate): "
            "use --auth tls (mutual TLS) or --auth none with --trigger external"
        )
    if q.target is None:
        raise ValueError("--target-value is required without a profile")
    if auth_of(opts) == "tls" and opts.trigger == "metrics-api" and not _url(opts).startswith("https://"):
        raise ValueError("--auth tls: --url must be the automator's HTTPS listener (https://...:8443)")
    if opts.tls and opts.trigger == "metrics-api" and not _url(opts).startswith("https://"):
        raise ValueError("--tls: --url must be the automator's HTTPS listener (https://...:8443)")
    if not 0 <= opts.min_replicas <= opts.max_replicas or opts.max_replicas < 1:
        raise ValueError("--min-replicas and --max-replicas: expected 0 <= min <= max, max >= 1")
    # The Secret's and the TriggerAuthentication's name: a Kubernetes object name, or the API refuses both.
    if len(opts.secret) > 253 or not DNS1123_SUBDOMAIN.fullmatch(opts.secret):
        raise ValueError(
            "--secret: expected an object name (lower-case letters, digits, '-' and '.', at most 253)"
        )


def _url(opts: Options) -> str:
    """The automator's base URL: with TLS chosen (--tls, or mutual TLS) and no URL of the user's, its HTTPS
    listener (the one `--keda-tls-only` leaves the KEDA routes on)."""
    chosen = opts.tls or auth_of(opts) == "tls"
    return DEFAULT_TLS_URL if chosen and opts.url == DEFAULT_URL else opts.url


def _metric_type(q: Question, params: dict[str, str], opts: Options) -> str:
    """The trigger's metricType for the target KEDA. Before 2.18 KEDA refuses `Value` next to a fallback,
    so the per-replica average becomes its equivalent under `AverageValue`: the HPA divides the metric by
    the current replicas, so `value = sum` gives desired = ceil(sum / target) = ceil(replicas x avg /
    target), Value's arithmetic over `avg` (per GPU: a replica of k GPUs needs k times the target)."""
    metric_type = q.metric_type or "AverageValue"
    if metric_type != "Value" or opts.keda_version >= VALUE_WITH_FALLBACK_KEDA:
        return metric_type
    if q.aggregation != "avg":
        raise ValueError(
            f"--keda-version {opts.keda_version[0]}.{opts.keda_version[1]}: KEDA before 2.18 refuses "
            f"metricType Value with a fallback, and aggregation {q.aggregation} has no AverageValue "
            "equivalent: use --aggregation avg, --metric-type AverageValue, or KEDA 2.18 or newer"
        )
    params["aggregation"] = "sum"
    return "AverageValue"


def _trigger(q: Question, params: dict[str, str], opts: Options, name: str) -> dict[str, Any]:
    """The ScaledObject's trigger: metrics-api (a URL with the query, and the ScaledObject's name, so that
    it is warming_up rather than not_declared until the next refresh lists it) or external (the scaler's
    address)."""
    metric_type = _metric_type(q, params, opts)
    metadata: dict[str, str]
    auth = auth_of(opts)
    if opts.trigger == "metrics-api":
        query = urlencode({**params, SCALED_OBJECT_PARAM: name})
        metadata = {
            "url": f"{_url(opts).rstrip('/')}{METRICS_PATH}?{query}",
            "format": "json",
            "valueLocation": VALUE_LOCATION,
            "targetValue": f"{q.target:g}",
            "activationTargetValue": f"{q.activation or 0:g}",
        }
        if auth != "none":
            metadata["authMode"] = auth
            if auth == "apiKey":
                metadata.update({"method": "header", "keyParamName": API_KEY_HEADER})
    else:
        metadata = {
            "scalerAddress": opts.scaler_address,
            **params,
            "targetValue": f"{q.target:g}",
            "activationThreshold": f"{q.activation or 0:g}",
        }
    return {"type": opts.trigger, "metricType": metric_type, "metadata": metadata}


def _auth_documents(opts: Options, namespace: str) -> list[dict[str, Any]]:
    """The Secret template and the TriggerAuthentication that reads it."""
    mode = auth_of(opts)
    keys = EXTERNAL_TLS_KEYS if opts.trigger == "external" else SECRET_KEYS[mode]
    metadata = {"name": opts.secret, "namespace": namespace}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "stringData": {
            k: f"REPLACE-WITH-THE-{k.upper()}-{'PEM' if mode == 'tls' else 'THE-AUTOMATOR-ACCEPTS'}"
            for k in keys
        },
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
    object_name = f"{name}-gpu"
    if len(object_name) > MAX_NAME:
        raise ValueError(
            f"ScaledObject name {object_name[:60]!r}: {len(object_name)} characters, KEDA allows at most "
            f"{MAX_NAME} (its HPA is keda-hpa-<name>, 63 at most): use a workload of at most "
            f"{MAX_NAME - len('-gpu')} characters"
        )
    trigger = _trigger(q, _params(q, explicit), opts, object_name)
    docs: list[dict[str, Any]] = []
    if auth_of(opts) != "none":
        trigger["authenticationRef"] = {"name": opts.secret}
        docs += _auth_documents(opts, ns)
    fallback = opts.fallback_replicas if opts.fallback_replicas is not None else max(1, opts.min_replicas)
    docs.append(
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": object_name, "namespace": ns},
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
