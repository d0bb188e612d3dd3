"""A DRA check report as JSON, as text, as metric samples and as Event bodies. Pure.

The service exports `samples()` through `DraCollector` (automator/dra/metrics.py) and writes the bodies of
`events()` with its Kubernetes adapter; both are kept here so the CLI, the service and the tests share them.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

import msgspec

from automator.dra.model import CRITICAL, KINDS, Finding, Report
from steward_common.conventions import COMPONENT, REPORTING_COMPONENT
from steward_common.printable import printable, printable_lines

# Metric names: the one home (docs/dra.md and alerts/dra.yaml are checked against these).
CAPACITY_METRIC: Final = "gpu_steward_dra_device_capacity"
CONSUMED_METRIC: Final = "gpu_steward_dra_device_consumed"
FINDINGS_METRIC: Final = "gpu_steward_dra_findings"
DEVICE_LABELS: Final = ("node", "driver", "pool", "device", "capacity")
# The service's periodic check (automator/dra/job.py): outcomes, freshness, whether usage was compared.
CHECKS_METRIC: Final = "gpu_steward_dra_checks"  # counter, exposed as ..._total
LAST_SUCCESS_METRIC: Final = "gpu_steward_dra_last_successful_check_timestamp_seconds"
CHECK_DURATION_METRIC: Final = "gpu_steward_dra_check_duration_seconds"
USAGE_CHECKED_METRIC: Final = "gpu_steward_dra_usage_checked"
EVENTS_METRIC: Final = "gpu_steward_dra_events"  # counter, exposed as ..._total

# Event reasons per finding kind (CamelCase, as Kubernetes components write them).
REASONS: Final[dict[str, str]] = {
    kind: "Dra" + "".join(part.capitalize() for part in kind.split("-")) for kind in KINDS
}
EVENT_COMPONENT: Final = COMPONENT  # the one home: steward_common/conventions.py
MAX_EVENT_MESSAGE: Final = 1024  # events.k8s.io's limit; core/v1 has none but long messages help nobody


def number(amount: Decimal) -> int | float:
    """JSON number of an exact amount: an integer when it is one."""
    return int(amount) if amount == amount.to_integral_value() else float(amount)


def finding_json(f: Finding) -> dict[str, Any]:
    return {
        "kind": f.kind,
        "severity": f.severity,
        "node": f.node,
        "device": f.device,
        "claim": f.claim,
        "pod": f.pod,
        "message": f.message,
    }


def to_json(report: Report) -> dict[str, Any]:
    """{"findings": [...], "devices": [{"node", "device", "capacity", "consumed"}]} (docs/dra.md)."""
    return {
        "findings": [finding_json(f) for f in report.findings],
        "devices": [
            {
                "node": d.node,
                "device": str(d.device),
                "capacity": {n: number(v) for n, v in sorted(d.capacity.items())},
                "consumed": {n: number(v) for n, v in sorted(d.consumed.items())},
            }
            for d in report.devices
        ],
    }


def json_text(report: Report) -> str:
    """`json.dumps(to_json(report), indent=2)`, exactly (what `dra-check --output json` prints), written by
    msgspec in C when that gives the same text: no float amount (Python and msgspec may write one apart),
    nothing json.dumps escapes and msgspec does not (non-ASCII, DEL); else by json.dumps itself."""
    doc = to_json(report)
    if not any(
        type(v) is float for d in doc["devices"] for m in (d["capacity"], d["consumed"]) for v in m.values()
    ):
        try:
            text = msgspec.json.format(msgspec.json.encode(doc), indent=2)
        except (OverflowError, TypeError, ValueError):  # an integer beyond 64 bits: json.dumps writes it
            text = b"\x7f"
        if text.isascii() and b"\x7f" not in text:
            return text.decode()
    return json.dumps(doc, indent=2)


def to_text(report: Report) -> str:
    """One line per finding, then a summary line."""
    lines = [
        f"{f.severity} {f.kind}: {f.message}"
        + "".join(f" [{label} {value}]" for label, value in (("node", f.node), ("pod", f.pod)) if value)
        for f in report.findings
    ]
    counts = Counter(f.severity for f in report.findings)
    lines.append(
        f"{len(report.devices)} devices checked, {len(report.findings)} findings"
        + (f" ({counts[CRITICAL]} critical)" if report.findings else "")
    )
    return printable_lines(lines)


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def samples(report: Report) -> list[Sample]:
    """Capacity and consumed per device and capacity name, and the number of findings of every kind (0 too,
    so an alert can tell "none" from "no check ran")."""
    out: list[Sample] = []
    for d in report.devices:
        for name, value in sorted(d.capacity.items()):
            labels = (
                ("node", d.node or ""),
                ("driver", d.device.driver),
                ("pool", d.device.pool),
                ("device", d.device.device),
                ("capacity", name),
            )
            out.append(Sample(CAPACITY_METRIC, labels, float(value)))
            out.append(Sample(CONSUMED_METRIC, labels, float(d.consumed.get(name, Decimal(0)))))
    counts = Counter(f.kind for f in report.findings)
    out.extend(Sample(FINDINGS_METRIC, (("kind", kind),), float(counts[kind])) for kind in KINDS)
    return out


def _involved(f: Finding) -> dict[str, str] | None:
    if f.claim is not None and "," not in f.claim:
        namespace, name = f.claim.split("/", 1)
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "namespace": namespace,
            "name": name,
        }
    if f.node is not None:
        return {"apiVersion": "v1", "kind": "Node", "name": f.node}
    return None


def events(report: Report, now: datetime, instance: str = EVENT_COMPONENT) -> list[dict[str, Any]]:
    """core/v1 Event bodies: on the claim when the finding names one, else on the node.

    A finding with neither (an unnamed object, a device published without a node) has no object to attach
    to and gets no Event; the metrics and the report still carry it. Node Events go to namespace `default`,
    where the kubelet writes its own. The name is a hash of object, reason and message (or the finding's
    `key` where the message carries measured numbers), so the same finding in the next pass has the same
    name: the service writes it once (a second create answers 409) instead of a new Event every pass.
    """
    stamp = now.replace(microsecond=0).isoformat().replace("+00:00", "Z")
    bodies: list[dict[str, Any]] = []
    for f in report.findings:
        involved = _involved(f)
        if involved is None:
            continue
        namespace = involved.get("namespace", "default")
        reason = REASONS[f.kind]
        identity = f.message if f.key is None else f"{f.node}|{f.device}|{f.claim}|{f.pod}|{f.key}"
        digest = hashlib.sha256(f"{involved}|{reason}|{identity}".encode()).hexdigest()[:16]
        bodies.append(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{involved['name']}.{digest}", "namespace": namespace},
                "involvedObject": involved,
                "type": "Warning",
                "reason": reason,
                "message": printable(f.message)[:MAX_EVENT_MESSAGE],
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
                "source": {"component": EVENT_COMPONENT},
                "reportingComponent": REPORTING_COMPONENT,
                "reportingInstance": instance,
            }
        )
    return bodies
