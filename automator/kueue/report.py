"""Every rendering of a Kueue plan: the `kueue` object of `plan --output json` and /decisions, the text
lines, the service's log lines and the Event on a deactivated Workload. Pure."""

from __future__ import annotations

import logging
from typing import Any

from automator.kueue.model import Deactivation, KueueMode, KueuePlan
from steward_common.printable import printable


def kueue_json(plan: KueuePlan) -> dict[str, Any]:
    """`{"mode", "boost", "unboost", "deactivate", "unresolved", "left_alone"}`, names as namespace/name."""
    return {
        "mode": str(plan.mode),
        "boost": [
            {"workload": str(b.target.key), "for": str(b.waiting), "value": b.value, "gpus": b.gpus}
            for b in plan.boost
        ],
        "unboost": [{"workload": str(u.target.key), "reason": u.reason} for u in plan.unboost],
        "deactivate": [
            {"workload": str(d.target.key), "for": str(d.waiting), "gpus": d.gpus} for d in plan.deactivate
        ],
        "unresolved": [{"workload": str(n.workload), "reason": n.reason} for n in plan.unresolved],
        "left_alone": [{"workload": str(n.workload), "reason": n.reason} for n in plan.left_alone],
    }


def kueue_lines(plan: KueuePlan, acting: bool = True) -> list[str]:
    """The text: one line per write, unresolved waiting Workload and Workload left alone. acting False (the
    service's dry run) says "would"."""
    if plan.mode is KueueMode.OFF:
        return []
    would = "" if acting else "would "
    head = f"kueue ({plan.mode})"
    lines = [
        f"{head}: {would}boost {b.target.key} to kueue.x-k8s.io/priority-boost {b.value} for {b.waiting} "
        f"({b.gpus} GPUs of quota, {b.pods} pod(s))"
        for b in plan.boost
    ]
    lines += [f"{head}: {would}unboost {u.target.key}: {u.reason}" for u in plan.unboost]
    lines += [
        f"{head}: {would}deactivate {d.target.key} for {d.waiting} ({d.gpus} GPUs of quota, {d.pods} pod(s); "
        f"{d.activity})"
        for d in plan.deactivate
    ]
    lines += [f"{head}: {n.workload}: unresolved: {n.reason}" for n in plan.unresolved]
    lines += [f"{head}: {n.workload}: left alone: {n.reason}" for n in plan.left_alone]
    if not lines:
        waiting = len(plan.waiting)
        lines.append(f"{head}: nothing to do ({waiting} Workload(s) waiting for GPU quota)")
    return [printable(line) for line in lines]


def log_kueue(log: logging.Logger, plan: KueuePlan, acting: bool) -> None:
    if plan.mode is KueueMode.OFF:
        return
    for line in kueue_lines(plan, acting):
        log.info("%s", line)


def deactivated_event(d: Deactivation) -> str:
    """The Event on a Workload set spec.active: false."""
    return (
        f"deactivated (spec.active: false) by gpu-steward: idle ({d.activity}) while {d.waiting} waits for "
        f"{d.need} GPUs of ClusterQueue {d.cluster_queue} quota; its {d.gpus} GPUs of quota go to it. "
        "Kueue does not requeue it: set spec.active: true to queue it again (docs/kueue.md)"
    )
