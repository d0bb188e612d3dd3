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
from automator.objects.resources import FieldError, rfc3339
from automator.reclaim.formats import fmt_logged, fmt_measure, json_measure
from automator.reclaim.gangs import resolve_gangs
from automator.reclaim.model import (
    NOTICE,
    AnnotationWarning,
    Decision,
    Plan,
    PlannerConfig,
    PodWarning,
    UsageWindow,
    Victim,
    Withdrawal,
)
from steward_common.conventions import (
    DEFER_UNTIL_ANNOTATION,
    NEVER_RECLAIM_LABEL,
    RECLAIM_ANNOTATION,
)
from steward_common.printable import printable, printable_lines

# --- JSON (CLI `plan --output json`, the service's /decisions) -------------------------------------------


def _time_json(t: Any) -> str | None:
    return rfc3339(t) if t is not None else None


def _decision_json(d: Decision, notice: bool = False) -> dict[str, Any]:
    # A decision of a gang, or evicting one, names the gangs and where each victim runs; with notice shown
    # (--notice-seconds > 0 or pods under notice) each says whether it notices or evicts; other decisions
    # keep the fields they always had.
    gangs = d.gang is not None or any(v.gang is not None for v in d.victims)
    return {
        "preemptor": str(d.preemptor),
        **({"gang": d.gang} if gangs else {}),
        "node": d.node,
        **({"action": d.action, "notice_deadline": _time_json(d.notice_deadline)} if notice else {}),
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
                **({"node": v.node, "gang": v.gang} if gangs else {}),
            }
            for v in d.victims
        ],
    }


def _gang_tag(plan: Plan, gang: str | None) -> str:
    """A preemptor's gang in the text: its name, members needed and running."""
    if gang is None:
        return ""
    needs = plan.gang_needs.get(gang)
    return f" [gang {gang}]" if needs is None else f" [gang {gang}: {needs[0]} needed, {needs[1]} running]"


def _warning_json(w: AnnotationWarning) -> dict[str, Any]:
    return {
        "priority_class": w.priority_class,
        "annotation": w.annotation,
        "value": w.value,
        "message": w.message,
        "pods": [str(p) for p in w.pods],
    }


def _withdrawal_json(w: Withdrawal) -> dict[str, Any]:
    return {"pod": str(w.pod), "for": w.target, "reason": str(w.reason), "detail": w.detail}


def _notice_json(result: Plan) -> dict[str, Any]:
    """The pods under notice as the pass read them, and the notices it withdraws (notice shown only)."""
    if not result.notice_shown:
        return {}
    return {
        "under_notice": [
            {"pod": str(u.pod), "for": u.target, "deadline": rfc3339(u.deadline)} for u in result.under_notice
        ],
        "notice_withdrawals": [_withdrawal_json(w) for w in result.withdrawals],
    }


def plan_to_json(result: Plan) -> dict[str, Any]:
    """The CLI JSON: decisions (each evicts, or gives notice), unresolved, already_fit, warnings,
    skipped_cooldown."""
    return {
        "decisions": [_decision_json(d, result.notice_shown) for d in result.decisions],
        "unresolved": [
            {"preemptor": str(u.preemptor), **({"gang": u.gang} if u.gang else {}), "reason": u.reason}
            for u in result.unresolved
        ],
        # Preemptors that fit as the cluster is: nothing evicted, left to the scheduler.
        "already_fit": [
            {
                "preemptor": str(d.preemptor),
                **({"gang": d.gang} if d.gang else {}),
                "node": d.node,
                "gpus_requested": d.gpus_requested,
                "free_gpus_before": d.free_gpus_before,
            }
            for d in result.already_fit
        ],
        "warnings": [_warning_json(w) for w in result.warnings]
        + [{"gang": w.gang, "message": w.message} for w in result.gang_warnings]
        + [
            {"pod": str(w.pod), "annotation": w.annotation, "value": w.value, "message": w.message}
            for w in result.pod_warnings
        ],
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
        **_notice_json(result),
    }


# --- text (CLI `plan`) -------------------------------------------------------------------------------


def plan_to_text(result: Plan) -> str:
    lines: list[str] = []
    for d in result.decisions:
        verb = "notice" if d.action == NOTICE else "evict"
        after = f", evicted after {_time_json(d.notice_deadline)}" if d.action == NOTICE else ""
        lines.append(
            f"{d.preemptor}{_gang_tag(result, d.gang)} (priority {d.preemptor_priority}, "
            f"{d.gpus_requested} GPUs) -> {d.node}: "
            f"{verb} {len(d.victims)} pod(s) freeing {d.gpus_freed} GPUs ({d.free_gpus_before} already free)"
            f"{after}"
        )
        for v in d.victims:
            where = f" (gang {v.gang}, on {v.node})" if v.gang is not None else ""
            noticed = f", under notice until {rfc3339(v.noticed)}" if v.noticed is not None else ""
            lines.append(
                f"  {verb} {v.pod}: {v.gpus} GPUs, priority {v.priority}, "
                f"GPU activity {fmt_measure(v.gpu_activity)}{where}{noticed if result.notice_shown else ''}"
            )
    for d in result.already_fit:
        lines.append(
            f"{d.preemptor}{_gang_tag(result, d.gang)}: already fits on {d.node} without evictions "
            f"({d.free_gpus_before} GPUs free)"
        )
    for u in result.unresolved:
        lines.append(f"{u.preemptor}{_gang_tag(result, u.gang)}: unresolved: {u.reason}")
    for w in result.warnings:
        lines.append(f"warning: PriorityClass {w.priority_class}: {w.message}")
    for g in result.gang_warnings:
        lines.append(f"warning: gang {g.gang}: {g.message}")
    for c in result.search_cut_off:
        lines.append(f"warning: {c.preemptor}: node {c.node} skipped: {c.reason}")
    for gone in result.withdrawals:
        lines.append(f"withdraw notice on {gone.pod}{_for(gone.target)}: {gone.reason}: {gone.detail}")
    for p in result.pod_warnings:
        lines.append(f"warning: pod {p.pod}: {p.message}")
    if not lines:
        lines.append("no pending preemptors")
    return printable_lines(lines)


def _for(target: str) -> str:
    return f" (for {target})" if target else ""


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
            if victim.pod == key and decision.action == NOTICE:
                lines.append(
                    f"victim: given notice for {decision.target} (priority {decision.preemptor_priority}) "
                    f"on node {decision.node}: evicted after {_time_json(decision.notice_deadline)} if "
                    "a later pass still chooses it"
                )
            elif victim.pod == key:
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
    lines += _gang_lines(plan, cluster, key)
    for u in plan.under_notice:
        if u.pod == key:
            lines.append(f"under notice for {u.target} until {rfc3339(u.deadline)}")
    for w in plan.withdrawals:
        if w.pod == key:
            lines.append(f"notice{_for(w.target)} withdrawn: {w.reason}: {w.detail}")
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
    for p in plan.pod_warnings:
        if p.pod == key:
            lines.append(f"warning: {p.message}")
    if len(lines) == 1:
        lines.append(_not_considered(plan, pod, gpus))
    return printable_lines(lines)


def _gang_lines(plan: Plan, cluster: ClusterState, key: ObjectKey) -> list[str]:
    """A gang member's gang: its name, the count needed and each member's state in the plan."""
    gang = resolve_gangs(cluster.pods, cluster.groups)[0].get(key)
    if gang is None:
        return []
    needed = gang.problem if gang.needed is None else f"{gang.needed} needed"
    states: dict[ObjectKey, str] = {}
    for d in plan.decisions:
        states.setdefault(d.preemptor, f"placed on {d.node}")
        for v in d.victims:
            states.setdefault(v.pod, f"evicted for {d.preemptor}")
    for d in plan.already_fit:
        states.setdefault(d.preemptor, f"fits on {d.node}")
    for u in plan.unresolved:
        states.setdefault(u.preemptor, "unresolved")
    keys = set(gang.members)
    pods = {p.key: p for p in cluster.pods if p.key in keys}
    members = ", ".join(
        f"{m} ({pods[m].node_name or 'pending'}: {states.get(m, 'not planned')})" for m in gang.members
    )
    lines = [f"gang {gang.name} ({gang.source}): {needed}; members: {members}"]
    for m in gang.members:
        if m == key:
            continue
        for verdict in plan.verdicts.get(m, []):
            state = "eligible" if verdict.eligible else "protected"
            lines.append(
                f"member {m} for preemptor {verdict.preemptor}: {state} [{verdict.rule}] {verdict.reason}"
            )
    return lines


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
    gang = f", gang {v.gang} on {v.node}" if v.gang is not None else ""
    return f"{v.pod} ({v.gpus} GPU, priority {v.priority}, {measured(v, window)}{gang})"


def log_plan(
    log: logging.Logger, plan: Plan, mode: str, windows: Mapping[ObjectKey, UsageWindow], *, evicting: bool
) -> None:
    """The plan's log lines; mode: the pass's mode as logged, evicting: whether it evicts (enforce)."""
    for d in plan.decisions:
        if d.action == NOTICE:
            verb = (
                "giving" if evicting else "would give"
            ) + f" notice until {_time_json(d.notice_deadline)} to"
        else:
            verb = "evicting" if evicting else "would evict"
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
    for gone in plan.withdrawals:
        log.info(
            "notice withdrawn pod=%s for=%s reason=%s: %s", gone.pod, gone.target, gone.reason, gone.detail
        )
    for p in plan.pod_warnings:
        log.warning("ignored annotation pod=%s %s=%r: %s", p.pod, p.annotation, p.value, p.message)
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


def partly_evicted(planned: Decision, evicted: list[Victim]) -> str:
    """The victim gangs of a decision of which only some members were evicted: "gang partly evicted: k of
    n" for each ("" when every gang went whole or there is none)."""
    parts: list[str] = []
    for gang in sorted({v.gang for v in planned.victims if v.gang is not None}):
        n = sum(1 for v in planned.victims if v.gang == gang)
        k = sum(1 for v in evicted if v.gang == gang)
        if k < n:
            parts.append(f"gang {gang} partly evicted: {k} of {n}")
    return "; ".join(parts)


def preemptor_event(
    d: Decision, windows: Mapping[ObjectKey, UsageWindow], complete: bool, partial_gangs: str = ""
) -> str:
    victims = "; ".join(describe_victim(v, windows.get(v.pod)) for v in d.victims)
    partial = "" if complete else " (partial: an eviction was refused)"
    gang = f" (gang {d.gang})" if d.gang is not None else ""
    gangs = f"; {partial_gangs}" if partial_gangs else ""
    return printable(
        f"gpu-steward evicted idle GPU pods on node {d.node} to free {d.gpus_freed} GPUs "
        f"for it{gang}{partial}: {victims}{gangs}"
    )


def victim_event(d: Decision, v: Victim, window: UsageWindow | None, partial_gangs: str = "") -> str:
    gang = f", gang {d.gang}" if d.gang is not None else ""
    member = f"; member of gang {v.gang}, evicted with it" if v.gang is not None else ""
    gangs = f"; {partial_gangs}" if partial_gangs and v.gang is not None else ""
    return printable(
        f"Evicted by gpu-steward for pending pod {d.preemptor} (priority {d.preemptor_priority}, "
        f"{d.gpus_requested} GPU{gang}) on node {d.node}: {measured(v, window)}{member}{gangs}"
    )


def eviction_failed_event(preemptor: ObjectKey, outcome: str, message: str) -> str:
    return printable(f"gpu-steward could not evict it for {preemptor}: {outcome} {message}")


def invalid_annotation_event(w: AnnotationWarning) -> str:
    return printable(
        f"PriorityClass {w.priority_class}: {w.annotation}={w.value!r}: {w.message}; "
        "pods of this class are protected from GPU reclaim"
    )


def notice_event(d: Decision, v: Victim, window: UsageWindow | None, max_defer_seconds: int) -> str:
    """The Warning Event on a victim given notice: when, for whom, what was measured, how to object."""
    gang = f" (gang {d.gang})" if d.gang is not None else ""
    member = f"; member of gang {v.gang}, evicted with it" if v.gang is not None else ""
    return printable(
        f"gpu-steward will evict it after {_time_json(d.notice_deadline)} for pending pod {d.preemptor}"
        f"{gang} (priority {d.preemptor_priority}, {d.gpus_requested} GPU) on node {d.node}: "
        f"{measured(v, window)}{member}. Using its GPUs before then withdraws the notice; to object, "
        f"annotate the pod {DEFER_UNTIL_ANNOTATION}=<RFC 3339 time, at most {max_defer_seconds} s "
        f'ahead> or label it {NEVER_RECLAIM_LABEL}="true"'
    )


def withdrawn_event(w: Withdrawal) -> str:
    return printable(f"gpu-steward withdrew its notice{_for(w.target)}: {w.reason}: {w.detail}")


def ignored_event(p: PodWarning) -> str:
    return printable(f"{p.message}; the pod is not protected by it")
