"""The pass and the acting on a plan, over the in-memory fakes and the real planner."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from automator.metrics import AutomatorMetrics
from automator.objects.cluster import ClusterState
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.priority_class import priority_class_records
from automator.ports import EvictionOutcome, Mode
from automator.reclaim.model import PlannerConfig, PodUsage
from automator.service.actuator import ActuatorState, run_pass
from steward_common.conventions import (
    ANN_GPU_IDLE_SECONDS,
    ANN_MIN_PREEMPTABLE_PRIORITY,
    LAST_RECLAIM_ANNOTATION,
    REASON_EVICTION_FAILED,
    REASON_INVALID_ANNOTATION,
    REASON_PREEMPTOR,
    REASON_VICTIM,
    UnresolvedReason,
)
from tests.automator import k8s
from tests.automator.fakes import FakeKube, FakePrometheus

NOW = k8s.NOW
LONG_AGO = NOW - timedelta(hours=2)
CONFIG = PlannerConfig()
IDLE = PodUsage(gpu_activity=0.0, coverage=1.0, gpu_recent_max=0.0)
BUSY = PodUsage(gpu_activity=0.9, coverage=1.0, gpu_recent_max=0.9)
PRE = ObjectKey("team", "pending")


def classes(batch_annotations: dict[str, str] | None = None) -> list[JsonObj]:
    return [
        k8s.priority_class("batch", 100, batch_annotations),
        k8s.reclaim_class("urgent", 1000),
    ]


def running(name: str, gpus: int, node: str, labels: dict[str, str] | None = None) -> JsonObj:
    return k8s.pod(
        name, gpus, node, priority=None, priority_class="batch", cpu="1", memory="1Gi", labels=labels
    )


def pending(name: str = "pending", gpus: int = 4, created: datetime = LONG_AGO) -> JsonObj:
    age = (NOW - created).total_seconds()
    return k8s.preemptor(name, gpus, None, "urgent", namespace="team", created_ago=age, cpu="1", memory="1Gi")


def cluster(nodes: list[JsonObj], pods: list[JsonObj], **kw: list[JsonObj]) -> ClusterState:
    return ClusterState.from_objects(
        nodes=nodes, pods=pods, priority_classes=kw.get("pcs", classes()), pdbs=kw.get("pdbs", [])
    )


def idle_usage(*names: str) -> dict[ObjectKey, PodUsage]:
    return {ObjectKey("ml", n): IDLE for n in names}


@pytest.fixture
def metrics() -> AutomatorMetrics:
    return AutomatorMetrics(CollectorRegistry())


def sample(m: AutomatorMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value("gpu_steward_automator_" + name, labels)


def eight_gpu_node() -> ClusterState:
    """The issue's case: idle pods of 4, 2 and 2 GPUs on an 8-GPU node, a preemptor needing 4."""
    return cluster(
        [k8s.node("node-a", 8)],
        [running("a4", 4, "node-a"), running("b2", 2, "node-a"), running("c2", 2, "node-a"), pending()],
    )


def test_dry_run_never_writes(metrics: AutomatorMetrics) -> None:
    kube = FakeKube(eight_gpu_node())
    prom = FakePrometheus(idle_usage("a4", "b2", "c2"))
    result = run_pass(kube, prom, CONFIG, Mode.DRY_RUN, NOW, metrics=metrics)

    assert result.ok and result.plan is not None
    assert [str(v.pod) for v in result.plan.decisions[0].victims] == ["ml/a4"]
    assert kube.eviction_calls == [] and kube.annotations == {} and kube.events == []
    assert result.acted is False
    body = result.to_json()
    assert (
        body["acted"] is False and body["mode"] == "dry-run" and body["decisions"][0]["victims"] == ["ml/a4"]
    )
    assert sample(metrics, "decisions_total", mode="dry-run") == 1
    assert sample(metrics, "evictions_total", result="ok") == 0
    assert sample(metrics, "passes_total", result="ok") == 1
    assert sample(metrics, "last_successful_pass_timestamp_seconds") == NOW.timestamp()
    assert sample(metrics, "prometheus_queries_per_pass") == 2  # the recent window and one GPU window


def test_enforce_evicts_annotates_and_records_events(metrics: AutomatorMetrics) -> None:
    kube = FakeKube(eight_gpu_node())
    prom = FakePrometheus(idle_usage("a4", "b2", "c2"))
    result = run_pass(kube, prom, CONFIG, Mode.ENFORCE, NOW, metrics=metrics)

    assert result.ok and result.acted
    assert kube.evicted == [ObjectKey("ml", "a4")]
    assert kube.annotations == {PRE: k8s.ts(NOW)}
    by_pod = {(e.pod, e.reason): e for e in kube.events}
    pre_event = by_pod[(PRE, REASON_PREEMPTOR)]
    assert "ml/a4" in pre_event.message and "0.000" in pre_event.message and pre_event.type == "Normal"
    victim_event = by_pod[(ObjectKey("ml", "a4"), REASON_VICTIM)]
    assert "team/pending" in victim_event.message and "GPU activity 0.000 over 1800s" in victim_event.message
    assert victim_event.uid == "uid-ml-a4"  # kubectl describe selects Events by uid
    assert sample(metrics, "evictions_total", result="ok") == 1
    assert sample(metrics, "decisions_total", mode="enforce") == 1
    assert result.to_json()["acted"] is True


def test_prometheus_down_gives_zero_evictions(metrics: AutomatorMetrics) -> None:
    # Even a victim that needs no usage check (minimum-preemptable-priority) is left alone: the pass stops.
    state = eight_gpu_node()
    state = replace(
        state, priority_classes=priority_class_records(classes({ANN_MIN_PREEMPTABLE_PRIORITY: "500"}))
    )
    kube = FakeKube(state)
    prom = FakePrometheus(idle_usage("a4", "b2", "c2"), down="connection refused")
    result = run_pass(kube, prom, CONFIG, Mode.ENFORCE, NOW, metrics=metrics)

    assert result.result == "prometheus_unavailable"
    assert "no eviction" in result.reason and "connection refused" in result.reason
    assert kube.eviction_calls == [] and kube.events == [] and kube.annotations == {}
    assert result.plan is None and result.to_json()["decisions"] == []
    assert sample(metrics, "passes_total", result="prometheus_unavailable") == 1
    assert sample(metrics, "last_successful_pass_timestamp_seconds") == 0


def test_same_cluster_with_prometheus_up_does_evict() -> None:
    # The other side of the test above: the same input acts when usage is known.
    state = eight_gpu_node()
    state = replace(
        state, priority_classes=priority_class_records(classes({ANN_MIN_PREEMPTABLE_PRIORITY: "500"}))
    )
    kube = FakeKube(state)
    run_pass(kube, FakePrometheus(idle_usage("a4", "b2", "c2")), CONFIG, Mode.ENFORCE, NOW)
    assert kube.evicted == [ObjectKey("ml", "a4")]


def test_kubernetes_down_fails_the_pass(metrics: AutomatorMetrics) -> None:
    kube = FakeKube(eight_gpu_node(), fail_snapshot="list pods: 503")
    prom = FakePrometheus()
    result = run_pass(kube, prom, CONFIG, Mode.ENFORCE, NOW, metrics=metrics)
    assert result.result == "kubernetes_error" and "503" in result.reason
    assert prom.calls == 0 and kube.eviction_calls == []
    assert sample(metrics, "passes_total", result="kubernetes_error") == 1


def two_nodes() -> ClusterState:
    return cluster(
        [k8s.node("node-a", 4), k8s.node("node-b", 4)],
        [running("x", 4, "node-a"), running("y", 4, "node-b"), pending()],
    )


@pytest.mark.parametrize("refusal", [EvictionOutcome.REFUSED_PDB, EvictionOutcome.ERROR])
def test_refused_eviction_replans_onto_another_node(
    refusal: EvictionOutcome, metrics: AutomatorMetrics
) -> None:
    # The dry run passes, the real eviction is refused (a race): re-plan onto the other node.
    kube = FakeKube(two_nodes(), eviction_script={ObjectKey("ml", "x"): [refusal]}, dry_run_ok=True)
    result = run_pass(kube, FakePrometheus(idle_usage("x", "y")), CONFIG, Mode.ENFORCE, NOW, metrics=metrics)

    assert kube.eviction_calls == [
        ObjectKey("ml", "x"),
        ObjectKey("ml", "y"),
    ]  # node-a first: names sort first
    assert kube.evicted == [ObjectKey("ml", "y")]
    assert result.replans == 1 and sample(metrics, "replans_total") == 1
    assert result.plan is not None and [d.node for d in result.plan.decisions] == ["node-b"]
    failed = [e for e in kube.events if e.reason == REASON_EVICTION_FAILED]
    assert [(e.pod, e.type) for e in failed] == [(ObjectKey("ml", "x"), "Warning")]
    assert sample(metrics, "evictions_total", result=str(refusal)) == 1
    assert sample(metrics, "evictions_total", result="ok") == 1


def test_replans_are_bounded() -> None:
    nodes = [k8s.node(f"node-{i}", 4) for i in range(5)]
    pods = [running(f"v{i}", 4, f"node-{i}") for i in range(5)] + [pending()]
    script = {ObjectKey("ml", f"v{i}"): [EvictionOutcome.REFUSED_PDB] for i in range(5)}
    kube = FakeKube(cluster(nodes, pods), eviction_script=script, dry_run_ok=True)
    usage = idle_usage(*(f"v{i}" for i in range(5)))
    result = run_pass(kube, FakePrometheus(usage), CONFIG, Mode.ENFORCE, NOW, max_replans=2)

    assert len(kube.eviction_calls) == 3  # the first try and two re-plans
    assert kube.evicted == [] and kube.annotations == {}
    assert result.plan is not None and [u.preemptor for u in result.plan.unresolved] == [PRE]
    assert result.plan.unresolved[0].kind is UnresolvedReason.INTERRUPTED


def test_conflict_is_not_the_pod_judged_skipped_not_retried_not_freed() -> None:
    kube = FakeKube(two_nodes(), eviction_script={ObjectKey("ml", "x"): [EvictionOutcome.CONFLICT]})
    result = run_pass(kube, FakePrometheus(idle_usage("x", "y")), CONFIG, Mode.ENFORCE, NOW)
    assert kube.eviction_calls == [ObjectKey("ml", "x"), ObjectKey("ml", "y")]
    assert kube.evicted == [ObjectKey("ml", "y")] and result.replans == 1
    assert result.plan is not None and [d.node for d in result.plan.decisions] == ["node-b"]


def test_not_found_counts_as_freed() -> None:
    kube = FakeKube(two_nodes(), eviction_script={ObjectKey("ml", "x"): [EvictionOutcome.NOT_FOUND]})
    result = run_pass(kube, FakePrometheus(idle_usage("x", "y")), CONFIG, Mode.ENFORCE, NOW)
    assert kube.eviction_calls == [ObjectKey("ml", "x")] and result.replans == 0
    assert PRE in kube.annotations  # victims were (already) gone for it: cooldown starts
    assert result.acted


def test_partial_eviction_is_not_repeated_after_replan() -> None:
    state = cluster(
        [k8s.node("node-a", 4), k8s.node("node-b", 4)],
        [
            running("p", 2, "node-a"),
            running("q", 2, "node-a"),
            running("r", 2, "node-b"),
            running("s", 2, "node-b"),
            pending(),
        ],
    )
    script = {ObjectKey("ml", "q"): [EvictionOutcome.REFUSED_PDB]}
    kube = FakeKube(state, eviction_script=script, dry_run_ok=True)
    result = run_pass(kube, FakePrometheus(idle_usage("p", "q", "r", "s")), CONFIG, Mode.ENFORCE, NOW)

    assert kube.eviction_calls.count(ObjectKey("ml", "p")) == 1
    assert ObjectKey("ml", "q") not in kube.evicted
    assert sorted(kube.evicted) == [ObjectKey("ml", "p"), ObjectKey("ml", "r"), ObjectKey("ml", "s")]
    assert result.plan is not None and result.plan.decisions[0].node == "node-b"
    assert list(kube.annotations) == [PRE]


def test_second_preemptor_gets_other_victims() -> None:
    state = cluster(
        [k8s.node("node-a", 8)],
        [
            running("x", 4, "node-a"),
            running("y", 4, "node-a"),
            pending("first", created=LONG_AGO),
            pending("second", created=LONG_AGO + timedelta(minutes=1)),
        ],
    )
    kube = FakeKube(state)
    result = run_pass(kube, FakePrometheus(idle_usage("x", "y")), CONFIG, Mode.ENFORCE, NOW)
    assert sorted(kube.evicted) == [ObjectKey("ml", "x"), ObjectKey("ml", "y")]
    assert result.plan is not None
    victims = [v.pod for d in result.plan.decisions for v in d.victims]
    assert len(victims) == len(set(victims)) == 2
    assert set(kube.annotations) == {ObjectKey("team", "first"), ObjectKey("team", "second")}


def test_busy_and_pdb_protected_pods_are_not_evicted() -> None:
    state = cluster(
        [k8s.node("node-a", 4), k8s.node("node-b", 4)],
        [running("busy", 4, "node-a"), running("guarded", 4, "node-b", labels={"app": "g"}), pending()],
        pdbs=[k8s.pdb("guard", {"matchLabels": {"app": "g"}}, 0)],
    )
    kube = FakeKube(state)
    usage = {ObjectKey("ml", "busy"): BUSY, ObjectKey("ml", "guarded"): IDLE}
    result = run_pass(kube, FakePrometheus(usage), CONFIG, Mode.ENFORCE, NOW)
    assert kube.eviction_calls == []
    assert result.plan is not None and [u.preemptor for u in result.plan.unresolved] == [PRE]
    assert result.plan.unresolved[0].kind is UnresolvedReason.NO_FIT


def test_cooldown_holds_even_when_the_annotation_could_not_be_written() -> None:
    kube = FakeKube(two_nodes(), fail_writes=True)
    state = ActuatorState()
    prom = FakePrometheus(idle_usage("x", "y"))
    first = run_pass(kube, prom, CONFIG, Mode.ENFORCE, NOW, state=state)
    assert kube.evicted == [ObjectKey("ml", "x")] and kube.annotations == {}
    assert any(a.kind == "annotate" and a.result == "error" for a in first.actions)

    # The evicted pod is still terminating and the preemptor still pending: without memory, y would go too.
    second = run_pass(kube, prom, CONFIG, Mode.ENFORCE, NOW + timedelta(seconds=30), state=state)
    assert kube.evicted == [ObjectKey("ml", "x")]
    assert second.plan is not None and PRE in second.plan.skipped_cooldown

    # After the cooldown time, x still terminates: still no second set (issue 7), the memory holds.
    later = NOW + timedelta(seconds=CONFIG.cooldown_seconds)
    third = run_pass(kube, prom, CONFIG, Mode.ENFORCE, later, state=state)
    assert kube.evicted == [ObjectKey("ml", "x")]
    assert third.plan is not None and PRE in third.plan.skipped_cooldown
    assert state.reclaimed[PRE][0] == NOW


def test_written_annotation_starts_the_cooldown() -> None:
    kube = FakeKube(two_nodes())
    prom = FakePrometheus(idle_usage("x", "y"))
    run_pass(kube, prom, CONFIG, Mode.ENFORCE, NOW)  # fresh state each pass: only the annotation remembers
    run_pass(kube, prom, CONFIG, Mode.ENFORCE, NOW + timedelta(seconds=60))
    assert kube.evicted == [ObjectKey("ml", "x")]
    pod = next(p for p in kube.cluster.pods if p.key.name == "pending")
    assert pod.annotations[LAST_RECLAIM_ANNOTATION] == k8s.ts(NOW)


def test_invalid_annotation_warns_once_on_the_class_pods_in_enforce_only() -> None:
    state = cluster(
        [k8s.node("node-a", 4)],
        [running("x", 4, "node-a"), pending()],
        pcs=classes({ANN_GPU_IDLE_SECONDS: "soon"}),
    )
    dry = FakeKube(state)
    run_pass(dry, FakePrometheus(idle_usage("x")), CONFIG, Mode.DRY_RUN, NOW)
    assert dry.events == []

    kube = FakeKube(state)
    shared = ActuatorState()
    for i in range(2):
        run_pass(
            kube,
            FakePrometheus(idle_usage("x")),
            CONFIG,
            Mode.ENFORCE,
            NOW + timedelta(seconds=i),
            state=shared,
        )
    warnings = [e for e in kube.events if e.reason == REASON_INVALID_ANNOTATION]
    assert [(e.pod, e.type) for e in warnings] == [(ObjectKey("ml", "x"), "Warning")]
    assert "soon" in warnings[0].message and "batch" in warnings[0].message
    assert kube.evicted == []  # a malformed annotation protects the pod


def test_lost_leadership_stops_before_acting() -> None:
    kube = FakeKube(two_nodes())
    result = run_pass(
        kube, FakePrometheus(idle_usage("x", "y")), CONFIG, Mode.ENFORCE, NOW, should_continue=lambda: False
    )
    assert kube.eviction_calls == []
    assert result.plan is not None and [u.preemptor for u in result.plan.unresolved] == [PRE]
    assert result.plan.unresolved[0].kind is UnresolvedReason.INTERRUPTED


def test_event_failures_do_not_stop_the_pass(metrics: AutomatorMetrics) -> None:
    kube = FakeKube(two_nodes(), fail_writes=True)
    result = run_pass(kube, FakePrometheus(idle_usage("x", "y")), CONFIG, Mode.ENFORCE, NOW, metrics=metrics)
    assert result.ok and kube.evicted == [ObjectKey("ml", "x")]
    assert {a.result for a in result.actions if a.kind == "event"} == {"error"}
