"""Notice before eviction in the service, against the fake API server (a real HTTP server): the notice
written and announced, a restart and a change of leader in the middle of a notice (the annotations are the
state), the eviction after the deadline, withdrawal (idempotent), the owner's bad deferral, dry-run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client
from prometheus_client import CollectorRegistry

from automator.kube import KubernetesAdapter
from automator.metrics import AutomatorMetrics
from automator.ports import Mode
from automator.reclaim.model import PlannerConfig
from automator.service.actuator import ActuatorState, PassResult, run_pass
from steward_common.conventions import (
    DEFER_UNTIL_ANNOTATION,
    REASON_INVALID_ANNOTATION,
    REASON_NOTICE,
    REASON_NOTICE_WITHDRAWN,
    RECLAIM_NOTICE_ANNOTATION,
    RECLAIM_NOTICE_FOR_ANNOTATION,
)
from tests.automator import k8s
from tests.automator.fakes import FakePrometheus
from tools.fakes.fakekube import FakeApiServer

NOW = k8s.NOW
CONFIG = PlannerConfig(notice_seconds=600)


def _objects(a_annotations: dict[str, str] | None = None) -> list[Any]:
    """One 8-GPU node full: a (4 GPUs, the usual choice), b and c (2 GPUs, priority 200); pending p (4)."""
    return k8s.cluster_objects(
        k8s.node("n1", gpus=8),
        k8s.pod("a", gpus=4, node_name="n1", annotations=a_annotations),
        k8s.pod("b", gpus=2, node_name="n1", priority=200),
        k8s.pod("c", gpus=2, node_name="n1", priority=200),
        k8s.preemptor("p", gpus=4),
    )


class _Cluster:
    def __init__(self, kube: FakeApiServer) -> None:
        self.kube = kube
        self.adapter = KubernetesAdapter(
            client.ApiClient(client.Configuration(host=kube.url)), request_timeout=5
        )
        self.metrics = AutomatorMetrics(CollectorRegistry())

    def run(
        self,
        at: datetime,
        prom: FakePrometheus,
        mode: Mode = Mode.ENFORCE,
        state: ActuatorState | None = None,
        should_continue: Callable[[], bool] = lambda: True,
    ) -> PassResult:
        """A pass; without a state, a fresh process (a restart, or another replica that took the Lease)."""
        state = state if state is not None else ActuatorState()
        return run_pass(
            self.adapter,
            prom,
            CONFIG,
            mode,
            at,
            state=state,
            metrics=self.metrics,
            should_continue=should_continue,
        )

    def notice(self, name: str) -> tuple[str | None, str | None]:
        annotations = (self.kube.pod("ml", name) or {})["metadata"].get("annotations") or {}
        return annotations.get(RECLAIM_NOTICE_ANNOTATION), annotations.get(RECLAIM_NOTICE_FOR_ANNOTATION)

    def events(self, reason: str) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for e in self.kube.objects_of("events"):
            if e["reason"] == reason:
                found.setdefault(e["involvedObject"]["name"], []).append(f"{e['type']} {e['message']}")
        return found

    def evictions(self) -> list[str]:
        return [
            c.path.split("/")[-2]
            for c in self.kube.requests("POST")
            if c.path.endswith("/eviction") and "dryRun" not in str(c.body)
        ]

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


def test_notice_survives_a_restart_and_a_new_leader_and_ends_in_eviction_after_the_deadline() -> None:
    prom = FakePrometheus(k8s.idle("a", "b", "c"))
    with FakeApiServer(_objects()).start() as kube:
        cluster = _Cluster(kube)
        first = cluster.run(NOW, prom)
        assert cluster.evictions() == []
        assert cluster.notice("a") == ("2025-06-01T12:10:00Z", "ml/p")
        (event,) = cluster.events(REASON_NOTICE)["a"]
        assert event.startswith("Warning ") and "after 2025-06-01T12:10:00Z for pending pod ml/p" in event
        assert "GPU activity 0" in event and DEFER_UNTIL_ANNOTATION in event
        body = first.to_json()
        assert body["decisions"][0]["action"] == "notice" and body["decisions"][0]["victims"] == ["ml/a"]
        assert body["unresolved"] == []
        # A restart five minutes later: the annotations are all it knows; nothing evicted or re-announced.
        second = cluster.run(NOW + timedelta(seconds=300), prom)
        assert cluster.evictions() == [] and len(cluster.events(REASON_NOTICE)["a"]) == 1
        assert second.to_json()["under_notice"] == [
            {"pod": "ml/a", "for": "ml/p", "deadline": "2025-06-01T12:10:00Z"}
        ]
        assert second.to_json()["decisions"][0]["notice_deadline"] == "2025-06-01T12:10:00Z"
        # Another replica leads after the deadline: it evicts the same victim, on fresh data.
        third = cluster.run(NOW + timedelta(seconds=601), prom)
        assert cluster.evictions() == ["a"]
        assert third.to_json()["decisions"][0]["action"] == "evict"
        assert cluster.value("gpu_steward_automator_notices_total") == 1
        assert cluster.value("gpu_steward_automator_evictions_after_notice_total") == 1
        assert cluster.value("gpu_steward_automator_pods_under_notice") == 1


def test_a_victim_busy_again_loses_its_notice_once_and_is_not_evicted() -> None:
    prom = FakePrometheus(k8s.idle("a", "b", "c"))
    with FakeApiServer(_objects()).start() as kube:
        cluster = _Cluster(kube)
        cluster.run(NOW, prom)
        prom.data.update(k8s.busy("a"))
        later = NOW + timedelta(seconds=601)
        result = cluster.run(later, prom)
        assert cluster.evictions() == []
        assert cluster.notice("a") == (None, None)
        (event,) = cluster.events(REASON_NOTICE_WITHDRAWN)["a"]
        assert event.startswith("Normal gpu-steward withdrew its notice (for ml/p): busy: ")
        assert result.to_json()["notice_withdrawals"][0]["reason"] == "busy"
        # b and c are noticed instead (the usual order without a)
        assert cluster.notice("b") == ("2025-06-01T12:20:01Z", "ml/p")
        # Idempotent: the next pass (another process) has nothing to withdraw on a.
        cluster.run(later + timedelta(seconds=30), prom)
        assert len(cluster.events(REASON_NOTICE_WITHDRAWN)["a"]) == 1
        assert cluster.value("gpu_steward_automator_notices_withdrawn_total", reason="busy") == 1


def test_dry_run_shows_the_notice_and_writes_nothing() -> None:
    with FakeApiServer(_objects()).start() as kube:
        cluster = _Cluster(kube)
        result = cluster.run(NOW, FakePrometheus(k8s.idle("a", "b", "c")), mode=Mode.DRY_RUN)
        assert result.to_json()["decisions"][0]["action"] == "notice"
        assert not kube.requests("PATCH") and not kube.objects_of("events")


def test_no_notice_is_written_once_leadership_is_lost() -> None:
    with FakeApiServer(_objects()).start() as kube:
        cluster = _Cluster(kube)
        result = cluster.run(NOW, FakePrometheus(k8s.idle("a", "b", "c")), should_continue=lambda: False)
        assert cluster.notice("a") == (None, None) and "lost leadership" in result.reason


def test_a_bad_deferral_is_ignored_with_one_warning_event() -> None:
    with FakeApiServer(_objects({DEFER_UNTIL_ANNOTATION: "2025-06-01T13:00:00"})).start() as kube:
        cluster = _Cluster(kube)
        state = ActuatorState()
        prom = FakePrometheus(k8s.idle("a", "b", "c"))
        cluster.run(NOW, prom, state=state)
        cluster.run(NOW + timedelta(seconds=30), prom, state=state)
        (event,) = cluster.events(REASON_INVALID_ANNOTATION)["a"]
        assert f"Warning {DEFER_UNTIL_ANNOTATION}:" in event and "ignored" in event
        assert cluster.notice("a")[1] == "ml/p"  # not protected by it
