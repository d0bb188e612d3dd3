"""The planner's vocabulary: its settings, the usage it reads, and the plan it makes (decisions, verdicts,
unresolved preemptors). Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from automator.objects.gang import GangWarning
from automator.objects.keys import ObjectKey
from steward_common.conventions import DEFAULT_GPU_RESOURCE, NoticeWithdrawal, UnresolvedReason
from steward_common.series import IDLE_THRESHOLD


@dataclass(frozen=True)
class PodUsage:
    gpu_activity: float | None  # 0-1 average over the pod's window, max over its GPUs; None = unknown
    coverage: float = 1.0  # fraction of the window with samples, 0-1
    cpu_cores: float | None = None  # average CPU cores over the pod's cpu window; None = unknown
    # Highest GPU activity over the recent window (--recent-window, the same for every pod), 0-1;
    # None = no sample in that window (the pod is then protected: recent-usage-unknown).
    gpu_recent_max: float | None = None


@dataclass(frozen=True)
class PlannerConfig:
    gpu_resources: tuple[str, ...] = (DEFAULT_GPU_RESOURCE,)
    default_gpu_idle_seconds: int = 1800
    default_gpu_idle_threshold: float = IDLE_THRESHOLD
    default_toleration_seconds: int = 0
    min_coverage: float = 0.8
    cooldown_seconds: int = 300
    recent_window_seconds: int = 300
    max_reclaims_per_preemptor: int = 3
    max_evictions_per_pass: int = 10
    # Namespaces whose pods are never victims; victim_namespaces: the only ones that may be (empty = all).
    exclude_namespaces: tuple[str, ...] = ("kube-system",)
    victim_namespaces: tuple[str, ...] = ()
    # Seconds of notice before a victim is evicted (0: evicted at once, no notice), the furthest an owner
    # may defer (reclaim-defer-until) and the pods under notice at once (None: 4 x max_evictions_per_pass).
    notice_seconds: int = 0
    max_defer_seconds: int = 86_400
    max_notices: int | None = None

    @property
    def notice_limit(self) -> int:
        return 4 * self.max_evictions_per_pass if self.max_notices is None else self.max_notices


# What a decision does with its victims: evicts them, or gives them notice first (--notice-seconds).
EVICT = "evict"
NOTICE = "notice"


@dataclass(frozen=True)
class UsageWindow:
    gpu_seconds: int  # > 0 always (a zero/unset window falls back to the default: never a [0s] window)
    cpu_seconds: int  # 0 = CPU not checked for this pod


@dataclass(frozen=True)
class Victim:
    pod: ObjectKey
    gpus: int
    priority: int
    gpu_activity: float | None
    cpu_cores: float | None
    scheduled_at: datetime | None
    node: str = ""  # where it runs (a victim gang's members may run on other nodes than the decision's)
    gang: str | None = None  # its gang (namespace/name): evicted with all its members
    noticed: datetime | None = None  # the deadline of its notice for the decision's preemptor, if it has one


@dataclass(frozen=True)
class Decision:
    preemptor: ObjectKey
    preemptor_priority: int
    gpus_requested: int
    node: str
    victims: tuple[Victim, ...]
    gpus_freed: int
    free_gpus_before: int
    gang: str | None = None  # the preemptor's gang (namespace/name): placed with its members or not at all
    action: str = EVICT  # NOTICE: the victims are told, evicted by a later pass after notice_deadline
    notice_deadline: datetime | None = None  # the latest of its victims' deadlines (with notice only)

    @property
    def target(self) -> str:
        """Who the victims are noticed for: the preemptor gang, else the preemptor (reclaim-notice-for)."""
        return self.gang if self.gang is not None else str(self.preemptor)


@dataclass(frozen=True)
class Unresolved:
    preemptor: ObjectKey
    reason: str  # the text the plan, report and logs show
    kind: UnresolvedReason  # the bounded reason (the metric's `reason` label), set where the text is made
    gang: str | None = None


@dataclass(frozen=True)
class CutOff:
    """A node whose victim-set search ran out of budget: skipped for that preemptor (never a larger set)."""

    preemptor: ObjectKey
    node: str
    reason: str


@dataclass(frozen=True)
class UnderNotice:
    """A candidate victim carrying a readable notice as the pass read it."""

    pod: ObjectKey
    target: str
    deadline: datetime


@dataclass(frozen=True)
class Withdrawal:
    """A notice the pass withdraws: its annotations removed, a Normal Event with the reason."""

    pod: ObjectKey
    target: str  # as annotated ("" when unreadable)
    reason: NoticeWithdrawal
    detail: str  # the sentence after the reason


@dataclass(frozen=True)
class PodWarning:
    """An owner's annotation on a pod that is ignored (a warning Event on the pod)."""

    pod: ObjectKey
    annotation: str
    value: str
    message: str


@dataclass(frozen=True)
class AnnotationWarning:
    priority_class: str
    annotation: str
    value: str
    message: str
    pods: tuple[ObjectKey, ...]  # pods of that class (where to emit the warning Event)


class Verdict:
    """Why a candidate victim is eligible or protected for one preemptor. The reason may be given as a
    function, called the first time it is read: a large pass records verdicts it never explains."""

    __slots__ = ("_reason", "eligible", "preemptor", "rule")

    def __init__(
        self, preemptor: ObjectKey, eligible: bool, rule: str, reason: str | Callable[[], str]
    ) -> None:
        self.preemptor = preemptor
        self.eligible = eligible
        # e.g. "0-pdb", "1-minimum-preemptable-priority", "2-toleration-negative", ..., "8-idle"
        self.rule = rule
        self._reason = reason

    @property
    def reason(self) -> str:
        """A human sentence with the measured numbers."""
        if not isinstance(self._reason, str):
            self._reason = self._reason()
        return self._reason

    def _fields(self) -> tuple[ObjectKey, bool, str, str]:
        return (self.preemptor, self.eligible, self.rule, self.reason)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Verdict) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (
            f"Verdict(preemptor={self.preemptor!r}, eligible={self.eligible!r}, rule={self.rule!r}, "
            f"reason={self.reason!r})"
        )


@dataclass
class Plan:
    decisions: list[Decision]
    unresolved: list[Unresolved]
    warnings: list[AnnotationWarning]
    # per candidate victim, per preemptor considered: why eligible / protected (for explain and logs)
    verdicts: dict[ObjectKey, list[Verdict]]
    skipped_cooldown: list[ObjectKey]
    # Preemptors that fit on a node as it is: nothing is evicted for them (victims always empty); they
    # take their GPUs on that node for the rest of the pass. `decisions` only holds decisions that evict.
    already_fit: list[Decision] = field(default_factory=list)
    search_cut_off: list[CutOff] = field(default_factory=list)
    # Preemptors that reached --max-reclaims-per-preemptor this pass (a warning Event each).
    gave_up: list[ObjectKey] = field(default_factory=list)
    # Candidate victims (GPU pods on nodes) and how many of them had unknown usage (alert: rules not loaded).
    candidates: int = 0
    candidates_usage_unknown: int = 0
    # Gangs whose group object is not in the snapshot (needed counted from the pods listed), one each.
    gang_warnings: list[GangWarning] = field(default_factory=list)
    # The preemptor gangs of the pass: name -> (members needed, members running)
    gang_needs: dict[str, tuple[int | None, int]] = field(default_factory=dict)
    # Notice (docs/reclaim.md, "Notice"): whether the output shows it (--notice-seconds > 0 or a pod carries
    # a notice), the pods under notice, the notices withdrawn, and owners' annotations ignored.
    notice_shown: bool = False
    under_notice: list[UnderNotice] = field(default_factory=list)
    withdrawals: list[Withdrawal] = field(default_factory=list)
    pod_warnings: list[PodWarning] = field(default_factory=list)
