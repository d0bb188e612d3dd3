"""A KEDA question from query parameters or trigger metadata, validated (pure).

Every error is a ParamError naming the parameter (HTTP 400 / gRPC INVALID_ARGUMENT); nothing from the
request is trusted: names are checked against Kubernetes' grammar, numbers are finite and in range.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from automator.keda.signals import AGGREGATIONS, ALIASES, METRIC_TYPES, PROFILES, SIGNALS, Signal, signal
from steward_common.series import RULE_INTERVAL_SECONDS

# The metrics-api contract: where KEDA asks, and the GJSON path of the number (the trigger's valueLocation).
METRICS_PATH: Final = "/keda/v1/metrics"
PROFILES_PATH: Final = "/keda/v1/profiles"
VALUE_LOCATION: Final = "value"
MIN_WINDOW_SECONDS: Final = RULE_INTERVAL_SECONDS  # a shorter window may hold no recorded sample
MAX_WINDOW_SECONDS: Final = 7 * 86_400
DEFAULT_AGGREGATION: Final = "avg"
DEFAULT_WINDOW_SECONDS: Final = 120
WORKLOAD_KINDS: Final = ("deployment", "statefulset", "selector")
# Longest inputs read: a duration (digits beyond these mean no real window), a selector and its terms.
MAX_DURATION_CHARS: Final = 32
MAX_SELECTOR_CHARS: Final = 1024
MAX_SELECTOR_TERMS: Final = 32

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_DURATION = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")
_DURATION_UNITS = (365 * 86_400, 7 * 86_400, 86_400, 3600, 60, 1, 0.001)


class ParamError(ValueError):
    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter
        self.message = message


def _shown(text: str) -> str:
    """A value quoted in an error: short, printable (an error never echoes a long or binary input)."""
    text = "".join(c if c.isprintable() else "?" for c in text)
    return repr(text if len(text) <= 64 else text[:64] + "...")


def duration_seconds(text: str, parameter: str = "window") -> int:
    """A Prometheus duration ("5m", "1h30m", "90s") as whole seconds in [MIN, MAX]."""
    m = _DURATION.fullmatch(text.strip()) if len(text) <= MAX_DURATION_CHARS else None
    if not text.strip() or m is None or not any(m.groups()):
        raise ParamError(parameter, f"expected a Prometheus duration such as 5m or 90s, got {_shown(text)}")
    seconds = sum(int(g) * unit for g, unit in zip(m.groups(), _DURATION_UNITS, strict=True) if g)
    if seconds != int(seconds):
        raise ParamError(parameter, f"expected whole seconds, got {_shown(text)}")
    if not MIN_WINDOW_SECONDS <= seconds <= MAX_WINDOW_SECONDS:
        raise ParamError(
            parameter,
            f"expected a duration from {MIN_WINDOW_SECONDS}s to {MAX_WINDOW_SECONDS // 86_400}d, "
            f"got {_shown(text)}",
        )
    return int(seconds)


def finite(text: str, parameter: str, low: float = 0.0) -> float:
    try:
        value = float(text) if len(text) <= MAX_DURATION_CHARS else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < low:
        raise ParamError(parameter, f"expected a finite number >= {low:g}, got {_shown(text)}")
    return value


# --- label selectors ---------------------------------------------------------------------------------

_REQUIREMENT = re.compile(
    r"""\s*(?:
        (?P<not>!)\s*(?P<absent>[^\s,=!()]+)
      | (?P<setkey>[^\s,=!()]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)
      | (?P<eqkey>[^\s,=!()]+)\s*(?P<eq>==|=|!=)\s*(?P<eqvalue>[^\s,=!()]*)
      | (?P<exists>[^\s,=!()]+)
    )\s*(?:,|$)""",
    re.VERBOSE,
)


def _label_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if (prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix))) or not (
        len(name) <= 63 and _LABEL_NAME.fullmatch(name)
    ):
        raise ParamError("selector", f"invalid label key {_shown(key)}")
    return key


def _label_value(value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise ParamError("selector", f"invalid label value {_shown(value)}")
    return value


def parse_selector(text: str) -> dict[str, Any]:
    """A label selector string (kubectl -l grammar) as a metav1.LabelSelector's matchExpressions."""
    if not text.strip():
        raise ParamError("selector", "expected a label selector such as app=api, got ''")
    if len(text) > MAX_SELECTOR_CHARS:
        raise ParamError("selector", f"longer than {MAX_SELECTOR_CHARS} characters")
    exprs: list[dict[str, Any]] = []
    pos = 0
    while pos < len(text):
        m = _REQUIREMENT.match(text, pos)
        if m is None or m.end() == pos:
            raise ParamError("selector", f"cannot parse {_shown(text)} at character {pos}")
        pos = m.end()
        if m["absent"]:
            exprs.append({"key": _label_key(m["absent"]), "operator": "DoesNotExist"})
        elif m["setkey"]:
            values = [_label_value(v.strip()) for v in m["values"].split(",") if v.strip()]
            if not values:
                raise ParamError("selector", f"{m['op']} needs at least one value in {_shown(text)}")
            op = "In" if m["op"] == "in" else "NotIn"
            exprs.append({"key": _label_key(m["setkey"]), "operator": op, "values": values})
        elif m["eqkey"]:
            op = "NotIn" if m["eq"] == "!=" else "In"
            exprs.append(
                {"key": _label_key(m["eqkey"]), "operator": op, "values": [_label_value(m["eqvalue"])]}
            )
        else:
            exprs.append({"key": _label_key(m["exists"]), "operator": "Exists"})
        if len(exprs) > MAX_SELECTOR_TERMS:
            raise ParamError("selector", f"more than {MAX_SELECTOR_TERMS} requirements")
        if text[m.end() - 1 : m.end()] == "," and pos >= len(text):
            raise ParamError("selector", f"trailing comma in {_shown(text)}")
    return {"matchExpressions": exprs}


def selector_text(selector: Mapping[str, Any]) -> str:
    """The canonical text of a parsed selector (a cache key: equal selectors share it)."""
    parts = []
    for e in selector.get("matchExpressions") or []:
        values = ",".join(sorted(e.get("values") or []))
        parts.append(f"{e['key']} {e['operator']} ({values})")
    return "; ".join(sorted(parts))


# --- the question --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    namespace: str
    kind: str  # deployment | statefulset | selector
    name: str  # the object's name, or the canonical selector text
    selector: Mapping[str, Any] | None = None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind}={self.name}"


@dataclass(frozen=True)
class Question:
    workload: Workload
    signal: Signal
    aggregation: str
    window_seconds: int
    profile: str | None
    target: float | None  # the profile's or the trigger's target (recommendation on HTTP)
    activation: float | None
    metric_type: str | None


def _name(params: Mapping[str, str], key: str, pattern: re.Pattern[str], limit: int) -> str:
    value = params[key]
    if not value or len(value) > limit or not pattern.fullmatch(value):
        raise ParamError(key, f"expected a Kubernetes name, got {_shown(value)}")
    return value


def kubernetes_name(value: str, parameter: str) -> str:
    """An object's name (DNS-1123 subdomain, as ScaledObjects and Deployments are named)."""
    return _name({parameter: value}, parameter, DNS1123_SUBDOMAIN, 253)


def workload(params: Mapping[str, str], default_namespace: str | None = None) -> Workload:
    ns = params.get("namespace") or default_namespace
    if not ns:
        raise ParamError("namespace", "required")
    ns = _name({"namespace": ns}, "namespace", _DNS1123_LABEL, 63)
    given = [k for k in WORKLOAD_KINDS if params.get(k) not in (None, "")]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise ParamError(
            "deployment", f"exactly one of deployment, statefulset, selector is required, got {what}"
        )
    kind = given[0]
    if kind == "selector":
        sel = parse_selector(params["selector"])
        return Workload(ns, kind, selector_text(sel), sel)
    return Workload(ns, kind, _name(params, kind, DNS1123_SUBDOMAIN, 253))


def question(
    params: Mapping[str, str],
    default_namespace: str | None = None,
    target_key: str = "targetValue",
    activation_key: str = "activationThreshold",
) -> Question:
    """Parameters (HTTP query or trigger metadata) -> Question; explicit ones override the profile's."""
    wl = workload(params, default_namespace)
    prof = None
    if params.get("profile"):
        prof = PROFILES.get(params["profile"])
        if prof is None:
            raise ParamError(
                "profile", f"unknown profile {_shown(params['profile'])}; known: {', '.join(PROFILES)}"
            )
    sig_name = params.get("signal") or (prof.signal if prof else None)
    if not sig_name:
        raise ParamError("signal", f"required without a profile; one of {', '.join(SIGNALS)}")
    sig = signal(sig_name)
    if sig is None:
        known = ", ".join([*SIGNALS, *ALIASES])
        raise ParamError("signal", f"unknown signal {_shown(sig_name)}; known: {known}")
    aggregation = params.get("aggregation") or (prof.aggregation if prof else DEFAULT_AGGREGATION)
    if aggregation not in AGGREGATIONS:
        raise ParamError(
            "aggregation", f"unknown aggregation {_shown(aggregation)}; known: {', '.join(AGGREGATIONS)}"
        )
    window = (
        duration_seconds(params["window"])
        if params.get("window")
        else (prof.window_seconds if prof else DEFAULT_WINDOW_SECONDS)
    )
    metric_type = params.get("metricType") or (prof.metric_type if prof else None)
    if metric_type is not None and metric_type not in METRIC_TYPES:
        raise ParamError(
            "metricType", f"expected one of {', '.join(METRIC_TYPES)}, got {_shown(metric_type)}"
        )
    target = (
        finite(params[target_key], target_key, low=0.0)
        if params.get(target_key)
        else (prof.target if prof else None)
    )
    if target is not None and target <= 0:
        raise ParamError(target_key, "expected a number > 0")
    activation = (
        finite(params[activation_key], activation_key, low=0.0)
        if params.get(activation_key)
        else (prof.activation if prof else None)
    )
    return Question(
        wl, sig, aggregation, window, prof.name if prof else None, target, activation, metric_type
    )
