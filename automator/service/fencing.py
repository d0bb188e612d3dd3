"""Fencing across a lost lease: what the leader keeps on its Lease so that the next leader neither evicts
past the hourly budget nor serves a preemptor twice (docs/automator.md, "Leader election").

Before each eviction is sent, the leader writes on the Lease the last hour's evictions (that one
included) and its recent reclaims: each served preemptor, when, its controller and the cooldown
annotations meant for it. An eviction whose request timed out may still be committed by the API server
after the lease is lost, and the old leader then writes no cooldown annotation: the record is already
there, and whoever takes the Lease reads it before its first pass (the budget spent, the preemptors in
cooldown). A preemptor deleted and recreated by its controller (a new name, no annotations) is in the
same cooldown while the victims evicted for the first one still terminate.

Pure but for the record's JSON; the Lease itself is kube/leader.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime

import msgspec

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.service.cooldown import ActuatorState, evictions_record, restore_evictions, with_reclaim_memory
from steward_common.conventions import (
    LAST_RECLAIM_ANNOTATION,
    RECLAIM_VICTIMS_ANNOTATION,
    RECLAIMS_ANNOTATION,
)

log = logging.getLogger(__name__)

# Reclaims kept on the Lease: the newest; older ones are past any cooldown a pass may still apply.
MAX_RECORDED_RECLAIMS = 200


class _Reclaim(msgspec.Struct, forbid_unknown_fields=True):
    pod: str  # namespace/name
    at: float  # Unix seconds
    annotations: dict[str, str]
    owner: tuple[str, str] | None = None  # (kind, uid) of its controller


_RECORD = msgspec.json.Decoder(list[_Reclaim])


def controller(pod: Pod | None) -> tuple[str, str] | None:
    """The (kind, uid) of the pod's first owner: its controller, which recreates it under a new name. The
    uid, not the name: a controller deleted and created again under the same name is another one."""
    if pod is None or not pod.owners or not pod.owner_uids:
        return None
    kind, uid = pod.owners[0][0], pod.owner_uids[0]
    return (kind, uid) if kind and uid else None


def reclaims_record(state: ActuatorState) -> dict[str, str]:
    """The remembered reclaims as the Lease annotation (JSON, the newest MAX_RECORDED_RECLAIMS)."""
    newest = sorted(state.reclaimed.items(), key=lambda item: item[1][0])[-MAX_RECORDED_RECLAIMS:]
    entries = [
        _Reclaim(str(key), when.timestamp(), dict(written), state.controllers.get(key))
        for key, (when, written) in newest
    ]
    return {RECLAIMS_ANNOTATION: msgspec.json.encode(entries).decode()}


def lease_record(state: ActuatorState, now: datetime) -> dict[str, str]:
    """Everything the holder keeps on its Lease: the hourly budget's record and the recent reclaims."""
    return {**evictions_record(list(state.evictions), now), **reclaims_record(state)}


def restore_reclaims(state: ActuatorState, annotations: Mapping[str, str], now: datetime, cap: int) -> int:
    """Merge the reclaims recorded on the Lease into state (a newer remembered one wins); how many were
    added. An unreadable record: the preemptors in cooldown are unknown, so the hourly budget counts as
    spent now (no eviction for up to an hour), as for an unreadable budget record."""
    text = annotations.get(RECLAIMS_ANNOTATION)
    if not text:
        return 0
    try:
        entries = _RECORD.decode(text)
        keys = [ObjectKey(*e.pod.split("/", 1)) for e in entries if e.pod.count("/") == 1]
        if len(keys) != len(entries):
            raise ValueError("a pod is not namespace/name")
        times = [datetime.fromtimestamp(e.at, tz=UTC) for e in entries]
    except (msgspec.MsgspecError, ValueError, OverflowError, OSError) as e:
        log.warning(
            "%s on the Lease is unreadable (%s): the hourly budget counts as spent", RECLAIMS_ANNOTATION, e
        )
        state.evictions.extend([now] * max(0, cap - state.evictions_last_hour(now)))
        return 0
    added = 0
    for key, when, entry in zip(keys, times, entries, strict=True):
        known = state.reclaimed.get(key)
        if known is not None and known[0] >= when:
            continue
        state.reclaimed[key] = (when, dict(entry.annotations))
        if entry.owner is not None:
            state.controllers[key] = entry.owner
        added += 1
    return added


def restore(state: ActuatorState, annotations: Mapping[str, str], now: datetime, cap: int) -> tuple[int, int]:
    """What a process taking the Lease reads before its first pass: (evictions, reclaims) added."""
    return restore_evictions(state, annotations, now, cap), restore_reclaims(state, annotations, now, cap)


def with_replacements(cluster: ClusterState, state: ActuatorState) -> ClusterState:
    """The cluster with each remembered reclaim's cooldown annotations also on its preemptor's unbound
    siblings (same namespace and controller) while a victim evicted for it still terminates: a preemptor
    deleted and recreated by its controller gets no second victim set meanwhile. (Forgets the controllers
    of reclaims no longer remembered.)"""
    for gone in [k for k in state.controllers if k not in state.reclaimed]:
        del state.controllers[gone]
    if not state.controllers:
        return cluster
    terminating = {str(p.key) for p in cluster.pods if p.terminating}
    covered: dict[tuple[str, str, str], tuple[datetime, Mapping[str, str]]] = {}
    for key, owner in state.controllers.items():
        memory = state.reclaimed.get(key)
        if memory is None:
            continue
        victims = {v.strip() for v in str(memory[1].get(RECLAIM_VICTIMS_ANNOTATION, "")).split(",")}
        if victims & terminating:
            covered[(key.namespace, *owner)] = memory
    if not covered:
        return cluster
    siblings: dict[ObjectKey, tuple[datetime, Mapping[str, str]]] = {}
    for pod in cluster.pods:
        kind_name = controller(pod)
        if pod.node_name or pod.key in state.reclaimed or kind_name is None:
            continue
        found = covered.get((pod.key.namespace, *kind_name))
        if found is not None and LAST_RECLAIM_ANNOTATION not in pod.annotations:
            siblings[pod.key] = found
    return with_reclaim_memory(cluster, siblings)
