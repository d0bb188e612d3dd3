"""Issue 11's reclaim-activity metrics: unresolved preemptors by reason, and the GPUs reclaimed."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from automator.metrics import AutomatorMetrics, declare, row, unresolved_by_reason
from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.pod import pod_record
from automator.ports import EvictionOutcome, Mode
from automator.reclaim import planner
from automator.reclaim.model import PlannerConfig, Unresolved
from automator.service.actuator import run_pass
from automator.service.cooldown import gpus_held_by_reclaim
from steward_common import conventions
from steward_common.conventions import LAST_RECLAIM_ANNOTATION, RECLAIM_COUNT_ANNOTATION, UnresolvedReason
from tests.automator import k8s
from tests.automator.fakes import FakeKube, FakePrometheus
from tests.automator.service.test_actuator import eight_gpu_node, idle_usage, two_nodes
from tests.automator.settings.test_docs_consistency import SERVICE_DOC, code_spans, section, table_rows

NOW = k8s.NOW
CONFIG = PlannerConfig()
PRE = ObjectKey("ml", "pre")


def reclaimed(m: AutomatorMetrics) -> float | None:
    return m.registry.get_sample_value("gpu_steward_automator_reclaimed_gpus_total")


def unresolved(m: AutomatorMetrics) -> dict[str, float]:
    family = "gpu_steward_automator_unresolved_preemptors"
    return {s.labels["reason"]: s.value for f in m.registry.collect() for s in f.samples if s.name == family}


@pytest.fixture
def metrics() -> AutomatorMetrics:
    return AutomatorMetrics(CollectorRegistry())


# --- reclaimed GPUs: the victims' GPUs of evictions the API accepted, nothing else --------------------


def test_accepted_evictions_count_their_victims_gpus(metrics: AutomatorMetrics) -> None:
    kube = FakeKube(eight_gpu_node())
    run_pass(kube, FakePrometheus(idle_usage("a4", "b2", "c2")), CONFIG, Mode.ENFORCE, NOW, metrics=metrics)
    assert kube.evicted == [ObjectKey("ml", "a4")]
    assert reclaimed(metrics) == 4


def test_dry_run_reclaims_nothing(metrics: AutomatorMetrics) -> None:
    kube = FakeKube(eight_gpu_node())
    run_pass(kube, FakePrometheus(idle_usage("a4", "b2", "c2")), CONFIG, Mode.DRY_RUN, NOW, metrics=metrics)
    assert reclaimed(metrics) == 0


def test_refused_and_already_gone_victims_are_not_reclaimed(metrics: AutomatorMetrics) -> None:
    # x refused by a PodDisruptionBudget, then y accepted: 4 GPUs, not 8.
    script = {ObjectKey("ml", "x"): [EvictionOutcome.REFUSED_PDB]}
    kube = FakeKube(two_nodes(), eviction_script=script, dry_run_ok=True)
    run_pass(kube, FakePrometheus(idle_usage("x", "y")), CONFIG, Mode.ENFORCE, NOW, metrics=metrics)
    assert kube.evicted == [ObjectKey("ml", "y")] and reclaimed(metrics) == 4
    # A victim already gone (404) was freed by someone else: nothing reclaimed by this automator.
    gone = AutomatorMetrics(CollectorRegistry())
    kube = FakeKube(two_nodes(), eviction_script={ObjectKey("ml", "x"): [EvictionOutcome.NOT_FOUND]})
    run_pass(kube, FakePrometheus(idle_usage("x", "y")), CONFIG, Mode.ENFORCE, NOW, metrics=gone)
    assert reclaimed(gone) == 0


def test_gpus_held_by_reclaim_count_only_pods_running_where_the_automator_made_room() -> None:
    here = {conventions.RECLAIM_NODE_ANNOTATION: "n1"}
    pods = [
        k8s.pod("placed", gpus=4, node_name="n1", annotations=here),
        k8s.pod("elsewhere", gpus=2, node_name="n2", annotations=here),  # scheduled on another node
        k8s.pod("pending", gpus=2, annotations=here),  # not running yet
        k8s.pod("leaving", gpus=2, node_name="n1", annotations=here, terminating=True),
        k8s.pod("done", gpus=2, node_name="n1", annotations=here, phase="Succeeded"),
        k8s.pod("plain", gpus=8, node_name="n1"),  # never reclaimed for
        k8s.pod("broken", gpus="lots", node_name="n1", annotations=here),  # unreadable: counts 0
    ]
    cluster = ClusterState.from_objects(
        nodes=[k8s.node("n1"), k8s.node("n2")], pods=pods, priority_classes=[], pdbs=[]
    )
    assert gpus_held_by_reclaim(cluster, CONFIG.gpu_resources) == 4


def test_a_pass_exports_the_gpus_held_by_reclaim(metrics: AutomatorMetrics) -> None:
    cluster = eight_gpu_node()
    here = {conventions.RECLAIM_NODE_ANNOTATION: "node-a"}
    placed = k8s.pod("was-pre", gpus=2, node_name="node-a", annotations=here)
    cluster.pods.append(pod_record(placed))
    run_pass(FakeKube(cluster), FakePrometheus(idle_usage()), CONFIG, Mode.DRY_RUN, NOW, metrics=metrics)
    assert metrics.registry.get_sample_value("gpu_steward_automator_reclaimed_gpus_held") == 2


def test_a_standby_exports_no_reclaimed_gpus_so_an_old_leaders_value_is_not_summed(
    metrics: AutomatorMetrics,
) -> None:
    metrics.set_leader(True)
    metrics.reclaimed_gpus_held.set(6)
    metrics.set_leader(False)
    assert metrics.registry.get_sample_value("gpu_steward_automator_reclaimed_gpus_held") == 0
    assert metrics.registry.get_sample_value("gpu_steward_automator_is_leader") == 0


# --- unresolved preemptors by reason ------------------------------------------------------------------


def test_every_reason_is_exposed_from_the_start(metrics: AutomatorMetrics) -> None:
    assert unresolved(metrics) == {str(r): 0 for r in UnresolvedReason}


def test_a_pass_sets_the_gauge_by_reason(metrics: AutomatorMetrics) -> None:
    # big needs 8 GPUs and the nodes have 4: no node can run it (pending, needing 4, is served).
    state = two_nodes()
    state.pods.append(
        pod_record(k8s.preemptor("big", 8, priority=None, priority_class="urgent", namespace="team"))
    )
    kube = FakeKube(state)
    run_pass(kube, FakePrometheus(idle_usage("x", "y")), CONFIG, Mode.DRY_RUN, NOW, metrics=metrics)
    by_reason = unresolved(metrics)
    assert by_reason["no-node"] == 1 and sum(by_reason.values()) == 1
    # The next pass without it: back to 0, not a stale 1.
    run_pass(
        FakeKube(two_nodes()),
        FakePrometheus(idle_usage("x", "y")),
        CONFIG,
        Mode.DRY_RUN,
        NOW,
        metrics=metrics,
    )
    assert sum(unresolved(metrics).values()) == 0


def test_preemptors_left_when_the_actions_stop_are_interrupted(metrics: AutomatorMetrics) -> None:
    script = {ObjectKey("ml", n): [EvictionOutcome.REFUSED_PDB] for n in ("x", "y")}
    kube = FakeKube(two_nodes(), eviction_script=script, dry_run_ok=True)
    result = run_pass(
        kube, FakePrometheus(idle_usage("x", "y")), CONFIG, Mode.ENFORCE, NOW, metrics=metrics, max_replans=1
    )
    assert result.plan is not None and len(result.plan.unresolved) == 1
    assert unresolved(metrics)["interrupted"] == 1 and sum(unresolved(metrics).values()) == 1


def _planned(*pods: dict[str, Any], nodes: int = 1) -> ClusterState:
    """A 4-GPU node held by pod v (busy unless the case needs it idle), and the preemptor."""
    objs = [k8s.node(f"node-{i}", 4) for i in range(nodes)]
    return k8s.cluster(*objs, k8s.pod("v", 4, "node-0"), *pods) if nodes else k8s.cluster(*pods)


CASES: dict[UnresolvedReason, tuple[ClusterState, PlannerConfig]] = {
    UnresolvedReason.NO_NODE: (_planned(k8s.preemptor("pre", 4), nodes=0), CONFIG),
    UnresolvedReason.NO_FIT: (_planned(k8s.preemptor("pre", 4)), CONFIG),
    UnresolvedReason.MALFORMED_POD: (_planned(k8s.preemptor("pre", "four")), CONFIG),
    UnresolvedReason.NOMINATED: (_planned(k8s.preemptor("pre", 4)), CONFIG),
    UnresolvedReason.COOLDOWN: (
        _planned(k8s.preemptor("pre", 4, annotations={LAST_RECLAIM_ANNOTATION: k8s.ago(10)})),
        CONFIG,
    ),
    UnresolvedReason.GAVE_UP: (
        _planned(k8s.preemptor("pre", 4, annotations={RECLAIM_COUNT_ANNOTATION: "3"})),
        CONFIG,
    ),
    UnresolvedReason.EVICTION_BUDGET: (
        _planned(k8s.preemptor("pre", 4)),
        PlannerConfig(max_evictions_per_pass=0),
    ),
}


@pytest.mark.parametrize("expected", list(CASES), ids=str)
def test_the_planner_gives_each_unresolved_preemptor_its_reason(expected: UnresolvedReason) -> None:
    """The reason label is set where the planner writes the text, never read back from the text."""
    state, config = CASES[expected]
    if expected is UnresolvedReason.NOMINATED:
        state.pods[-1] = msgspec.structs.replace(state.pods[-1], nominated_node="node-0")
    idle = k8s.idle("v") if expected is UnresolvedReason.EVICTION_BUDGET else k8s.busy("v")
    plan = planner.plan(state, idle, config, NOW)
    assert [(u.preemptor, u.kind) for u in plan.unresolved] == [(PRE, expected)], plan.unresolved


def test_counts_cover_every_reason() -> None:
    other = ObjectKey("a", "b")
    unresolved = [
        Unresolved(PRE, "x", UnresolvedReason.INTERRUPTED),
        Unresolved(other, "y", UnresolvedReason.NO_FIT),
    ]
    counts = unresolved_by_reason(unresolved)
    assert counts[UnresolvedReason.INTERRUPTED] == 1 and counts[UnresolvedReason.NO_FIT] == 1
    assert sum(counts.values()) == 2 and set(counts) == set(UnresolvedReason)


def test_the_docs_reason_table_is_the_enum() -> None:
    text = section(SERVICE_DOC.read_text(), "Unresolved preemptors by reason")
    documented = [code_spans(row[0])[0] for row in table_rows(text)[1:]]
    assert documented == [str(r) for r in UnresolvedReason]


def test_the_convention_sets_hold_their_constants_in_order() -> None:
    assert conventions.EVENT_REASONS[0] == conventions.REASON_VICTIM
    assert conventions.EVENT_REASONS[-1] == conventions.REASON_NOTICE_WITHDRAWN
    assert len(conventions.EVENT_REASONS) == 7
    assert conventions.CLASS_ANNOTATIONS[:2] == (
        conventions.RECLAIM_ANNOTATION,
        conventions.ANN_MIN_PREEMPTABLE_PRIORITY,
    )
    assert conventions.CLASS_ANNOTATIONS[-1] == conventions.ANN_CPU_IDLE_THRESHOLD
    assert len(conventions.CLASS_ANNOTATIONS) == 7


class _Declared:
    passes: Counter
    forgotten: Gauge


def test_a_metric_table_and_its_attributes_cannot_drift() -> None:
    spec = row("x_", "passes", "counter", "passes", "help")
    with pytest.raises(TypeError, match="forgotten"):
        declare(_Declared(), CollectorRegistry(), [spec])
