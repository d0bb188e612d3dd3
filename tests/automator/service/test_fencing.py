"""Fencing across a lost lease (automator/service/fencing.py): each eviction is on the Lease before it is
sent, the next leader reads it (the budget and the preemptor's cooldown), and a preemptor's replacement
from the same controller waits while the first victims terminate.

The elector runs against the fake API server (tools/fakes/fakekube.py); the cluster is FakeKube's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import pytest

from automator.kube import LeaderElector
from automator.kube.leader import NotHolding
from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.pod import pod_records
from automator.ports import EvictionOutcome, Mode
from automator.reclaim.model import PlannerConfig
from automator.service.actuator import ActuatorState, PassResult, run_pass
from automator.service.fencing import lease_record, restore, restore_reclaims
from steward_common.conventions import EVICTIONS_ANNOTATION, RECLAIMS_ANNOTATION
from tests.automator import k8s
from tests.automator.fakes import FakeKube, FakePrometheus
from tests.automator.reclaim.test_reclaim_safety import two_nodes_cluster
from tests.automator.service.test_eviction_budget import _elector as budget_elector
from tools.fakes.fakekube import FakeApiServer

NOW = k8s.NOW
X, Y, P = ObjectKey("ml", "x"), ObjectKey("ml", "y"), ObjectKey("ml", "p")


def _elector(
    fake_kube: FakeApiServer, identity: str, state: ActuatorState, clock: list[float]
) -> LeaderElector:
    """An elector keeping the whole fencing record (budget and reclaims) on the Lease."""

    def restored(found: Mapping[str, str]) -> None:
        restore(state, found, NOW, 60)

    return budget_elector(fake_kube, identity, state, clock, lambda: lease_record(state, NOW), restored)


def _pass(
    kube: FakeKube,
    state: ActuatorState,
    fence: Callable[[], None] | None = None,
    leading: Callable[[], bool] = lambda: True,
) -> PassResult:
    usage = FakePrometheus(k8s.idle("x", "y"))
    return run_pass(kube, usage, PlannerConfig(), Mode.ENFORCE, NOW, state=state, should_continue=leading,
                    fence=fence, max_evictions_per_hour=60)  # fmt: skip


def _lease(fake_kube: FakeApiServer) -> dict[str, str]:
    annotations: dict[str, str] = fake_kube.objects_of("leases")[0]["metadata"]["annotations"]
    return annotations


def test_an_eviction_landing_after_the_lease_is_lost_is_counted_by_the_next_leader(
    fake_kube: FakeApiServer,
) -> None:
    """The leader sends x's eviction, gets no answer (it lands later) and loses the lease before it could
    annotate the preemptor; the next leader must neither evict a second victim for p nor forget the
    eviction in its hourly budget."""
    clock = [100.0]
    state = ActuatorState()
    first = _elector(fake_kube, "replica-0", state, clock)
    assert first.try_acquire_or_renew()
    kube = FakeKube(
        two_nodes_cluster(), eviction_script={X: [EvictionOutcome.UNKNOWN]}, accepted_silently={X}
    )
    on_the_lease_when_sent: list[dict[str, str]] = []
    leading = [True]

    def before_write(kind: str) -> None:
        if kind == "evict" and len(kube.dry_run_calls) == 1:  # the real eviction, after its dry run
            on_the_lease_when_sent.append(dict(_lease(fake_kube)))
            leading[0] = False  # the lease is lost while the eviction is under way

    kube.before_write = before_write
    _pass(kube, state, lambda: first.record(lease_record(state, NOW)), lambda: leading[0])
    assert kube.eviction_calls == [X] and kube.evicted == [X] and P not in kube.written  # no annotation
    [sent] = on_the_lease_when_sent
    assert sent[EVICTIONS_ANNOTATION].endswith(":1")
    [reclaim] = json.loads(sent[RECLAIMS_ANNOTATION])
    assert reclaim["pod"] == "ml/p" and reclaim["annotations"]["gpu-steward.io/reclaim-victims"] == "ml/x"

    # The next leader: a new process, no memory but what the Lease says, once the lease expired.
    state = ActuatorState()
    second = _elector(fake_kube, "replica-1", state, clock)
    assert not second.try_acquire_or_renew()  # observed, not yet expired
    clock[0] += 10
    assert second.try_acquire_or_renew()
    assert state.evictions_last_hour(NOW) == 1 and P in state.reclaimed
    result = _pass(kube, state)
    assert kube.evicted == [X], result.to_json()  # y is not taken for p: p is in cooldown
    assert any(u.preemptor == P and "cooldown" in u.reason for u in result.plan.unresolved)  # type: ignore[union-attr]

    # what the record prevents: a leader without it takes y for p
    control = FakeKube(kube.cluster)
    _pass(control, ActuatorState())
    assert control.evicted == [Y]


def test_an_eviction_not_recorded_on_the_lease_is_not_sent() -> None:
    kube = FakeKube(two_nodes_cluster())
    state = ActuatorState()

    def lost() -> None:
        raise NotHolding("lease held by another replica")

    result = _pass(kube, state, lost)
    assert kube.eviction_calls == [] and kube.evicted == []
    assert "could not be recorded on the Lease first" in result.reason
    assert state.evictions_last_hour(NOW) == 0 and not state.reclaimed  # nothing counted for nothing sent
    assert [a.result for a in result.actions if a.kind == "evict"] == ["skipped"]


def test_a_refused_eviction_is_not_counted_once_refused() -> None:
    kube = FakeKube(two_nodes_cluster(), eviction_script={X: [EvictionOutcome.ERROR]}, dry_run_ok=True)
    state = ActuatorState()
    records: list[dict[str, str]] = []
    _pass(kube, state, lambda: records.append(lease_record(state, NOW)))
    assert kube.eviction_calls == [X, Y] and kube.evicted == [Y]  # x refused, y taken on the re-plan
    assert len(records) == 2  # each recorded before it was sent
    assert state.evictions_last_hour(NOW) == 1
    assert state.reclaimed[P][1]["gpu-steward.io/reclaim-victims"] == "ml/y"


def _owned(obj: dict[str, Any], kind: str = "Job", name: str = "train") -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [
        {"kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}
    ]
    return obj


def _replaced(kube: FakeKube, new_name: str, kind: str = "Job", name: str = "train") -> None:
    """The preemptor deleted and recreated by its controller: a new name, no annotations."""
    kube.cluster.pods[:] = [p for p in kube.cluster.pods if p.key != P]
    kube.cluster.pods.extend(pod_records([_owned(k8s.preemptor(new_name), kind, name)]))


def _cluster_with_owned_preemptor() -> ClusterState:
    """two_nodes_cluster, its preemptor p made by a Job (as its replacement will be)."""
    cluster = two_nodes_cluster()
    cluster.pods[:] = [
        msgspec.structs.replace(p, owners=(("Job", "train"),), owner_uids=("uid-train",)) if p.key == P else p
        for p in cluster.pods
    ]
    return cluster


def test_a_replacement_from_the_same_controller_waits_while_the_first_victims_terminate() -> None:
    kube = FakeKube(_cluster_with_owned_preemptor())
    state = ActuatorState()
    _pass(kube, state)
    assert kube.evicted == [X]
    _replaced(kube, "p-2")
    result = _pass(kube, state)
    assert kube.evicted == [X], "a second set was evicted for the replacement"
    unresolved = {u.preemptor: u.reason for u in result.plan.unresolved}  # type: ignore[union-attr]
    assert "cooldown" in unresolved[ObjectKey("ml", "p-2")]


def test_a_pod_of_another_controller_is_not_held_back() -> None:
    kube = FakeKube(_cluster_with_owned_preemptor())
    state = ActuatorState()
    _pass(kube, state)
    _replaced(kube, "other", name="another-job")
    _pass(kube, state)
    assert kube.evicted == [X, Y]


def test_the_replacement_is_served_once_the_first_victims_are_gone() -> None:
    kube = FakeKube(_cluster_with_owned_preemptor())
    state = ActuatorState()
    _pass(kube, state)
    _replaced(kube, "p-2")
    kube.cluster.pods[:] = [p for p in kube.cluster.pods if p.key != X]  # x ended: node-a is free
    _pass(kube, state)
    assert kube.evicted == [X]  # p-2 fits node-a now: nothing evicted, and not held in cooldown either
    assert "p-2" not in " ".join(str(k) for k in kube.written)


@pytest.mark.parametrize(
    "text", ["garbage", "[{}]", '[{"pod": "no-slash", "at": 1, "annotations": {}}]', "[1]"]
)
def test_an_unreadable_reclaims_record_counts_as_the_budget_spent(text: str) -> None:
    state = ActuatorState()
    assert restore_reclaims(state, {RECLAIMS_ANNOTATION: text}, NOW, 5) == 0
    assert state.evictions_last_hour(NOW) == 5 and not state.reclaimed


def test_writes_end_before_another_replica_may_take_the_lease(fake_kube: FakeApiServer) -> None:
    clock = [100.0]
    elector = _elector(fake_kube, "replica-0", ActuatorState(), clock)
    assert elector.write_timeout < elector.write_margin
    with pytest.raises(NotHolding):  # not yet holding: nothing is written as the holder
        elector.record({"gpu-steward.io/x": "1"})
    assert elector.try_acquire_or_renew()
    other = _elector(fake_kube, "replica-1", ActuatorState(), clock)
    assert not other.try_acquire_or_renew()
    clock[0] += 10  # the first one's lease expired: the other takes it
    assert other.try_acquire_or_renew()
    clock[0] -= 10  # the first still believes it leads (its renewal is recent by its clock)
    with pytest.raises(NotHolding, match="held by another replica"):
        elector.record({"gpu-steward.io/x": "1"})
