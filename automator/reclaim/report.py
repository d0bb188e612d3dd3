"""Stage 4 of a plan: every rendering of a plan, in one place. The CLI's JSON and text, `explain`, the
service's log lines and the Events' messages all come from here, with the number formats below. Pure.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.objects.resources import FieldError
from automator.reclaim.formats import fmt_logged, fmt_measure, json_measure
from automator.reclaim.model import AnnotationWarning, Decision, Plan, PlannerConfig, UsageWindow, Victim
from steward_common.conventions import RECLAIM_ANNOTATION
from steward_common.printable import printable, printable_lines

# --- JSON (CLI `plan --output json`, the service's /decisions) -------------------------------------------


def _decision_json(d: Decision) -> dict[str, Any]:
    return {
        "preemptor": str(d.preemptor),
        "node": d.node,
        "victims": [str(v.pod) for v in d.victims],
        "gpus_freed": d.gpus_freed,
        "gpus_requested": d.gpus_requested,
        "preemptor_priority": d.preemptor_priority,
        "free_gpus_before": d.free_gpus_before,
        "victim_details": [
            {
                "pod": str(v.pod),
                "gpus": v.gpus,
                "priority": v.priority,
                "gpu_activity": json_measure(v.gpu_activity),
                "cpu_cores": json_measure(v.cpu_cores),
            }
            for v in d.victims
        ],
    }


def _warning_json(w: AnnotationWarning) -> dict[str, Any]:
    return {
        "priority_class": w.priority_class,
        "annotation": w.annotation,
        "value": w.value,
        "message": w.message,
        "pods": [str(p) for p in w.pods],
    }


def plan_to_json(result: Plan) -> dict[str, Any]:
    """The CLI JSON: decisions (each evicts), unresolved, already_fit, warnings, skipped_cooldown."""
    return {
        "decisions": [_decision_json(d) for d in result.decisions],
        "unresolved": [{"preemptor": str(u.preemptor), "reason": u.reason} for u in result.unresolved],
        # Preemptors that fit as the cluster is: nothing evicted, left to the scheduler.
        "already_fit": [
            {
                "preemptor": str(d.preemptor),
                "node": d.node,
                "gpus_requested": d.gpus_requested,
                "free_gpus_before": d.free_gpus_before,
            }
            for d in result.already_fit
        ],
        "warnings": [_warning_json(w) for w in result.warnings],
        "skipped_cooldown": [str(k) for k in result.skipped_cooldown],
        # Only when a node's victim search ran out of budget (the node was skipped for that preemptor).
        **(
            {
                "search_cut_off": [
                    {"preemptor": str(c.preemptor), "node": c.node, "reason": c.reason}
                    for c in result.search_cut_off
                ]
            }
            if result.search_cut_off
            else {}
        ),
    }


# --- text (CLI `plan`) -------------------------------------------------------------------------------


def plan_to_text(result: Plan) -> str:
    lines: list[str] = []
    for d in result.decisions:
        lines.append(
            f"{d.preemptor} (priority {d.preemptor_priority}, {d.gpus_requested} GPUs) -> {d.node}: "
            f"evict {len(d.victims)} pod(s) freeing {d.gpus_freed} GPUs ({d.free_gpus_before} already free)"
        )
        for v in d.victims:
            lines.append(
                f"  evict {v.pod}: {v.gpus} GPUs, priority {v.priority}, "
                f"GPU activity {fmt_measure(v.gpu_activity)}"
            )
    for d in result.already_fit:
        lines.append(
            f"{d.preemptor}: already fits on {d.node} without evictions ({d.free_gpus_before} GPUs free)"
        )
    for u in result.unresolved:
        lines.append(f"{u.preemptor}: unresolved: {u.reason}")
    for w in result.warnings:
        lines.append(f"warning: PriorityClass {w.priority_class}: {w.message}")
    for c in result.search_cut_off:
        lines.append(f"warning: {c.preemptor}: node {c.node} skipped: {c.reason}")
    if not lines:
        lines.append("no pending preemptors")
    return printable_lines(lines)


# --- explain -----------------------------------------------------------------------------------------


def _as_preemptor(plan: Plan, key: ObjectKey) -> list[str]:
    lines: list[str] = []
    for fit in plan.already_fit:
        if fit.preemptor == key:
            lines.append(
                f"preemptor (priority {fit.preemptor_priority}, needs {fit.gpus_requested} GPUs): "
                f"already fits on node {fit.node} without evicting anything "
                f"({fit.free_gpus_before} GPUs free); left to the scheduler"
            )
    for decision in plan.decisions:
        if decision.preemptor == key:
            names = ", ".join(
                f"{v.pod} ({v.gpus} GPUs, priority {v.priority}, activity {fmt_measure(v.gpu_activity)})"
                for v in decision.victims
            )
            lines.append(
                f"preemptor (priority {decision.preemptor_priority}, "
                f"needs {decision.gpus_requested} GPUs): "
                f"goes to node {decision.node} by evicting {names}; frees {decision.gpus_freed} GPUs, "
                f"{decision.free_gpus_before} were free"
            )
        for victim in decision.victims:
            if victim.pod == key:
                lines.append(
                    f"victim: evicted for {decision.preemptor} (priority {decision.preemptor_priority}) "
                    f"on node {decision.node}"
                )
    return lines


def explain(plan: Plan, cluster: ClusterState, key: ObjectKey, config: PlannerConfig | None = None) -> str:
    """Why a pod is or is not a victim, or what happens to it as a preemptor. LookupError if unknown."""
    config = config or PlannerConfig()
    pod = next((p for p in cluster.pods if p.key == key), None)
    if pod is None:
        raise LookupError(f"Pod {key}: not found in the cluster snapshot")
    try:
        gpus: int | str = pod.requests(config.gpu_resources).gpus
    except FieldError as exc:
        gpus = f"unreadable ({exc})"
    phase = pod.phase
    lines = [
        f"Pod {key}: phase {phase}, node {pod.node_name or '-'}, class {pod.class_name or '-'}, GPUs {gpus}"
    ]
    lines += _as_preemptor(plan, key)
    for unresolved in plan.unresolved:
        if unresolved.preemptor == key:
            lines.append(f"preemptor unresolved: {unresolved.reason}")
    for verdict in plan.verdicts.get(key, []):
        state = "eligible" if verdict.eligible else "protected"
        lines.append(f"for preemptor {verdict.preemptor}: {state} [{verdict.rule}] {verdict.reason}")
    for warning in plan.warnings:
        if key in warning.pods:
            lines.append(f"warning: PriorityClass {warning.priority_class}: {warning.message}")
    if len(lines) == 1:
        lines.append(_not_considered(plan, pod, gpus))
    return printable_lines(lines)


def _not_considered(plan: Plan, pod: Pod, gpus: int | str) -> str:
    if pod.finished:
        return "not a victim: the pod has finished"
    if pod.terminating:
        return "not a victim: the pod is terminating (its GPUs still count as used until it is gone)"
    if not pod.node_name:
        return (
            "not a preemptor: a preemptor must be Pending with PodScheduled=False reason Unschedulable, "
            f'request GPUs, and have a PriorityClass annotated {RECLAIM_ANNOTATION}: "true"'
        )
    if gpus == 0:
        return "not a victim: holds no GPUs of the configured resources"
    if not plan.decisions and not plan.unresolved and not plan.already_fit:
        return "not a victim: no pending preemptor in this pass"
    return (
        "not a victim: no preemptor in this pass had a strictly higher priority and needed its node "
        "(or the pass recorded verdicts only for chosen nodes; see docs/reclaim.md)"
    )


# --- log lines and Events (the service) ---------------------------------------------------------------


def measured(v: Victim, window: UsageWindow | None) -> str:
    """The activity a victim was chosen on, as logs and both sides' Events state it."""
    span = f" over {window.gpu_seconds}s" if window is not None else ""
    cpu = f", CPU {fmt_logged(v.cpu_cores, ' cores')}" if v.cpu_cores is not None else ""
    return f"GPU activity {fmt_logged(v.gpu_activity)}{span}{cpu}"


def describe_victim(v: Victim, window: UsageWindow | None) -> str:
    return f"{v.pod} ({v.gpus} GPU, priority {v.priority}, {measured(v, window)})"


def log_plan(
    log: logging.Logger, plan: Plan, mode: str, windows: Mapping[ObjectKey, UsageWindow], *, evicting: bool
) -> None:
    """The plan's log lines; mode: the pass's mode as logged, evicting: whether it evicts (enforce)."""
    verb = "evicting" if evicting else "would evict"
    for d in plan.decisions:
        log.info(
            "decision mode=%s preemptor=%s priority=%d gpus=%d node=%s free_before=%d: %s %s",
            mode,
            d.preemptor,
            d.preemptor_priority,
            d.gpus_requested,
            d.node,
            d.free_gpus_before,
            verb,
            "; ".join(describe_victim(v, windows.get(v.pod)) for v in d.victims),
        )
    for d in plan.already_fit:
        log.info("fits preemptor=%s node=%s: already fits, nothing to evict", d.preemptor, d.node)
    # Preemptors in cooldown are among the unresolved, with the time left as their reason.
    for u in plan.unresolved:
        log.info("unresolved preemptor=%s: %s", u.preemptor, u.reason)
    for c in plan.search_cut_off:
        log.warning("search cut off preemptor=%s node=%s: %s", c.preemptor, c.node, c.reason)
    for w in plan.warnings:
        log.warning(
            "invalid annotation class=%s %s=%r: %s (%d pods)",
            w.priority_class,
            w.annotation,
            w.value,
            w.message,
            len(w.pods),
        )


def preemptor_event(d: Decision, windows: Mapping[ObjectKey, UsageWindow], complete: bool) -> str:
    victims = "; ".join(describe_victim(v, windows.get(v.pod)) for v in d.victims)
    partial = "" if complete else " (partial: an eviction was refused)"
    return printable(
        f"gpu-steward evicted idle GPU pods on node {d.node} to free {d.gpus_freed} GPUs "
        f"for it{partial}: {victims}"
    )


def victim_event(d: Decision, v: Victim, window: UsageWindow | None) -> str:
    return printable(
        f"Evicted by gpu-steward for pending pod {d.preemptor} (priority {d.preemptor_priority}, "
        f"{d.gpus_requested} GPU) on node {d.node}: {measured(v, window)}"
    )


def eviction_failed_event(preemptor: ObjectKey, outcome: str, message: str) -> str:
    return printable(f"gpu-steward could not evict it for {preemptor}: {outcome} {message}")


def invalid_annotation_event(w: AnnotationWarning) -> str:
    return printable(
        f"PriorityClass {w.priority_class}: {w.annotation}={w.value!r}: {w.message}; "
        "pods of this class are protected from GPU reclaim"
    )
