"""Victim eligibility (issue 4 rules 0-8), PriorityClass annotations and PodDisruptionBudgets. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from automator.conventions import (
    ANN_CPU_IDLE_SECONDS,
    ANN_CPU_IDLE_THRESHOLD,
    ANN_GPU_IDLE_SECONDS,
    ANN_GPU_IDLE_THRESHOLD,
    ANN_MIN_PREEMPTABLE_PRIORITY,
    ANN_TOLERATION_SECONDS,
    NEVER_RECLAIM_LABEL,
    WORD_NAMESPACE_EXCLUDED,
    WORD_OPTED_OUT,
    WORD_RECENT_UNKNOWN,
    WORD_RECENTLY_BUSY,
)
from automator.fit import requirement_matches
from automator.model import JsonObj, PlannerConfig, PodUsage, UsageWindow
from automator.report import fmt_measure
from automator.resources import annotations_of, labels_of

# The longest usage window (and guaranteed run time) an annotation may ask for: 7 days. Longer is a typo
# (and a query Prometheus' retention cannot answer); the class's pods are then protected.
MAX_WINDOW_SECONDS = 7 * 86_400
# CPU thresholds are in cores, not a ratio: bounded by the largest machine anyone runs.
MAX_CPU_THRESHOLD_CORES = 4096.0


@dataclass(frozen=True)
class Malformed:
    annotation: str
    value: str
    message: str


@dataclass(frozen=True)
class ClassSettings:
    """A victim PriorityClass's annotations with the automator's defaults filled in."""

    min_preemptable: int | None
    toleration_seconds: int
    gpu_idle_seconds: int
    gpu_threshold: float
    cpu_idle_seconds: int
    cpu_threshold: float
    malformed: tuple[Malformed, ...] = ()

    @property
    def window(self) -> UsageWindow:
        return UsageWindow(self.gpu_idle_seconds, self.cpu_idle_seconds)


def _int(
    raw: Any, key: str, minimum: int | None, bad: list[Malformed], maximum: int | None = None
) -> int | None:
    text = str(raw).strip()
    try:
        value = int(text)
    except ValueError:
        bad.append(Malformed(key, str(raw), f"{key}: {str(raw)!r} is not an integer"))
        return None
    if minimum is not None and value < minimum:
        bad.append(Malformed(key, str(raw), f"{key}: {value} is below {minimum}"))
        return None
    if maximum is not None and value > maximum:
        bad.append(Malformed(key, str(raw), f"{key}: {value} is above {maximum} (7 days)"))
        return None
    return value


def _float(raw: Any, key: str, bad: list[Malformed], upper: float | None = None) -> float | None:
    try:
        value = float(str(raw).strip())
    except ValueError:
        bad.append(Malformed(key, str(raw), f"{key}: {str(raw)!r} is not a number"))
        return None
    if not math.isfinite(value) or value < 0:
        bad.append(Malformed(key, str(raw), f"{key}: {str(raw)!r} is not a finite number >= 0"))
        return None
    if upper is not None and value > upper:
        # GPU activity is a 0-1 ratio: a threshold like 5 (percent?) would make every pod idle.
        bad.append(Malformed(key, str(raw), f"{key}: {str(raw)!r} is above {upper:g} (a 0-1 ratio)"))
        return None
    return value


def class_settings(pc: JsonObj | None, config: PlannerConfig) -> ClassSettings:
    """Read the plugin's annotations: missing -> defaults, malformed -> recorded (the pod is protected)."""
    ann = annotations_of(pc) if pc is not None else {}
    bad: list[Malformed] = []
    minimum = (
        _int(ann[ANN_MIN_PREEMPTABLE_PRIORITY], ANN_MIN_PREEMPTABLE_PRIORITY, None, bad)
        if (ANN_MIN_PREEMPTABLE_PRIORITY in ann)
        else None
    )
    toleration = config.default_toleration_seconds
    if ANN_TOLERATION_SECONDS in ann:
        toleration = (
            _int(ann[ANN_TOLERATION_SECONDS], ANN_TOLERATION_SECONDS, None, bad, MAX_WINDOW_SECONDS) or 0
        )
    gpu_seconds = 0
    if ANN_GPU_IDLE_SECONDS in ann:
        gpu_seconds = _int(ann[ANN_GPU_IDLE_SECONDS], ANN_GPU_IDLE_SECONDS, 0, bad, MAX_WINDOW_SECONDS) or 0
    # The plugin's default window of 0 made `[0s]` queries read as idle: never use a zero window.
    if gpu_seconds <= 0:
        gpu_seconds = config.default_gpu_idle_seconds
    gpu_threshold = config.default_gpu_idle_threshold
    if ANN_GPU_IDLE_THRESHOLD in ann:
        parsed = _float(ann[ANN_GPU_IDLE_THRESHOLD], ANN_GPU_IDLE_THRESHOLD, bad, upper=1.0)
        gpu_threshold = parsed if parsed is not None else gpu_threshold
    cpu_seconds = 0
    if ANN_CPU_IDLE_SECONDS in ann:
        cpu_seconds = _int(ann[ANN_CPU_IDLE_SECONDS], ANN_CPU_IDLE_SECONDS, 0, bad, MAX_WINDOW_SECONDS) or 0
    cpu_threshold = 0.0
    if ANN_CPU_IDLE_THRESHOLD in ann:
        parsed = _float(ann[ANN_CPU_IDLE_THRESHOLD], ANN_CPU_IDLE_THRESHOLD, bad, MAX_CPU_THRESHOLD_CORES)
        cpu_threshold = parsed if parsed is not None else 0.0
    return ClassSettings(
        minimum, toleration, gpu_seconds, gpu_threshold, cpu_seconds, cpu_threshold, tuple(bad)
    )


# --- PodDisruptionBudgets -------------------------------------------------------------------------------


LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector_matches(selector: Mapping[str, Any] | None, pod_labels: Mapping[str, Any]) -> bool:
    """metav1.LabelSelector: matchLabels AND matchExpressions. A null selector matches nothing (policy/v1),
    an empty one everything. An unknown operator met raises ValueError: PdbIndex.covering then treats the
    PDB as protecting, since a PDB wrongly read as not selecting the pod would be unsafe."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if pod_labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key"), expr.get("operator")
        if op not in LABEL_SELECTOR_OPERATORS:  # Gt/Lt are node-selector only
            raise ValueError(f"spec.selector.matchExpressions: unknown operator {op!r}")
        if not requirement_matches(op, key in pod_labels, pod_labels.get(key), expr.get("values") or []):
            return False
    return True


@dataclass
class PdbIndex:
    """PDBs by namespace with the evictions each still allows in this pass."""

    by_namespace: dict[str, list[JsonObj]] = field(default_factory=dict)
    remaining: dict[tuple[str, str], int] = field(default_factory=dict)

    @classmethod
    def build(cls, pdbs: Iterable[JsonObj]) -> PdbIndex:
        index = cls()
        for pdb in pdbs:
            meta = pdb.get("metadata") or {}
            ns = str(meta.get("namespace") or "default")
            index.by_namespace.setdefault(ns, []).append(pdb)
            allowed = (pdb.get("status") or {}).get("disruptionsAllowed")
            # No status yet (controller has not observed it): the Eviction API would refuse; count as 0.
            if not isinstance(allowed, int) or isinstance(allowed, bool):
                allowed = 0
            index.remaining[(ns, str(meta.get("name")))] = allowed
        return index

    def covering(self, pod: JsonObj) -> tuple[list[tuple[str, str]], str | None]:
        """PDB ids selecting the pod, and a protection reason if an eviction would be refused."""
        meta = pod.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        pod_labels = labels_of(pod)
        ids: list[tuple[str, str]] = []
        for pdb in self.by_namespace.get(ns, ()):
            name = str((pdb.get("metadata") or {}).get("name"))
            try:
                selected = selector_matches((pdb.get("spec") or {}).get("selector"), pod_labels)
            except ValueError as exc:
                return [(ns, name)], f"PodDisruptionBudget {ns}/{name}: {exc}; treated as protecting"
            if selected:
                ids.append((ns, name))
        if len(ids) > 1:
            names = ", ".join(f"{n}/{m}" for n, m in ids)
            return ids, f"selected by several PodDisruptionBudgets ({names}): the Eviction API refuses (500)"
        for pdb_id in ids:
            if self.remaining.get(pdb_id, 0) <= 0:
                return ids, f"PodDisruptionBudget {pdb_id[0]}/{pdb_id[1]} allows 0 disruptions"
        return ids, None


# --- rules 2-8 (preemptor-independent part) -----------------------------------------------------------


@dataclass(frozen=True)
class Assessment:
    """A candidate victim's standing, computed once per plan.

    `blocked` (rule 0 or a malformed annotation/field) protects whatever the preemptor; otherwise rule 1
    (minimum) may make it eligible for a high enough preemptor; else the base verdict of rules 2-8 holds.
    """

    blocked: tuple[str, str] | None  # (rule, reason)
    min_preemptable: int | None
    eligible: bool
    rule: str
    reason: str


def base_verdict(
    settings: ClassSettings,
    usage: PodUsage | None,
    scheduled: datetime | None,
    now: datetime,
    min_coverage: float,
    recent_window: int = 300,
) -> tuple[bool, str, str]:
    """Rules 2-8 in order (the recent-activity checks between 6 and 7); returns (eligible, rule, reason)."""
    if settings.toleration_seconds < 0:
        return (
            False,
            "2-toleration-negative",
            f"toleration-seconds {settings.toleration_seconds} < 0: never preempted",
        )
    if scheduled is None:
        return False, "3-not-scheduled", "not scheduled yet (no PodScheduled=True condition)"
    age = (now - scheduled).total_seconds()
    min_age = max(settings.toleration_seconds, settings.gpu_idle_seconds, settings.cpu_idle_seconds)
    if age < min_age:
        return False, "4-too-young", f"scheduled {age:.0f} s ago, protected for {min_age} s"
    window = settings.gpu_idle_seconds
    activity = usage.gpu_activity if usage is not None else None
    if activity is not None and not math.isfinite(activity):
        activity = None
    if activity is None or usage is None:
        return False, "5-usage-unknown", f"GPU activity over {window} s unknown"
    if not usage.coverage >= min_coverage:
        return (
            False,
            "5-coverage-low",
            f"GPU samples cover {usage.coverage:.0%} of the {window} s window, below {min_coverage:.0%}",
        )
    if activity > settings.gpu_threshold:
        return (
            False,
            "6-gpu-busy",
            f"GPU activity {fmt_measure(activity)} over {window} s above threshold "
            f"{fmt_measure(settings.gpu_threshold)}",
        )
    recent = recent_verdict(settings, usage, recent_window)
    if recent is not None:
        return False, recent[0], recent[1]
    cpu_note = ""
    if settings.cpu_idle_seconds > 0:
        cores = usage.cpu_cores
        if cores is None or not math.isfinite(cores):
            return False, "7-cpu-unknown", f"CPU use over {settings.cpu_idle_seconds} s unknown"
        if cores > settings.cpu_threshold:
            return (
                False,
                "7-cpu-busy",
                f"CPU {fmt_measure(cores)} cores over {settings.cpu_idle_seconds} s above threshold "
                f"{fmt_measure(settings.cpu_threshold)}",
            )
        cpu_note = f", CPU {fmt_measure(cores)} cores <= {fmt_measure(settings.cpu_threshold)}"
    threshold = fmt_measure(settings.gpu_threshold)
    return (
        True,
        "8-idle",
        f"GPU activity {fmt_measure(activity)} over {window} s <= threshold {threshold}{cpu_note}",
    )


def recent_verdict(settings: ClassSettings, usage: PodUsage, recent_window: int) -> tuple[str, str] | None:
    """Issue 7 rule 1: the recent window's maximum must be known and at or below the threshold.

    An average over a long window hides a job that just started; the maximum over the last few minutes
    does not. Equal to the threshold counts as idle, as for the average.
    """
    recent = usage.gpu_recent_max
    if recent is None or not math.isfinite(recent):
        return (
            WORD_RECENT_UNKNOWN,
            f"{WORD_RECENT_UNKNOWN}: no GPU sample in the last {recent_window} s (data missing at the "
            "newest end)",
        )
    if recent > settings.gpu_threshold:
        return (
            WORD_RECENTLY_BUSY,
            f"{WORD_RECENTLY_BUSY}: GPU activity reached {fmt_measure(recent)} in the last "
            f"{recent_window} s, above threshold {fmt_measure(settings.gpu_threshold)}",
        )
    return None


def scope_verdict(pod: JsonObj, config: PlannerConfig) -> tuple[str, str] | None:
    """Issue 7 scope: which namespaces may lose pods, and the opt-out label (right after rule 0)."""
    ns = str((pod.get("metadata") or {}).get("namespace") or "default")
    if ns in config.exclude_namespaces:
        return (
            WORD_NAMESPACE_EXCLUDED,
            f"{WORD_NAMESPACE_EXCLUDED}: namespace {ns} is in --exclude-namespaces",
        )
    if config.victim_namespaces and ns not in config.victim_namespaces:
        return (
            WORD_NAMESPACE_EXCLUDED,
            f"{WORD_NAMESPACE_EXCLUDED}: namespace {ns} is not in --victim-namespaces",
        )
    if str(labels_of(pod).get(NEVER_RECLAIM_LABEL, "")).strip().lower() == "true":
        return WORD_OPTED_OUT, f'{WORD_OPTED_OUT}: labelled {NEVER_RECLAIM_LABEL}="true"'
    return None


def assess(
    settings: ClassSettings,
    usage: PodUsage | None,
    scheduled: datetime | None,
    now: datetime,
    config: PlannerConfig,
    pdb_reason: str | None,
    scope: tuple[str, str] | None = None,
) -> Assessment:
    blocked: tuple[str, str] | None = None
    if pdb_reason is not None:
        blocked = ("0-pdb", pdb_reason)
    elif scope is not None:
        blocked = scope
    elif settings.malformed:
        blocked = ("annotation-malformed", "; ".join(m.message for m in settings.malformed) + ": protected")
    eligible, rule, reason = base_verdict(
        settings, usage, scheduled, now, config.min_coverage, config.recent_window_seconds
    )
    return Assessment(blocked, settings.min_preemptable, eligible, rule, reason)


def verdict_for(assessment: Assessment, preemptor_priority: int) -> tuple[bool, str, str]:
    """Rule 0, scope (namespaces, opt-out) / malformed, then rule 1, then rules 2-8."""
    if assessment.blocked is not None:
        return False, assessment.blocked[0], assessment.blocked[1]
    minimum = assessment.min_preemptable
    if minimum is not None and preemptor_priority >= minimum:
        return (
            True,
            "1-minimum-preemptable-priority",
            f"preemptor priority {preemptor_priority} >= minimum-preemptable-priority {minimum}",
        )
    return assessment.eligible, assessment.rule, assessment.reason
