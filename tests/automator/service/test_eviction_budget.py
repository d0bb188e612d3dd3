"""The hourly eviction budget survives a restart and a failover: it is kept on the leader election Lease.

The elector runs against the fake API server (tools/fakes/fakekube.py); the record's arithmetic is pure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from datetime import timedelta

import pytest
from kubernetes import client

from automator.kube import LeaderElector
from automator.ports import Mode
from automator.reclaim.model import PlannerConfig
from automator.service.actuator import ActuatorState, run_pass
from automator.service.cooldown import evictions_record, restore_evictions
from steward_common.conventions import EVICTIONS_ANNOTATION
from tests.automator import k8s
from tests.automator.fakes import FakeKube, FakePrometheus
from tests.automator.reclaim.test_reclaim_safety import two_nodes_cluster
from tools.fakes.fakekube import FakeApiServer

NOW = k8s.NOW


def _elector(
    fake_kube: FakeApiServer,
    identity: str,
    state: ActuatorState,
    clock: list[float],
    annotations: Callable[[], Mapping[str, str]] | None = None,
    on_acquire: Callable[[Mapping[str, str]], None] | None = None,
) -> LeaderElector:
    """An elector over the fake API server keeping state's budget on the Lease (or what it is given to)."""

    def restored(found: Mapping[str, str]) -> None:
        restore_evictions(state, found, NOW, 3)

    return LeaderElector(
        client.ApiClient(client.Configuration(host=fake_kube.url)),
        "automator",
        "gpu-steward",
        identity,
        lease_duration=4,
        renew_deadline=3,
        retry_period=1,
        clock=lambda: clock[0],
        annotations=annotations or (lambda: evictions_record(list(state.evictions), NOW)),
        on_acquire=on_acquire or restored,
    )


def _three_evictions() -> ActuatorState:
    return ActuatorState(evictions=deque([NOW - timedelta(minutes=m) for m in (40, 20, 10)]))


def _pass(state: ActuatorState) -> FakeKube:
    kube = FakeKube(two_nodes_cluster())
    run_pass(kube, FakePrometheus(k8s.idle("x", "y")), PlannerConfig(), Mode.ENFORCE, NOW, state=state,
             max_evictions_per_hour=3)  # fmt: skip
    return kube


def test_a_fresh_process_would_evict_without_the_record() -> None:
    assert _pass(ActuatorState()).evicted  # what the record must prevent


@pytest.mark.parametrize("identity", ["replica-0", "replica-1"])
def test_a_restart_or_the_next_leader_with_3_evictions_in_the_last_hour_and_budget_3_evicts_nothing(
    fake_kube: FakeApiServer, identity: str
) -> None:
    clock = [100.0]
    first = _elector(fake_kube, "replica-0", _three_evictions(), clock)
    assert first.try_acquire_or_renew()
    lease = fake_kube.objects_of("leases")[0]
    assert lease["metadata"]["annotations"][EVICTIONS_ANNOTATION].count(":") == 3

    # replica-0 restarted (same pod name), or replica-1 once the lease expired: a new process, no memory.
    state = ActuatorState()
    second = _elector(fake_kube, identity, state, clock)
    if identity != "replica-0":
        assert not second.try_acquire_or_renew()  # held: observed, not yet expired
        clock[0] += 10
    assert second.try_acquire_or_renew() and second.is_leader
    assert state.evictions_last_hour(NOW) == 3
    assert not _pass(state).evicted
    # Renewals keep the record (now the new holder's), and reading it again adds nothing.
    assert second.try_acquire_or_renew()
    assert restore_evictions(state, fake_kube.objects_of("leases")[0]["metadata"]["annotations"], NOW, 3) == 0


def test_the_record_by_minute_expires_no_sooner_than_the_evictions() -> None:
    state = _three_evictions()
    record = evictions_record([*state.evictions, NOW - timedelta(minutes=61)], NOW)  # the old one left out
    restored = ActuatorState()
    assert restore_evictions(restored, record, NOW, 100) == 3
    assert all(r >= e for r, e in zip(restored.evictions, state.evictions, strict=True))
    assert restored.evictions_last_hour(NOW + timedelta(minutes=21)) == 2  # the 40-minute-old one is gone


@pytest.mark.parametrize("text", ["garbage", "12:x", "-1:3", "1:2:3", "9" * 5000 + ":1"])
def test_an_unreadable_record_counts_as_the_budget_spent(text: str) -> None:
    state = ActuatorState()
    restore_evictions(state, {EVICTIONS_ANNOTATION: text}, NOW, 5)
    assert state.evictions_last_hour(NOW) == 5
