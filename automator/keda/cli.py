"""`gpu-automator keda scaledobject`: print a ScaledObject (and TriggerAuthentication) for a workload.

Pure: argparse, yaml and the KEDA package's pure modules (no web or API client is loaded).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from typing import Any

import yaml

from automator.keda.request import ParamError, question
from automator.keda.scaledobject import (
    AUTH_MODES,
    CURRENT_KEDA,
    TRIGGERS,
    VALUE_WITH_FALLBACK_KEDA,
    Options,
    parse_keda_version,
    render,
)
from automator.keda.signals import AGGREGATIONS, PROFILES, SIGNALS

COMMAND = "keda"
DEFAULTS = Options()


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(COMMAND, help="KEDA: print ready ScaledObjects")
    sub = parser.add_subparsers(dest="keda_command", required=True)
    so = sub.add_parser("scaledobject", help="a ScaledObject (and TriggerAuthentication) for a workload")
    so.add_argument("--namespace", required=True)
    which = so.add_mutually_exclusive_group(required=True)
    which.add_argument("--deployment", metavar="NAME")
    which.add_argument("--statefulset", metavar="NAME")
    which.add_argument("--selector", metavar="LABEL_SELECTOR")
    so.add_argument("--profile", choices=tuple(PROFILES), help="signal, aggregation, window, target")
    so.add_argument("--signal", help=f"overrides the profile's: {', '.join(SIGNALS)}")
    so.add_argument("--aggregation", help=f"overrides the profile's: {', '.join(AGGREGATIONS)}")
    so.add_argument("--window", help="overrides the profile's (Prometheus duration, e.g. 5m)")
    so.add_argument("--target-value", help="overrides the profile's target")
    so.add_argument("--activation", help="overrides the profile's activation threshold")
    so.add_argument("--metric-type", choices=("Value", "AverageValue"), help="overrides the profile's")
    so.add_argument("--trigger", choices=TRIGGERS, default=DEFAULTS.trigger)
    so.add_argument("--url", default=DEFAULTS.url, help="the automator's base URL (metrics-api)")
    so.add_argument("--scaler-address", default=DEFAULTS.scaler_address, help="host:port (external)")
    so.add_argument(
        "--auth",
        choices=AUTH_MODES,
        default=DEFAULTS.auth,
        help=(
            "metrics-api authMode (default bearer; none: open); with --trigger external: tls (mutual TLS) "
            "or none (the default): KEDA sends no tokens to external scalers"
        ),
    )
    so.add_argument(
        "--tls",
        action="store_true",
        help="metrics-api: ask the automator's HTTPS listener (https://, port 8443; implied by --auth tls)",
    )
    so.add_argument("--secret", default=DEFAULTS.secret, help="Secret and TriggerAuthentication name")
    so.add_argument("--min-replicas", type=int, default=DEFAULTS.min_replicas)
    so.add_argument("--max-replicas", type=int, default=DEFAULTS.max_replicas)
    so.add_argument(
        "--fallback-replicas", type=int, help="replicas while data is missing (default: min, >= 1)"
    )
    so.add_argument("--scale-target", metavar="KIND/NAME", help="required with --selector")
    so.add_argument(
        "--keda-version",
        metavar="MAJOR.MINOR",
        default=".".join(map(str, CURRENT_KEDA)),
        help=(
            "the KEDA that must accept the objects (default %(default)s); before "
            f"{'.'.join(map(str, VALUE_WITH_FALLBACK_KEDA))} metricType Value becomes AverageValue over sum"
        ),
    )
    return parser


# The flags that name Options fields one for one (--scale-target and --keda-version are parsed first).
_OPTION_FLAGS: tuple[str, ...] = tuple(
    f.name for f in fields(Options) if f.name not in ("scale_target", "keda_version")
)
# The query parameters the flags give (flag dest -> parameter), in the order the endpoint documents them.
_PARAMETERS: dict[str, str] = {
    "namespace": "namespace",
    "deployment": "deployment",
    "statefulset": "statefulset",
    "selector": "selector",
    "profile": "profile",
    "signal": "signal",
    "aggregation": "aggregation",
    "window": "window",
    "target_value": "targetValue",
    "activation": "activationThreshold",
    "metric_type": "metricType",
}
_FLAG_OF_PARAMETER = {
    "targetValue": "target-value",
    "activationThreshold": "activation",
    "metricType": "metric-type",
}


def _scale_target(text: str | None) -> tuple[str, str] | None:
    """--scale-target KIND/NAME; ValueError when malformed."""
    if not text:
        return None
    kind, sep, name = text.partition("/")
    if not sep or kind not in ("Deployment", "StatefulSet") or not name:
        raise ValueError("--scale-target: expected Deployment/NAME or StatefulSet/NAME")
    return kind, name


def run(args: argparse.Namespace) -> int:
    explicit = {
        parameter: getattr(args, dest)
        for dest, parameter in _PARAMETERS.items()
        if getattr(args, dest) is not None
    }
    try:
        options = Options(
            **{flag: getattr(args, flag) for flag in _OPTION_FLAGS},
            scale_target=_scale_target(args.scale_target),
            keda_version=parse_keda_version(args.keda_version),
        )
        docs = render(question(explicit), explicit, options)
    except ParamError as e:
        flag = _FLAG_OF_PARAMETER.get(e.parameter, e.parameter)
        print(f"gpu-automator keda: error: --{flag}: {e.message}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"gpu-automator keda: error: {e}", file=sys.stderr)
        return 2
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0
