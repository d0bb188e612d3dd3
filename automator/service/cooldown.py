"""What the actuator remembers between passes. Pure: no I/O.

The reclaim annotations written on a served preemptor (read and written by reclaim/annotations.py) keep it
in the planner's cooldown; the memory is their backstop when patching failed or the next list does not
show them yet.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import msgspec

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.objects.resources import FieldError
from automator.reclaim.annotations import last_reclaim, reclaim_node, reclaim_victims
from steward_common.conventions import EVICTIONS_ANNOTATION
from steward_common.settingspec import whole_number

HOUR = timedelta(hours=1)


@dataclass
class ActuatorState:
    """What the service remembers between passes (per process; lost on failover, which is harmless)."""

    # Warnings already turned into Events: (class, annotation, value, pod).
    warned: set[tuple[str, str, str, ObjectKey]] = field(default_factory=set)
    # Preemptors we evicted for, when, and the annotations written (or meant to be): a backstop for the
    # annotations if patching failed or the next list does not show them yet, so a pass never evicts twice
    # for the same preemptor.
    reclaimed: dict[ObjectKey, tuple[datetime, dict[str, str]]] = field(default_factory=dict)
    # Times of accepted evictions in the last hour (--max-evictions-per-hour, a sliding window).
    evictions: deque[datetime] = field(default_factory=deque)
    # Preemptors already given a gave-up warning Event: (key, uid).
    gave_up_warned: set[tuple[ObjectKey, str]] = field(default_factory=set)
    # The controller (kind, uid) of each remembered preemptor: its replacement shares the cooldown
    # (service/fencing.py).
    controllers: dict[ObjectKey, tuple[str, str]] = field(default_factory=dict)
    # Kueue: when each waiting Workload was last served (a boost or deactivation written for it).
    kueue_served: dict[ObjectKey, datetime] = field(default_factory=dict)

    def evictions_last_hour(self, now: datetime) -> int:
        while self.evictions and now - self.evictions[0] >= HOUR:
            self.evictions.popleft()
        return len(self.evictions)


def _per_minute(evictions: Iterable[datetime]) -> Counter[int]:
    """Evictions counted by Unix minute: the Lease record's unit."""
    return Counter(int(when.timestamp()) // 60 for when in evictions)


def evictions_record(evictions: Iterable[datetime], now: datetime) -> dict[str, str]:
    """The last hour's evictions as the Lease annotation: `minute:count,...` (Unix minutes, at most 61)."""
    minutes = _per_minute(when for when in evictions if now - when < HOUR)
    return {EVICTIONS_ANNOTATION: ",".join(f"{m}:{c}" for m, c in sorted(minutes.items()))}


def restore_evictions(state: ActuatorState, annotations: Mapping[str, str], now: datetime, cap: int) -> int:
    """Merge the evictions recorded on the Lease into state (per minute, the larger count); how many
    were added. Idempotent: reading the same record again adds nothing.

    A minute's recorded evictions count from the end of that minute (they expire a little later than
    they happened, never sooner). An unreadable record counts as the whole budget spent now.
    """
    text = annotations.get(EVICTIONS_ANNOTATION)
    if not text:
        return 0
    own = _per_minute(state.evictions)
    added: list[datetime] = []
    try:
        for entry in text.split(","):
            minute_text, count_text = entry.split(":", 1)
            minute, count = whole_number(minute_text), whole_number(count_text)
            if minute < 0 or count < 0:
                raise ValueError(f"negative entry {entry!r}")
            end = datetime.fromtimestamp((minute + 1) * 60, tz=UTC)
            missing = min(count, cap) - own.get(minute, 0)
            if now - end < HOUR and missing > 0:
                added += [min(end, now)] * missing
    except (ValueError, OverflowError, OSError):
        added = [now] * max(0, cap - len(state.evictions))
    added = sorted(added)[-cap:] if cap else []
    state.evictions = deque(sorted([*state.evictions, *added]))
    return len(added)


def with_reclaim_memory(
    cluster: ClusterState, reclaimed: Mapping[ObjectKey, tuple[datetime, Mapping[str, str]]]
) -> ClusterState:
    """The cluster with our remembered reclaim annotations written into preemptors that show older ones."""
    if not reclaimed:
        return cluster
    pods: list[Pod] = []
    for pod in cluster.pods:
        memory = reclaimed.get(pod.key)
        if memory is not None:
            when, written = memory
            annotations = pod.annotations
            seen = last_reclaim(annotations)
            if seen is None or (isinstance(seen, datetime) and seen < when):
                pod = msgspec.structs.replace(pod, annotations={**annotations, **written})
        pods.append(pod)
    return replace(cluster, pods=pods)


def forget_reclaims(state: ActuatorState, cluster: ClusterState, now: datetime, cooldown: timedelta) -> None:
    """Drop remembered reclaims once their cooldown passed and none of their victims still terminates."""
    if not state.reclaimed:
        return
    terminating = {p.key for p in cluster.pods if p.terminating}
    for key, (when, written) in list(state.reclaimed.items()):
        victims = reclaim_victims(written)
        if now - when >= cooldown and not any(t in victims for t in terminating):
            del state.reclaimed[key]


def gpus_held_by_reclaim(cluster: ClusterState, gpu_resources: Iterable[str]) -> int:
    """GPUs held now by pods running on the node the automator reclaimed for them (their reclaim-node
    annotation names the node they run on). Integrated over time this is the GPU time reclaimed; a pod whose
    requests cannot be read counts 0 (never more than is certain)."""
    total = 0
    for pod in cluster.pods:
        node = pod.node_name
        if not node or pod.finished or pod.terminating:
            continue
        if reclaim_node(pod.annotations) != node:
            continue
        try:
            total += pod.requests(gpu_resources).gpus
        except FieldError:
            continue
    return total
