"""`gpu-automator keda scaledobject`: print a ScaledObject (and TriggerAuthentication) for a workload.

Pure: argparse, yaml and the KEDA package's pure modules (no web or API client is loaded).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from automator.keda.request import ParamError, question
from automator.keda.scaledobject import (
    AUTH_MODES,
    DEFAULT_SCALER_ADDRESS,
    DEFAULT_URL,
    TRIGGERS,
    Options,
    render,
)
from automator.keda.signals import AGGREGATIONS, PROFILES, SIGNALS

COMMAND = "keda"


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
    so.add_argument("--trigger", choices=TRIGGERS, default="metrics-api")
    so.add_argument("--url", default=DEFAULT_URL, help="the automator's base URL (metrics-api)")
    so.add_argument("--scaler-address", default=DEFAULT_SCALER_ADDRESS, help="host:port (external)")
    so.add_argument(
        "--auth",
        choices=AUTH_MODES,
        default="bearer",
        help="metrics-api authMode (default bearer; none: open)",
    )
    so.add_argument("--secret", default="gpu-steward-keda", help="Secret and TriggerAuthentication name")
    so.add_argument("--min-replicas", type=int, default=1)
    so.add_argument("--max-replicas", type=int, default=10)
    so.add_argument(
        "--fallback-replicas", type=int, help="replicas while data is missing (default: min, >= 1)"
    )
    so.add_argument("--scale-target", metavar="KIND/NAME", help="required with --selector")
    return parser


def run(args: argparse.Namespace) -> int:
    explicit = {
        key: value
        for key, value in {
            "namespace": args.namespace,
            "deployment": args.deployment,
            "statefulset": args.statefulset,
            "selector": args.selector,
            "profile": args.profile,
            "signal": args.signal,
            "aggregation": args.aggregation,
            "window": args.window,
            "targetValue": args.target_value,
            "activationThreshold": args.activation,
            "metricType": args.metric_type,
        }.items()
        if value is not None
    }
    target = None
    if args.scale_target:
        kind, sep, name = args.scale_target.partition("/")
        if not sep or kind not in ("Deployment", "StatefulSet") or not name:
            print(
                "gpu-automator keda: error: --scale-target: expected Deployment/NAME or StatefulSet/NAME",
                file=sys.stderr,
            )
            return 2
        target = (kind, name)
    try:
        q = question(explicit)
        docs = render(
            q,
            explicit,
            Options(
                trigger=args.trigger,
                url=args.url,
                scaler_address=args.scaler_address,
                auth=args.auth,
                secret=args.secret,
                min_replicas=args.min_replicas,
                max_replicas=args.max_replicas,
                fallback_replicas=args.fallback_replicas,
                scale_target=target,
            ),
        )
    except ParamError as e:
        flag = {
            "targetValue": "target-value",
            "activationThreshold": "activation",
            "metricType": "metric-type",
        }
        print(
            f"gpu-automator keda: error: --{flag.get(e.parameter, e.parameter)}: {e.message}", file=sys.stderr
        )
        return 2
    except ValueError as e:
        print(f"gpu-automator keda: error: {e}", file=sys.stderr)
        return 2
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0
