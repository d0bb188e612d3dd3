"""Every annotation and label key, Event reason and component name the automator reads or writes.

One home: the planner, the adapters, the docs tables (tests/automator/settings/test_docs_consistency.py)
and the tests take them from here. Pure: constants only.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


def _named(prefix: str) -> tuple[str, ...]:
    """The values of this module's constants named prefix..., in the order they are written (so a new
    one joins its set where it is declared, and cannot be left out of it)."""
    return tuple(value for name, value in globals().items() if name.startswith(prefix))


# --- annotations -------------------------------------------------------------------------------------
# On a PriorityClass: its pending pods may reclaim idle GPUs (value "true").
RECLAIM_ANNOTATION: Final = "gpu-steward.io/reclaim-idle-gpus"
# On a preemptor: when victims were last evicted for it (RFC 3339), for the cooldown.
LAST_RECLAIM_ANNOTATION: Final = "gpu-steward.io/last-reclaim-time"
# On a preemptor, written with last-reclaim-time: the node chosen for it, the victims evicted for it
# (comma-separated namespace/name) and how many rounds of victims it was given (for --max-reclaims-...).
RECLAIM_NODE_ANNOTATION: Final = "gpu-steward.io/reclaim-node"
RECLAIM_VICTIMS_ANNOTATION: Final = "gpu-steward.io/reclaim-victims"
RECLAIM_COUNT_ANNOTATION: Final = "gpu-steward.io/reclaim-count"
# On a victim, written together when the service gives notice instead of evicting (--notice-seconds): the
# time after which it may be evicted (RFC 3339) and the preemptor or preemptor gang (namespace/name) it is
# evicted for; both removed when the notice is withdrawn. The annotations are the notice's only state.
RECLAIM_NOTICE_ANNOTATION: Final = "gpu-steward.io/reclaim-notice"
RECLAIM_NOTICE_FOR_ANNOTATION: Final = "gpu-steward.io/reclaim-notice-for"
# On a pod, written by its owner (never by the automator): protected as a victim until this RFC 3339 time
# (reason word deferred), at most --max-defer-seconds from now.
DEFER_UNTIL_ANNOTATION: Final = "gpu-steward.io/reclaim-defer-until"
# On the leader election Lease: the evictions of the last hour, by minute, so that the hourly budget
# survives a restart and passes to the next leader.
EVICTIONS_ANNOTATION: Final = "gpu-steward.io/evictions-last-hour"
# On the Lease too, written before each eviction: the recent reclaims (preemptor, time, controller, the
# cooldown annotations meant for it), so that the next leader keeps them in cooldown (service/fencing.py).
RECLAIMS_ANNOTATION: Final = "gpu-steward.io/recent-reclaims"
# What the automator writes on a served preemptor, and on a victim it gives notice to.
PREEMPTOR_ANNOTATIONS: Final[tuple[str, ...]] = (
    LAST_RECLAIM_ANNOTATION,
    RECLAIM_NODE_ANNOTATION,
    RECLAIM_VICTIMS_ANNOTATION,
    RECLAIM_COUNT_ANNOTATION,
)
NOTICE_ANNOTATIONS: Final[tuple[str, ...]] = (RECLAIM_NOTICE_ANNOTATION, RECLAIM_NOTICE_FOR_ANNOTATION)
# Every annotation the automator writes (the only ones its ValidatingAdmissionPolicy lets it change).
WRITTEN_ANNOTATIONS: Final[tuple[str, ...]] = PREEMPTOR_ANNOTATIONS + NOTICE_ANNOTATIONS
# Kueue (docs/kueue.md). On a Workload: Kueue's priority boost (KEP-7990), written with the owner annotation
# that says the automator wrote it (a boost without it is the user's, left alone); the waiting Workload a
# deactivated Workload gave its quota to (namespace/name). On a PriorityClass: "true" lets its Workloads
# yield their quota to a waiting Workload of the same priority.
KUEUE_BOOST_ANNOTATION: Final = "kueue.x-k8s.io/priority-boost"
KUEUE_BOOST_OWNER_ANNOTATION: Final = "gpu-steward.io/priority-boost-owner"
KUEUE_BOOST_OWNER: Final = "gpu-steward"
KUEUE_DEACTIVATED_FOR_ANNOTATION: Final = "gpu-steward.io/deactivated-for"
KUEUE_YIELD_TO_EQUAL_ANNOTATION: Final = "gpu-steward.io/kueue-yield-to-equal"
# Every annotation the automator writes on a Workload.
KUEUE_WRITTEN_ANNOTATIONS: Final[tuple[str, ...]] = (
    KUEUE_BOOST_ANNOTATION,
    KUEUE_BOOST_OWNER_ANNOTATION,
    KUEUE_DEACTIVATED_FOR_ANNOTATION,
)
# Victim-side keys are the scheduler plugin's, so existing PriorityClasses keep working.
PLUGIN_PREFIX: Final = "reclaim-idle-resource.scheduling.x-k8s.io/"
ANN_MIN_PREEMPTABLE_PRIORITY: Final = PLUGIN_PREFIX + "minimum-preemptable-priority"
ANN_TOLERATION_SECONDS: Final = PLUGIN_PREFIX + "toleration-seconds"
ANN_GPU_IDLE_SECONDS: Final = PLUGIN_PREFIX + "gpu-idle-seconds"
ANN_GPU_IDLE_THRESHOLD: Final = PLUGIN_PREFIX + "gpu-idle-usage-threshold"
ANN_CPU_IDLE_SECONDS: Final = PLUGIN_PREFIX + "cpu-idle-seconds"
ANN_CPU_IDLE_THRESHOLD: Final = PLUGIN_PREFIX + "cpu-idle-usage-threshold"
# Every PriorityClass annotation the planner reads, in docs/reclaim.md's table order (the order above).
CLASS_ANNOTATIONS: Final[tuple[str, ...]] = (RECLAIM_ANNOTATION, *_named("ANN_"))

# --- labels ------------------------------------------------------------------------------------------
# On a pod: "true" keeps it from ever being a victim (reason opted-out).
NEVER_RECLAIM_LABEL: Final = "gpu-steward.io/never-reclaim"
# Labels of the Prometheus series the automator reads (the recorded series carry them).
NAMESPACE_LABEL: Final = "namespace"
POD_LABEL: Final = "pod"

# --- gangs: the keys that make a pod a member of a gang, in the order they are read ------------------------
# (spec.schedulingGroup.podGroupName and spec.workloadRef are fields, read before these)
GANG_COSCHEDULING_LABEL: Final = "scheduling.x-k8s.io/pod-group"
GANG_VOLCANO_ANNOTATION: Final = "scheduling.k8s.io/group-name"
GANG_KAI_ANNOTATION: Final = "pod-group-name"
GANG_KUEUE_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
GANG_KUEUE_COUNT_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-total-count"
GANG_LWS_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-key"
GANG_LWS_SIZE_ANNOTATION: Final = "leaderworkerset.sigs.k8s.io/size"
GANG_JOBSET_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"

# --- resources ---------------------------------------------------------------------------------------
DEFAULT_GPU_RESOURCE: Final = "nvidia.com/gpu"

# --- Events (reasons CamelCase, as Kubernetes components write them) ----------------------------------
REASON_VICTIM: Final = "GpuIdleReclaimed"
REASON_PREEMPTOR: Final = "GpuReclaimPreemptor"
REASON_EVICTION_FAILED: Final = "GpuReclaimEvictionFailed"
REASON_INVALID_ANNOTATION: Final = "InvalidReclaimAnnotation"
REASON_GAVE_UP: Final = "GpuReclaimGaveUp"
REASON_NOTICE: Final = "GpuReclaimNotice"
REASON_NOTICE_WITHDRAWN: Final = "GpuReclaimNoticeWithdrawn"
EVENT_REASONS: Final[tuple[str, ...]] = _named("REASON_")
# On a Workload the automator set spec.active: false (docs/kueue.md; not a pod's, so not in the set above).
KUEUE_REASON_DEACTIVATED: Final = "GpuIdleWorkloadDeactivated"

# --- reason words (what a user sees at the start of a verdict or an unresolved reason) -----------------
# Victim protections (explain's [rule]):
WORD_RECENT_UNKNOWN: Final = "recent-usage-unknown"
WORD_RECENTLY_BUSY: Final = "recently-busy"
WORD_OPTED_OUT: Final = "opted-out"
WORD_NAMESPACE_EXCLUDED: Final = "namespace-excluded"
# The owner's reclaim-defer-until is still ahead (and within --max-defer-seconds):
WORD_DEFERRED: Final = "deferred"
# A gang member whose gang is not eligible as a whole (explain's [rule]):
WORD_GANG_MEMBER_PROTECTED: Final = "gang-member-protected"
# Unresolved preemptors (unresolved[].reason starts with the word):
WORD_NOMINATED: Final = "scheduler-nominated"
WORD_COOLDOWN: Final = "cooldown"
WORD_GAVE_UP: Final = "gave-up"
WORD_BUDGET: Final = "eviction-budget"
# Its victims would take the pods under notice past --max-notices.
WORD_NOTICE_BUDGET: Final = "notice-budget"
# A gang whose needed count is not a positive integer (its members: protected victims, unresolved preemptors).
WORD_GANG_MALFORMED: Final = "gang-malformed"
# A preemptor gang whose members could not all be placed: nothing is evicted for it.
WORD_GANG_DOES_NOT_FIT: Final = "gang-does-not-fit"
# Kueue (docs/kueue.md): why a waiting Workload is not served (kueue.unresolved[].reason), why a boost
# goes (kueue.unboost[].reason), why a Workload is left alone (kueue.left_alone[].reason).
WORD_KUEUE_MALFORMED: Final = "kueue-malformed"
WORD_KUEUE_QUEUE_UNKNOWN: Final = "kueue-queue-unknown"
WORD_KUEUE_NO_PREEMPTION: Final = "kueue-no-preemption"
WORD_KUEUE_NO_IDLE: Final = "kueue-no-idle-workload"
WORD_KUEUE_QUOTA_FREE: Final = "kueue-quota-free"
WORD_KUEUE_NO_SET: Final = "kueue-no-set-covers"
WORD_KUEUE_SEARCH_CUT_OFF: Final = "kueue-search-cut-off"
WORD_KUEUE_RELEASING: Final = "kueue-quota-releasing"
WORD_KUEUE_BUSY: Final = "kueue-not-idle"
WORD_KUEUE_NOT_ADMITTED: Final = "kueue-not-admitted"
WORD_KUEUE_NOTHING_WAITS: Final = "kueue-nothing-waits"
WORD_KUEUE_FOREIGN_BOOST: Final = "kueue-foreign-boost"
# Written by the actuator when the preemptor read again just before its victims go is not the one planned.
WORD_PREEMPTOR_CHANGED: Final = "preemptor-changed"


class UnresolvedReason(StrEnum):
    """Why a preemptor stays pending, in a bounded set: the `reason` label of
    gpu_steward_automator_unresolved_preemptors, set on each Unresolved where its reason text is written."""

    NO_FIT = "no-fit"  # no node fits even after evicting every eligible idle pod
    NO_NODE = "no-node"  # no node can run it whatever is evicted (or no node at all)
    MALFORMED_POD = "malformed-pod"  # its requests cannot be read
    NOMINATED = WORD_NOMINATED
    COOLDOWN = WORD_COOLDOWN
    GAVE_UP = WORD_GAVE_UP
    EVICTION_BUDGET = WORD_BUDGET
    PREEMPTOR_CHANGED = WORD_PREEMPTOR_CHANGED
    INTERRUPTED = "interrupted"  # the pass's actions stopped first (leadership, throttling, re-plans spent)
    GANG_MALFORMED = WORD_GANG_MALFORMED
    GANG_DOES_NOT_FIT = WORD_GANG_DOES_NOT_FIT
    NOTICE_BUDGET = WORD_NOTICE_BUDGET


class NoticeWithdrawal(StrEnum):
    """Why a notice is withdrawn (the Event's text starts with it; the `reason` label of
    gpu_steward_automator_notices_withdrawn_total), in the order they are checked."""

    MALFORMED = "malformed"  # a notice annotation is unreadable (never read as a deadline passed)
    OPTED_OUT = WORD_OPTED_OUT  # labelled never-reclaim
    DEFERRED = WORD_DEFERRED  # its owner deferred it
    BUSY = "busy"  # the victim (or a member of its gang) is busy again
    USAGE_UNKNOWN = "usage-unknown"  # its data are unknown (no samples, coverage low, stale)
    PREEMPTOR_STARTED = "preemptor-started"  # the preemptor (or its gang) was scheduled
    PREEMPTOR_GONE = "preemptor-gone"  # no such pending preemptor any more
    PREEMPTOR_FITS = "preemptor-fits"  # it fits without evictions
    OTHER_VICTIMS = "other-victims"  # it is chosen for other victims
    NOT_PLANNED = "not-planned"  # the plan no longer picks the victim for it


# Event source component and the events.k8s.io reporting controller.
COMPONENT: Final = "gpu-steward-automator"
REPORTING_COMPONENT: Final = "gpu-steward.io/automator"
DEFAULT_LEASE_NAME: Final = "gpu-steward-automator"
