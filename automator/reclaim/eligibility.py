"""Victim eligibility (rules 0-8 of docs/reclaim.md) and PodDisruptionBudgets. Pure. The PriorityClass
annotations the rules read are class_settings.py."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from automator.objects.pdb import PodDisruptionBudget
from automator.objects.pod import Pod
from automator.objects.resources import FieldProblem, rfc3339
from automator.objects.selectors import selector_matches
from automator.reclaim.annotations import defer_until
from automator.reclaim.class_settings import ClassSettings
from automator.reclaim.formats import fmt_measure
from automator.reclaim.model import PlannerConfig, PodUsage, PodWarning
from steward_common.conventions import (
    DEFER_UNTIL_ANNOTATION,
    NEVER_RECLAIM_LABEL,
    WORD_DEFERRED,
    WORD_GANG_MALFORMED,
    WORD_GANG_MEMBER_PROTECTED,
    WORD_NAMESPACE_EXCLUDED,
    WORD_OPTED_OUT,
    WORD_RECENT_UNKNOWN,
    WORD_RECENTLY_BUSY,
)


class Rule(StrEnum):
    """The rule that makes a candidate victim eligible or protected (explain's [rule]): docs/reclaim.md's
    table, in the order they are checked, and the two protections outside it."""

    PDB = "0-pdb"
    NAMESPACE_EXCLUDED = WORD_NAMESPACE_EXCLUDED
    OPTED_OUT = WORD_OPTED_OUT
    DEFERRED = WORD_DEFERRED
    ANNOTATION_MALFORMED = "annotation-malformed"
    MINIMUM_PREEMPTABLE = "1-minimum-preemptable-priority"
    TOLERATION_NEGATIVE = "2-toleration-negative"
    NOT_SCHEDULED = "3-not-scheduled"
    TOO_YOUNG = "4-too-young"
    USAGE_UNKNOWN = "5-usage-unknown"
    COVERAGE_LOW = "5-coverage-low"
    GPU_BUSY = "6-gpu-busy"
    RECENT_UNKNOWN = WORD_RECENT_UNKNOWN
    RECENTLY_BUSY = WORD_RECENTLY_BUSY
    CPU_UNKNOWN = "7-cpu-unknown"
    CPU_BUSY = "7-cpu-busy"
    IDLE = "8-idle"
    RESOURCES_MALFORMED = "resources-malformed"  # a field of the pod itself is unreadable
    EXCLUDED = "excluded"  # its eviction was refused earlier in the pass
    GANG_MEMBER_PROTECTED = WORD_GANG_MEMBER_PROTECTED  # another member of its victim gang is protected
    GANG_MALFORMED = WORD_GANG_MALFORMED  # its gang's needed count is not a positive integer


# --- PodDisruptionBudgets -------------------------------------------------------------------------------


@dataclass
class PdbIndex:
    """PDBs by namespace with the evictions each still allows in this pass."""

    by_namespace: dict[str, list[PodDisruptionBudget]] = field(default_factory=dict)
    remaining: dict[tuple[str, str], int] = field(default_factory=dict)
    # per namespace, (name, selector) of its PDBs: read the first time a pod of the namespace is covered
    selectors: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)
    # per namespace, which of its PDBs a pod's labels may select (_Anchors), made with selectors
    anchors: dict[str, _Anchors] = field(default_factory=dict)

    @classmethod
    def build(cls, pdbs: Iterable[PodDisruptionBudget]) -> PdbIndex:
        index = cls()
        for pdb in pdbs:
            index.by_namespace.setdefault(pdb.namespace, []).append(pdb)
            index.remaining[(pdb.namespace, pdb.name)] = pdb.allowed
        return index

    def covering(self, pod: Pod) -> tuple[list[tuple[str, str]], str | None]:
        """PDB ids selecting the pod, and a protection reason if an eviction would be refused."""
        ns = pod.key.namespace
        pod_labels = pod.labels
        ids: list[tuple[str, str]] = []
        selectors = self.selectors.get(ns)
        if selectors is None:
            selectors = self.selectors[ns] = [
                (pdb.name, pdb.selector) for pdb in self.by_namespace.get(ns, ())
            ]
            self.anchors[ns] = _anchors(selectors)
        for i in _maybe_selecting(self.anchors[ns], len(selectors), pod_labels):
            name, selector = selectors[i]
            try:
                selected = selector_matches(selector, pod_labels)
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


# (the PDBs checked for every pod, {(label, value): the PDBs only a pod with that label may select}), as
# indices into a namespace's selectors: a PDB whose selector is matchLabels alone is filed under its first
# label (a pod without it is not selected), every other one is checked for every pod
_Anchors = tuple[list[int], dict[tuple[Any, Any], list[int]]]


def _anchors(selectors: list[tuple[str, Any]]) -> _Anchors:
    always: list[int] = []
    by_label: dict[tuple[Any, Any], list[int]] = {}
    for i, (_, selector) in enumerate(selectors):
        labels = selector.get("matchLabels") if type(selector) is dict else None
        if type(labels) is dict and labels and not selector.get("matchExpressions"):
            first = next(iter(labels.items()))
            # a None value is also met by a pod without the label (pod_labels.get gives None)
            if first[1] is not None and first[1].__hash__ is not None:
                by_label.setdefault(first, []).append(i)
                continue
        always.append(i)
    return always, by_label


def _maybe_selecting(anchors: _Anchors, count: int, pod_labels: Mapping[str, Any]) -> Iterable[int]:
    """The indices of the PDBs that may select a pod with these labels, in order."""
    always, by_label = anchors
    if not by_label:
        return range(count)
    try:
        found = [i for label in pod_labels.items() for i in by_label.get(label, ())]
    except TypeError:  # an unhashable label value: every PDB is checked
        return range(count)
    return sorted(always + found) if found else always


# --- rules 2-8 (preemptor-independent part) -----------------------------------------------------------


# Above every priority (Kubernetes priorities are 32-bit): Assessment.eligible_from of a protected pod.
NEVER = 2**62


class Assessment:
    """A candidate victim's standing, computed once per plan.

    `blocked` (rule 0 or a malformed annotation/field) protects whatever the preemptor; otherwise rule 1
    (minimum) may make it eligible for a high enough preemptor; else the base verdict of rules 2-8 holds.
    Its reason (a sentence with the measured numbers) is written only when a verdict is recorded or
    explained: most candidates of a large pass never need it.
    """

    __slots__ = ("_facts", "_reason", "blocked", "eligible", "eligible_from", "min_preemptable", "rule")

    def __init__(
        self,
        blocked: tuple[Rule, str] | None,
        min_preemptable: int | None,
        eligible: bool,
        rule: Rule,
        reason: str | None = None,
        facts: _Facts | None = None,
    ) -> None:
        self.blocked = blocked  # (rule, reason)
        self.min_preemptable = min_preemptable
        self.eligible = eligible
        self.rule = rule
        self._reason = reason
        self._facts = facts  # what base_reason needs, when the reason is not written yet
        # the lowest preemptor priority it is eligible for (verdict_rule), NEVER when none
        if blocked is not None:
            self.eligible_from = NEVER
        elif eligible:
            self.eligible_from = -NEVER
        else:
            self.eligible_from = NEVER if min_preemptable is None else min_preemptable

    @property
    def reason(self) -> str:
        if self._reason is None:
            assert self._facts is not None
            self._reason = base_reason(self.rule, *self._facts)
        return self._reason


# (settings, usage, seconds since scheduled, min coverage, recent window): the facts rules 2-8 read
_Facts = tuple[ClassSettings, PodUsage | None, float | None, float, int]


def base_rule(
    settings: ClassSettings, usage: PodUsage | None, age: float | None, min_coverage: float
) -> Rule:
    """Rules 2-8 in order (the recent-activity checks between 6 and 7): the rule that decides, IDLE when
    the pod is eligible. age: seconds since scheduled, None when not scheduled."""
    if settings.toleration_seconds < 0:
        return Rule.TOLERATION_NEGATIVE
    if age is None:
        return Rule.NOT_SCHEDULED
    if age < max(settings.toleration_seconds, settings.gpu_idle_seconds, settings.cpu_idle_seconds):
        return Rule.TOO_YOUNG
    activity = usage.gpu_activity if usage is not None else None
    if usage is None or activity is None or not math.isfinite(activity):
        return Rule.USAGE_UNKNOWN
    if not usage.coverage >= min_coverage:
        return Rule.COVERAGE_LOW
    if activity > settings.gpu_threshold:
        return Rule.GPU_BUSY
    recent = usage.gpu_recent_max
    if recent is None or not math.isfinite(recent):
        return Rule.RECENT_UNKNOWN
    if recent > settings.gpu_threshold:
        return Rule.RECENTLY_BUSY
    if settings.cpu_idle_seconds > 0:
        cores = usage.cpu_cores
        if cores is None or not math.isfinite(cores):
            return Rule.CPU_UNKNOWN
        if cores > settings.cpu_threshold:
            return Rule.CPU_BUSY
    return Rule.IDLE


def base_reason(
    rule: Rule,
    settings: ClassSettings,
    usage: PodUsage | None,
    age: float | None,
    min_coverage: float,
    recent_window: int,
) -> str:
    """The sentence for the rule base_rule chose, with the measured numbers."""
    window, cpu_window = settings.gpu_idle_seconds, settings.cpu_idle_seconds
    if rule is Rule.TOLERATION_NEGATIVE:
        return f"toleration-seconds {settings.toleration_seconds} < 0: never preempted"
    if rule is Rule.NOT_SCHEDULED:
        return "not scheduled yet (no PodScheduled=True condition)"
    if rule is Rule.TOO_YOUNG:
        min_age = max(settings.toleration_seconds, window, cpu_window)
        return f"scheduled {age:.0f} s ago, protected for {min_age} s"
    if rule is Rule.USAGE_UNKNOWN or usage is None:
        return f"GPU activity over {window} s unknown"
    if rule is Rule.COVERAGE_LOW:
        return f"GPU samples cover {usage.coverage:.0%} of the {window} s window, below {min_coverage:.0%}"
    threshold = fmt_measure(settings.gpu_threshold)
    activity = fmt_measure(usage.gpu_activity)
    if rule is Rule.GPU_BUSY:
        return f"GPU activity {activity} over {window} s above threshold {threshold}"
    if rule is Rule.RECENT_UNKNOWN or rule is Rule.RECENTLY_BUSY:
        return _recent_reason(rule, settings, usage, recent_window)
    cores = fmt_measure(usage.cpu_cores)
    if rule is Rule.CPU_UNKNOWN:
        return f"CPU use over {cpu_window} s unknown"
    cpu_threshold = fmt_measure(settings.cpu_threshold)
    if rule is Rule.CPU_BUSY:
        return f"CPU {cores} cores over {cpu_window} s above threshold {cpu_threshold}"
    cpu_note = f", CPU {cores} cores <= {cpu_threshold}" if cpu_window > 0 else ""
    return f"GPU activity {activity} over {window} s <= threshold {threshold}{cpu_note}"


def _recent_reason(rule: Rule, settings: ClassSettings, usage: PodUsage, recent_window: int) -> str:
    if rule is Rule.RECENT_UNKNOWN:
        return (
            f"{WORD_RECENT_UNKNOWN}: no GPU sample in the last {recent_window} s (data missing at the "
            "newest end)"
        )
    return (
        f"{WORD_RECENTLY_BUSY}: GPU activity reached {fmt_measure(usage.gpu_recent_max)} in the last "
        f"{recent_window} s, above threshold {fmt_measure(settings.gpu_threshold)}"
    )


def scope_verdict(pod: Pod, config: PlannerConfig) -> tuple[Rule, str] | None:
    """Scope: which namespaces may lose pods, and the opt-out label (right after rule 0)."""
    ns = pod.key.namespace
    if ns in config.exclude_namespaces:
        return (
            Rule.NAMESPACE_EXCLUDED,
            f"{WORD_NAMESPACE_EXCLUDED}: namespace {ns} is in --exclude-namespaces",
        )
    if config.victim_namespaces and ns not in config.victim_namespaces:
        return (
            Rule.NAMESPACE_EXCLUDED,
            f"{WORD_NAMESPACE_EXCLUDED}: namespace {ns} is not in --victim-namespaces",
        )
    if str(pod.labels.get(NEVER_RECLAIM_LABEL, "")).strip().lower() == "true":
        return Rule.OPTED_OUT, f'{WORD_OPTED_OUT}: labelled {NEVER_RECLAIM_LABEL}="true"'
    return None


def deferral(
    pod: Pod, now: datetime, config: PlannerConfig
) -> tuple[tuple[Rule, str] | None, PodWarning | None]:
    """The owner's objection (reclaim-defer-until): (the protection while it is ahead and at most
    --max-defer-seconds away, a warning when the value is ignored: unreadable, past or too far out)."""
    until = defer_until(pod.annotations)
    if until is None:
        return None, None
    raw = str(pod.annotations.get(DEFER_UNTIL_ANNOTATION))
    if isinstance(until, FieldProblem):
        why = f"{until.problem}: ignored"
    elif until <= now:
        why = f"{rfc3339(until)} is in the past: ignored"
    elif (until - now).total_seconds() > config.max_defer_seconds:
        why = (
            f"{rfc3339(until)} is more than {config.max_defer_seconds} s (--max-defer-seconds) ahead: ignored"
        )
    else:
        return (Rule.DEFERRED, f"{WORD_DEFERRED}: its owner deferred reclaim until {rfc3339(until)}"), None
    return None, PodWarning(pod.key, DEFER_UNTIL_ANNOTATION, raw, f"{DEFER_UNTIL_ANNOTATION}: {why}")


def assess(
    settings: ClassSettings,
    usage: PodUsage | None,
    age: float | None,
    config: PlannerConfig,
    pdb_reason: str | None,
    scope: tuple[Rule, str] | None = None,
    deferred: tuple[Rule, str] | None = None,
) -> Assessment:
    """age: seconds since the pod was scheduled (now - scheduled), None when it is not scheduled."""
    blocked: tuple[Rule, str] | None = None
    if pdb_reason is not None:
        blocked = (Rule.PDB, pdb_reason)
    elif scope is not None:
        blocked = scope
    elif deferred is not None:
        blocked = deferred
    elif settings.malformed:
        why = "; ".join(m.message for m in settings.malformed) + ": protected"
        blocked = (Rule.ANNOTATION_MALFORMED, why)
    rule = base_rule(settings, usage, age, config.min_coverage)
    facts = (settings, usage, age, config.min_coverage, config.recent_window_seconds)
    return Assessment(blocked, settings.min_preemptable, rule is Rule.IDLE, rule, None, facts)


def verdict_rule(assessment: Assessment, preemptor_priority: int) -> tuple[bool, Rule]:
    """(eligible, rule): rule 0, scope (namespaces, opt-out) / malformed, then rule 1, then rules 2-8."""
    if assessment.blocked is not None:
        return False, assessment.blocked[0]
    minimum = assessment.min_preemptable
    if minimum is not None and preemptor_priority >= minimum:
        return True, Rule.MINIMUM_PREEMPTABLE
    return assessment.eligible, assessment.rule


def verdict_reason(assessment: Assessment, preemptor_priority: int) -> str:
    """verdict_rule's reason (a Verdict reads it when it is explained)."""
    if assessment.blocked is not None:
        return assessment.blocked[1]
    minimum = assessment.min_preemptable
    if minimum is not None and preemptor_priority >= minimum:
        return f"preemptor priority {preemptor_priority} >= minimum-preemptable-priority {minimum}"
    return assessment.reason
