"""The questions the cluster declares: read from its ScaledObjects (keda.sh/v1alpha1), pure.

A metrics-api trigger whose URL path is /keda/v1/metrics declares the question its query carries; an external
(or external-push) trigger whose `scalerAddress` names this automator declares the question of its metadata,
the workload defaulting to the ScaledObject's scale target. A ScaledObject declares questions about its own
namespace only (one tenant's object cannot make the service compute another's). A trigger that points here
but cannot be read is a problem (logged, counted), never a question.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

from automator.keda.auth import API_KEY_PARAM
from automator.keda.request import METRICS_PATH, WORKLOAD_KINDS, ParamError, Question, question

# The ScaledObject API the refresh lists (`list` on scaledobjects.keda.sh: deploy/automator/rbac.yaml).
GROUP: Final = "keda.sh"
VERSION: Final = "v1alpha1"
PLURAL: Final = "scaledobjects"
KIND: Final = "ScaledObject"
METRICS_API: Final = "metrics-api"
EXTERNAL_TRIGGERS: Final = ("external", "external-push")
# The request parameter naming the ScaledObject that asks (written by `keda scaledobject`): a question of an
# object listed since the last refresh answers warming_up rather than not_declared. Never part of a key.
SCALED_OBJECT_PARAM: Final = "scaledobject"
# Parameters a request may carry that are not part of the question.
NOT_QUESTION: Final = frozenset({API_KEY_PARAM, SCALED_OBJECT_PARAM})
# The Service's names (deploy/automator/service.yaml): an external trigger naming one is this automator.
DEFAULT_HOSTS: Final = (
    "gpu-steward-automator",
    "gpu-steward-automator.gpu-steward",
    "gpu-steward-automator.gpu-steward.svc",
    "gpu-steward-automator.gpu-steward.svc.cluster.local",
)

# (namespace, workload kind, workload name, signal, aggregation, window): what a declared answer depends on.
Key = tuple[str, str, str, str, str, int]
ObjectName = tuple[str, str]  # (namespace, name) of a ScaledObject


def key_of(q: Question) -> Key:
    wl = q.workload
    return (wl.namespace, wl.kind, wl.name, q.signal.name, q.aggregation, q.window_seconds)


def describe(key: Key) -> str:
    """A key as the query a ScaledObject's trigger would carry (for messages)."""
    namespace, kind, name, signal, aggregation, window = key
    workload = kubectl_selector(name) if kind == "selector" else name
    return (
        f"namespace={namespace}&{kind}={workload}&signal={signal}&aggregation={aggregation}&window={window}s"
    )


def kubectl_selector(canonical: str) -> str:
    """A selector's canonical text (request.selector_text: `key In (a,b); key2 Exists ()`) in the
    `kubectl -l` grammar a request or a flag carries (`key in (a,b),key2`)."""
    terms = []
    for part in filter(None, canonical.split("; ")):
        key, op, values = part.split(" ", 2)
        listed = values.strip("()")
        terms.append(
            {"In": f"{key} in ({listed})", "NotIn": f"{key} notin ({listed})", "Exists": key}.get(
                op, f"!{key}"
            )
        )
    return ",".join(terms)


def command(key: Key) -> str:
    """The `gpu-automator keda scaledobject` command that prints a ScaledObject declaring the key."""
    namespace, kind, name, signal, aggregation, window = key
    workload = f"--{kind} {kubectl_selector(name)!r}" if kind == "selector" else f"--{kind} {name}"
    return (
        f"gpu-automator keda scaledobject --namespace {namespace} {workload} --signal {signal} "
        f"--aggregation {aggregation} --window {window}s"
    )


@dataclass(frozen=True)
class Declaration:
    question: Question
    scaled_object: ObjectName


@dataclass(frozen=True)
class Declarations:
    questions: Mapping[Key, Declaration] = field(default_factory=dict)
    scaled_objects: frozenset[ObjectName] = frozenset()  # every ScaledObject listed
    targets: Mapping[ObjectName, tuple[str, str]] = field(default_factory=dict)  # scale target (kind, name)
    problems: tuple[str, ...] = ()  # triggers pointing here that could not be read


def _host(address: str) -> str:
    """The host of `host:port`, `[v6]:port`, a URL or a gRPC target (`dns:///host:port`)."""
    text = address.strip()
    if "://" in text:
        parts = urlsplit(text)
        return (parts.hostname or _host(parts.path.lstrip("/"))).lower().rstrip(".")
    if text.startswith("["):
        return text[1 : text.find("]")].lower() if "]" in text else ""
    host = text.rpartition(":")[0] if ":" in text else text
    return host.lower().rstrip(".")  # a fully qualified name's trailing dot names the same host


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _target(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    ref = spec.get("scaleTargetRef")
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or not ref["name"]:
        return None
    return str(ref.get("kind") or "Deployment"), ref["name"]


def trigger_question(
    trigger: Mapping[str, Any],
    namespace: str,
    target: tuple[str, str] | None,
    hosts: frozenset[str],
) -> Question | None:
    """The question one trigger declares; None when it does not point here; ParamError when it points here
    but cannot be read (the parameter named as the request would name it)."""
    kind = trigger.get("type")
    metadata = _strings(trigger.get("metadata"))
    if kind == METRICS_API:
        url = urlsplit(metadata.get("url", ""))
        if url.path.rstrip("/") != METRICS_PATH:
            return None
        params = {k: v for k, v in parse_qsl(url.query, keep_blank_values=True) if k not in NOT_QUESTION}
    elif kind in EXTERNAL_TRIGGERS:
        if _host(metadata.get("scalerAddress", "")) not in hosts:
            return None
        params = {k: v for k, v in metadata.items() if k != "scalerAddress"}
        params.setdefault("namespace", namespace)
        if target is not None and not any(params.get(k) for k in WORKLOAD_KINDS):
            params[target[0].lower()] = target[1]  # the scale target is the workload (as the scaler reads it)
    else:
        return None
    q = question(params)
    if q.workload.namespace != namespace:
        raise ParamError("namespace", "a ScaledObject declares questions about its own namespace only")
    return q


def declarations(objects: Iterable[Mapping[str, Any]], hosts: Iterable[str]) -> Declarations:
    """The questions a list of ScaledObjects declares (malformed objects and triggers become problems)."""
    known_hosts = frozenset(h.lower() for h in hosts)
    questions: dict[Key, Declaration] = {}
    listed: set[ObjectName] = set()
    targets: dict[ObjectName, tuple[str, str]] = {}
    problems: list[str] = []
    for obj in objects:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if not isinstance(meta, Mapping) or not meta.get("name") or not meta.get("namespace"):
            continue
        name: ObjectName = (str(meta["namespace"]), str(meta["name"]))
        listed.add(name)
        spec = obj.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        target = _target(spec)
        if target is not None:
            targets[name] = target
        triggers = spec.get("triggers")
        for i, trigger in enumerate(triggers if isinstance(triggers, list) else ()):
            if not isinstance(trigger, Mapping):
                continue
            try:
                q = trigger_question(trigger, name[0], target, known_hosts)
            except ParamError as e:
                problems.append(f"ScaledObject {name[0]}/{name[1]} trigger {i}: {e.parameter}: {e.message}")
                continue
            if q is not None:
                questions.setdefault(key_of(q), Declaration(q, name))
    return Declarations(questions, frozenset(listed), targets, tuple(problems))
