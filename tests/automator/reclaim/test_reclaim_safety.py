"""Issue 7, one test per failure of its Why list (each fails on the code before it, both sides tested).

Planner rules black-box through the CLI (`plan --output json`, `explain`), the service's acting through the
in-memory fakes. The Prometheus and Kubernetes halves run against real servers in
tests/automator/prom/test_prom_adapter.py (bursts after 28 idle minutes, newest samples missing,
Prometheus-time windows) and tests/automator/kube/test_kube_adapter.py (uid preconditions, 429 kinds, a
timeout after the server accepted, a hanging Lease renewal).
"""

from __future__ import annotations

from collections import deque
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from prometheus_client import CollectorRegistry

from automator.metrics import AutomatorMetrics
from automator.objects.cluster import ClusterState
from automator.objects.keys import JsonObj, ObjectKey
from automator.ports import EvictionOutcome, Mode
from automator.reclaim.model import PlannerConfig, PodUsage
from automator.service.actuator import ActuatorState, run_pass, skew_verdict
from steward_common.conventions import (
    LAST_RECLAIM_ANNOTATION,
    NEVER_RECLAIM_LABEL,
    PREEMPTOR_ANNOTATIONS,
    REASON_GAVE_UP,
    RECLAIM_COUNT_ANNOTATION,
    RECLAIM_NODE_ANNOTATION,
    RECLAIM_VICTIMS_ANNOTATION,
    UnresolvedReason,
)
from tests.automator import k8s
from tests.automator.fakes import FakeKube, FakePrometheus
from tests.automator.reclaim.test_contract_scenarios import Cli, evicted, unresolved, usage

NOW = k8s.NOW
PRE = ObjectKey("ml", "p")


@pytest.fixture
def run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(tmp_path, capsys)


def reasons(result: JsonObj) -> dict[str, str]:
    return {u["preemptor"]: u["reason"] for u in result["unresolved"]}


def one_node(*pods: JsonObj, gpus: int = 4) -> list[JsonObj]:
    return [k8s.node("n1", gpus=gpus), *pods]


# --- 1. a pod busy for the last 60-90 s after 28 idle minutes ---------------------------------------------


@pytest.mark.parametrize(("recent", "is_evicted"), [(1.0, False), (0.05, True), (0.0, True)])
def test_pod_that_just_became_busy_is_not_evicted(run: Cli, recent: float, is_evicted: bool) -> None:
    objs = one_node(k8s.pod("v", gpus=4, node_name="n1"), k8s.preemptor("p"))
    # 0.033 over 1800 s is "idle" on average; the recent maximum decides (equal to the threshold is idle).
    result = run.plan(objs, [usage("v", 0.033, gpu_recent_max=recent)])
    assert (evicted(result) == {"ml/p": ["ml/v"]}) is is_evicted
    if not is_evicted:
        assert "[recently-busy]" in run.explain("ml/v", objs, [usage("v", 0.033, gpu_recent_max=recent)])


def test_recent_window_is_a_flag(run: Cli) -> None:
    objs = one_node(k8s.pod("v", gpus=4, node_name="n1"), k8s.preemptor("p"))
    code, _, err = run.call("plan", *run.files(objs, [usage("v")]), "--recent-window", "0")
    assert code == 2 and "--recent-window" in err


def test_minimum_preemptable_priority_still_skips_the_recent_check(run: Cli) -> None:
    cls = k8s.victim_class("batch", 100, minimum_preemptable_priority="500")
    victim = k8s.pod("v", gpus=4, node_name="n1", priority=100, priority_class="batch")
    result = run.plan([*one_node(victim, k8s.preemptor("p")), cls], [usage("v", 0.9, gpu_recent_max=None)])
    assert evicted(result) == {"ml/p": ["ml/v"]}


# --- 2. newest samples missing; the automator's clock behind Prometheus' ----------------------------------


@pytest.mark.parametrize(("entry", "is_evicted"), [({}, False), ({"gpu_recent_max": None}, False),
                                                   ({"gpu_recent_max": 0.0}, True)])  # fmt: skip
def test_pod_whose_newest_samples_are_missing_is_not_evicted(
    run: Cli, entry: dict[str, Any], is_evicted: bool
) -> None:
    objs = one_node(k8s.pod("v", gpus=4, node_name="n1"), k8s.preemptor("p"))
    pods = [{"namespace": "ml", "name": "v", "gpu_activity": 0.0, "coverage": 0.8, **entry}]
    result = run.plan(objs, pods)
    assert (evicted(result) == {"ml/p": ["ml/v"]}) is is_evicted
    if not is_evicted:
        assert "[recent-usage-unknown]" in run.explain("ml/v", objs, pods)


def two_nodes_objects() -> list[JsonObj]:
    return k8s.cluster_objects(
        k8s.node("node-a", 4),
        k8s.node("node-b", 4),
        k8s.pod("x", 4, "node-a"),
        k8s.pod("y", 4, "node-b"),
        k8s.preemptor("p"),
    )


def two_nodes_cluster() -> ClusterState:
    return k8s.state(two_nodes_objects())


@pytest.mark.parametrize(
    ("skew", "acts", "outcome"),
    [(300.0, False, "clock_skew"), (-150.0, False, "clock_skew"), (60.0, True, "ok"), (0.0, True, "ok")],
)
def test_clock_skew_with_prometheus_beyond_120s_evicts_nothing(skew: float, acts: bool, outcome: str) -> None:
    kube = FakeKube(two_nodes_cluster())
    metrics = AutomatorMetrics(CollectorRegistry())
    prom = FakePrometheus(k8s.idle("x", "y"), skew=skew)
    result = run_pass(kube, prom, PlannerConfig(), Mode.ENFORCE, NOW, metrics=metrics)
    assert bool(kube.evicted) is acts and result.result == outcome
    assert ("clock skew" in result.reason) is (abs(skew) > 30)
    assert metrics.registry.get_sample_value("gpu_steward_automator_clock_skew_seconds") == skew


def test_skew_bounds() -> None:
    assert skew_verdict(None) == (True, "")
    assert skew_verdict(30.0) == (True, "")
    assert skew_verdict(31.0)[0] and skew_verdict(120.0)[0]
    assert not skew_verdict(120.5)[0] and not skew_verdict(-121.0)[0]


# --- 3. settings out of range -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--default-gpu-idle-threshold", "5"),
        ("--default-gpu-idle-threshold", "nan"),
        ("--default-gpu-idle-threshold", "-0.1"),
        ("--min-coverage", "inf"),
        ("--default-gpu-idle-seconds", "999999999"),
        ("--cooldown-seconds", "-1"),
        ("--max-evictions-per-pass", "-1"),
        ("--max-reclaims-per-preemptor", "0"),
    ],
)
def test_threshold_in_percent_and_unbounded_values_exit_2_naming_the_flag(
    run: Cli, flag: str, value: str
) -> None:
    objs = one_node(k8s.pod("v", gpus=4, node_name="n1"), k8s.preemptor("p"))
    code, out, err = run.call("plan", *run.files(objs, [usage("v")]), "--now", k8s.ts(NOW), flag, value)
    assert code == 2 and out == "" and flag in err


def test_threshold_in_percent_from_the_environment_names_the_variable(
    run: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPU_STEWARD_DEFAULT_GPU_IDLE_THRESHOLD", "5")
    objs = one_node(k8s.pod("v", gpus=4, node_name="n1"), k8s.preemptor("p"))
    code, _, err = run.call("plan", *run.files(objs, [usage("v")]))
    assert code == 2 and "GPU_STEWARD_DEFAULT_GPU_IDLE_THRESHOLD" in err and "[0, 1]" in err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--rule-interval", "nan"),
        ("--rule-interval", "inf"),
        ("--rule-interval", "300"),
        ("--interval", "nan"),
        ("--interval", "0"),
        ("--prometheus-timeout", "inf"),
        ("--api-timeout", "nan"),
        ("--max-evictions-per-hour", "-5"),
    ],
)
def test_service_settings_out_of_range_exit_2(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from automator import cli

    code = cli.main(["run", flag, value])
    assert code == 2 and flag in capsys.readouterr().err


def test_annotation_window_longer_than_7_days_protects_the_class(run: Cli) -> None:
    cls = k8s.victim_class("batch", 100, gpu_idle_seconds=str(8 * 86400))
    victim = k8s.pod(
        "v", gpus=4, node_name="n1", priority=100, priority_class="batch", scheduled_ago=9 * 86400
    )
    result = run.plan([*one_node(victim, k8s.preemptor("p")), cls], [usage("v")])
    assert evicted(result) == {} and "7 days" in result["warnings"][0]["message"]


def test_enforce_without_leader_election_needs_single_replica(capsys: pytest.CaptureFixture[str]) -> None:
    from automator import cli

    assert cli.main(["run", "--mode", "enforce", "--no-leader-election"]) == 2
    assert "--single-replica" in capsys.readouterr().err


# --- 4. leadership checked before each eviction -----------------------------------------------------------


def test_leadership_lost_between_two_evictions_stops_every_write() -> None:
    state = k8s.cluster(
        k8s.node("n1", 4), k8s.pod("a", 2, "n1"), k8s.pod("b", 2, "n1"), k8s.preemptor("p", gpus=4)
    )
    kube = FakeKube(state)
    result = run_pass(
        kube, FakePrometheus(k8s.idle("a", "b")), PlannerConfig(), Mode.ENFORCE, NOW,
        should_continue=lambda: not kube.evicted,  # the lease is lost right after the first eviction
    )  # fmt: skip
    assert kube.evicted == [ObjectKey("ml", "a")]  # checked again before b: not evicted
    assert kube.written == {} and kube.events == []  # no write after leadership is lost
    assert "lost leadership" in result.reason


# --- 5. cooldown, reservation, budgets, giving up -----------------------------------------------------------


def cooling_preemptor(name: str = "p", victims: str = "ml/v", node: str = "n1", **kw: Any) -> JsonObj:
    ann = {
        LAST_RECLAIM_ANNOTATION: k8s.ago(600),  # the 300 s cooldown time has passed
        RECLAIM_NODE_ANNOTATION: node,
        RECLAIM_VICTIMS_ANNOTATION: victims,
    }
    return k8s.preemptor(name, annotations=ann, **kw)


@pytest.mark.parametrize("terminating", [True, False])
def test_victims_slower_than_the_cooldown_do_not_get_a_second_set(run: Cli, terminating: bool) -> None:
    objs = [
        k8s.node("n1", 4), k8s.node("n2", 4),
        k8s.pod("v", gpus=4, node_name="n1", terminating=terminating),
        k8s.pod("w", gpus=4, node_name="n2"),
        cooling_preemptor(),
    ]  # fmt: skip
    result = run.plan(objs, [usage("w")])
    if terminating:
        assert evicted(result) == {} and result["skipped_cooldown"] == ["ml/p"]
        assert reasons(result)["ml/p"].startswith("cooldown") and "ml/v" in reasons(result)["ml/p"]
    else:
        assert evicted(result) == {"ml/p": ["ml/w"]}


@pytest.mark.parametrize("reserved", [True, False])
def test_gpus_freed_for_a_preemptor_in_cooldown_are_not_offered_to_another(run: Cli, reserved: bool) -> None:
    # n1's victims are gone: 4 GPUs free. p (in cooldown for n1) waits for the scheduler to bind it there.
    ann = {LAST_RECLAIM_ANNOTATION: k8s.ago(60), RECLAIM_NODE_ANNOTATION: "n1" if reserved else "elsewhere"}
    objs = [
        k8s.node("n1", 4), k8s.node("n2", 4),
        k8s.pod("w", gpus=4, node_name="n2"),
        k8s.preemptor("p", annotations=ann),
        k8s.preemptor("q", priority=500, created_ago=10),
    ]  # fmt: skip
    result = run.plan(objs, [usage("w")])
    if reserved:  # q may not take n1: it gets its own victim on n2
        assert result["already_fit"] == [] and evicted(result) == {"ml/q": ["ml/w"]}
    else:
        assert [f["node"] for f in result["already_fit"]] == ["n1"] and evicted(result) == {}


def test_no_more_than_max_evictions_per_pass(run: Cli) -> None:
    objs: list[JsonObj] = []
    for i in range(12):
        objs += [k8s.node(f"n{i:02}", 1), k8s.pod(f"v{i:02}", gpus=1, node_name=f"n{i:02}")]
        objs.append(k8s.preemptor(f"p{i:02}", gpus=1, created_ago=1000 - i))
    objs.append(k8s.preemptor("fits-anyway", gpus=0))  # not a GPU pod: ignored
    pods = [usage(f"v{i:02}") for i in range(12)]
    result = run.plan(objs, pods)
    assert len(result["decisions"]) == 10
    stopped = sorted(p for p, r in reasons(result).items() if r.startswith("eviction-budget"))
    assert stopped == ["ml/p10", "ml/p11"]
    assert len(run.plan(objs, pods, k8s.ts(NOW), "--max-evictions-per-pass", "12")["decisions"]) == 12


def test_budget_stops_every_later_preemptor_except_those_that_already_fit(run: Cli) -> None:
    objs = [
        k8s.node("n1", 4), k8s.node("n2", 2), k8s.node("n3", 1),
        k8s.pod("a", 2, "n1"), k8s.pod("b", 2, "n1"), k8s.pod("c", 2, "n2"),
        k8s.preemptor("big", gpus=4, created_ago=300),   # needs 2 victims: over a budget of 1
        k8s.preemptor("small", gpus=2, created_ago=200),  # 1 victim would do, but the budget stopped
        k8s.preemptor("tiny", gpus=1, created_ago=100),   # fits on n3 as it is
    ]  # fmt: skip
    result = run.plan(objs, [usage(n) for n in "abc"], k8s.ts(NOW), "--max-evictions-per-pass", "1")
    assert evicted(result) == {}
    assert reasons(result)["ml/big"].startswith("eviction-budget")
    assert reasons(result)["ml/small"].startswith("eviction-budget")
    assert [f["preemptor"] for f in result["already_fit"]] == ["ml/tiny"]


def test_hourly_eviction_budget_is_kept_across_passes() -> None:
    state = ActuatorState(evictions=deque([NOW - timedelta(minutes=30)] * 60))
    kube = FakeKube(two_nodes_cluster())
    metrics = AutomatorMetrics(CollectorRegistry())
    result = run_pass(
        kube, FakePrometheus(k8s.idle("x", "y")), PlannerConfig(), Mode.ENFORCE, NOW,
        state=state, metrics=metrics, max_evictions_per_hour=60,
    )  # fmt: skip
    assert kube.eviction_calls == [] and result.plan is not None
    assert result.plan.unresolved[0].reason.startswith("eviction-budget")
    assert result.plan.unresolved[0].kind is UnresolvedReason.EVICTION_BUDGET
    assert metrics.registry.get_sample_value("gpu_steward_automator_evictions_last_hour") == 60
    # 31 minutes later the window has slid past them: one eviction is allowed again.
    later = NOW + timedelta(minutes=31)
    run_pass(kube, FakePrometheus(k8s.idle("x", "y")), PlannerConfig(), Mode.ENFORCE, later, state=state,
             max_evictions_per_hour=60)  # fmt: skip
    assert kube.evicted == [ObjectKey("ml", "x")] and state.evictions_last_hour(later) == 1


@pytest.mark.parametrize(("count", "gives_up"), [("3", True), ("2", False), ("lots", True)])
def test_preemptor_that_never_lands_stops_getting_victims(run: Cli, count: str, gives_up: bool) -> None:
    pre = k8s.preemptor("p", annotations={RECLAIM_COUNT_ANNOTATION: count})
    result = run.plan(one_node(k8s.pod("v", gpus=4, node_name="n1"), pre), [usage("v")])
    assert (unresolved(result) == ["ml/p"]) is gives_up
    if gives_up:
        assert reasons(result)["ml/p"].startswith("gave-up")


def test_gave_up_preemptor_gets_one_warning_event() -> None:
    state = k8s.cluster(
        k8s.node("n1", 4), k8s.pod("v", 4, "n1"),
        k8s.preemptor("p", annotations={RECLAIM_COUNT_ANNOTATION: "3"}),
    )  # fmt: skip
    kube = FakeKube(state)
    memory = ActuatorState()
    for i in range(2):
        when = NOW + timedelta(seconds=i)
        run_pass(kube, FakePrometheus(k8s.idle("v")), PlannerConfig(), Mode.ENFORCE, when, state=memory)
    assert kube.evicted == []
    assert [(e.pod, e.type, e.reason) for e in kube.events] == [(PRE, "Warning", REASON_GAVE_UP)]


def test_reclaim_annotations_are_written_and_counted() -> None:
    pre = k8s.preemptor("p", annotations={RECLAIM_COUNT_ANNOTATION: "1"})
    kube = FakeKube(k8s.cluster(k8s.node("n1", 4), k8s.pod("a", 2, "n1"), k8s.pod("b", 2, "n1"), pre))
    run_pass(kube, FakePrometheus(k8s.idle("a", "b")), PlannerConfig(), Mode.ENFORCE, NOW)
    assert kube.written[PRE] == {
        LAST_RECLAIM_ANNOTATION: k8s.ts(NOW),
        RECLAIM_NODE_ANNOTATION: "n1",
        RECLAIM_VICTIMS_ANNOTATION: "ml/a,ml/b",
        RECLAIM_COUNT_ANNOTATION: "2",
    }
    assert set(kube.written[PRE]) == set(PREEMPTOR_ANNOTATIONS)


@pytest.mark.parametrize("nominated", ["n1", None])
def test_preemptor_nominated_by_the_scheduler_is_left_to_it(run: Cli, nominated: str | None) -> None:
    pre = k8s.preemptor("p")
    if nominated:
        pre["status"]["nominatedNodeName"] = nominated
    result = run.plan(one_node(k8s.pod("v", gpus=4, node_name="n1"), pre), [usage("v")])
    if nominated:
        assert evicted(result) == {} and reasons(result)["ml/p"].startswith("scheduler-nominated")
    else:
        assert evicted(result) == {"ml/p": ["ml/v"]}


# --- 6. evicting the pod that was judged, and only once ---------------------------------------------------


def test_statefulset_pod_recreated_under_the_same_name_is_not_evicted() -> None:
    state = two_nodes_cluster()

    def recreate_x(live: ClusterState) -> None:
        i = next(i for i, p in enumerate(live.pods) if p.key.name == "x")
        # same name, a new pod, not the one judged idle
        live.pods[i] = msgspec.structs.replace(live.pods[i], uid="uid-recreated")

    kube = FakeKube(state, after_snapshot=recreate_x)
    result = run_pass(kube, FakePrometheus(k8s.idle("x", "y")), PlannerConfig(), Mode.ENFORCE, NOW)
    assert kube.uids_sent[0] == "uid-ml-x"
    assert ObjectKey("ml", "x") not in kube.evicted  # 409: skipped, not counted as freed
    assert kube.evicted == [ObjectKey("ml", "y")] and result.replans == 1


@pytest.mark.parametrize("accepted", [True, False])
def test_unknown_outcome_ends_the_pass_and_cools_the_preemptor(accepted: bool) -> None:
    # Whether or not the server took it, a pod still running now may be evicted by the request later.
    kube = FakeKube(two_nodes_cluster(), eviction_script={ObjectKey("ml", "x"): [EvictionOutcome.UNKNOWN]})
    if accepted:
        kube.accepted_silently.add(ObjectKey("ml", "x"))
    result = run_pass(kube, FakePrometheus(k8s.idle("x", "y")), PlannerConfig(), Mode.ENFORCE, NOW)
    assert kube.eviction_calls == [ObjectKey("ml", "x")]  # y is not evicted while x's fate is unknown
    assert result.replans == 0 and "no known outcome" in result.reason
    # Taken as evicted: the preemptor enters cooldown (annotations name x), so no second victim follows.
    assert kube.written[PRE][RECLAIM_VICTIMS_ANNOTATION] == "ml/x"


def test_unknown_outcome_keeps_the_preemptor_waiting_next_pass() -> None:
    kube = FakeKube(two_nodes_cluster(), eviction_script={ObjectKey("ml", "x"): [EvictionOutcome.UNKNOWN]})
    state = ActuatorState()
    usage = FakePrometheus(k8s.idle("x", "y"))
    run_pass(kube, usage, PlannerConfig(), Mode.ENFORCE, NOW, state=state)
    later = run_pass(kube, usage, PlannerConfig(), Mode.ENFORCE, NOW + timedelta(seconds=30), state=state)
    assert kube.eviction_calls == [ObjectKey("ml", "x")] and not later.acted


def test_preemptor_that_cannot_be_read_again_gets_nothing() -> None:
    kube = FakeKube(two_nodes_cluster(), fail_get=True)
    result = run_pass(kube, FakePrometheus(k8s.idle("x", "y")), PlannerConfig(), Mode.ENFORCE, NOW)
    assert kube.eviction_calls == [] and "cannot be read" in result.reason


@pytest.mark.parametrize("change", ["scheduled", "nominated", "replaced", "gone", None])
def test_preemptor_is_read_again_before_its_victims_go(change: str | None) -> None:
    def mutate(live: ClusterState) -> None:
        i = next(i for i, p in enumerate(live.pods) if p.key.name == "p")
        replace = msgspec.structs.replace
        if change == "scheduled":
            live.pods[i] = replace(live.pods[i], node_name="node-b")
        elif change == "nominated":
            live.pods[i] = replace(live.pods[i], nominated_node="node-a")
        elif change == "replaced":
            live.pods[i] = replace(live.pods[i], uid="uid-new")
        elif change == "gone":
            del live.pods[i]

    kube = FakeKube(two_nodes_cluster(), after_snapshot=mutate)
    result = run_pass(kube, FakePrometheus(k8s.idle("x", "y")), PlannerConfig(), Mode.ENFORCE, NOW)
    assert PRE in kube.get_calls
    assert bool(kube.evicted) is (change is None)
    if change is not None:
        assert result.plan is not None and [u.preemptor for u in result.plan.unresolved] == [PRE]
        kind = UnresolvedReason.NOMINATED if change == "nominated" else UnresolvedReason.PREEMPTOR_CHANGED
        assert result.plan.unresolved[0].kind is kind


def test_api_throttling_ends_the_pass_instead_of_excluding_the_victim() -> None:
    kube = FakeKube(two_nodes_cluster(), eviction_script={ObjectKey("ml", "x"): [EvictionOutcome.THROTTLED]})
    result = run_pass(kube, FakePrometheus(k8s.idle("x", "y")), PlannerConfig(), Mode.ENFORCE, NOW)
    assert kube.eviction_calls == [] and kube.dry_run_calls == [ObjectKey("ml", "x")]
    assert result.replans == 0 and "throttling" in result.reason and "Retry-After 5" in result.reason


def test_budget_refusal_excludes_the_victim_and_replans() -> None:
    kube = FakeKube(
        two_nodes_cluster(), eviction_script={ObjectKey("ml", "x"): [EvictionOutcome.REFUSED_PDB]}
    )
    result = run_pass(kube, FakePrometheus(k8s.idle("x", "y")), PlannerConfig(), Mode.ENFORCE, NOW)
    assert kube.evicted == [ObjectKey("ml", "y")] and result.replans == 1


def test_decision_is_evicted_whole_or_not_at_all() -> None:
    state = k8s.cluster(
        k8s.node("n1", 4), k8s.pod("a", 2, "n1"), k8s.pod("b", 2, "n1"), k8s.preemptor("p", gpus=4)
    )
    kube = FakeKube(state, eviction_script={ObjectKey("ml", "b"): [EvictionOutcome.REFUSED_PDB]})
    run_pass(kube, FakePrometheus(k8s.idle("a", "b")), PlannerConfig(), Mode.ENFORCE, NOW)
    assert kube.dry_run_calls == [ObjectKey("ml", "a"), ObjectKey("ml", "b")]
    assert kube.evicted == []  # b's dry run was refused: a is not evicted for nothing


# --- 7. scope: namespaces and opting out ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "flags", "is_evicted"),
    [
        ("kube-system", (), False),
        ("kube-system", ("--exclude-namespaces", ""), True),
        ("ml", ("--exclude-namespaces", "ml,other"), False),
        ("ml", ("--victim-namespaces", "batch"), False),
        ("ml", ("--victim-namespaces", "batch,ml"), True),
        ("ml", (), True),
    ],
)
def test_namespaces_that_may_lose_pods(
    run: Cli, namespace: str, flags: tuple[str, ...], is_evicted: bool
) -> None:
    objs = one_node(k8s.pod("v", gpus=4, node_name="n1", namespace=namespace), k8s.preemptor("p"))
    result = run.plan(objs, [usage("v", namespace=namespace)], k8s.ts(NOW), *flags)
    assert bool(evicted(result)) is is_evicted


def test_namespace_scope_from_the_environment(run: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_STEWARD_EXCLUDE_NAMESPACES", "")
    objs = one_node(k8s.pod("v", gpus=4, node_name="n1", namespace="kube-system"), k8s.preemptor("p"))
    assert evicted(run.plan(objs, [usage("v", namespace="kube-system")])) == {"ml/p": ["kube-system/v"]}


@pytest.mark.parametrize(("value", "is_evicted"), [("true", False), ("True", False), ("false", True)])
def test_pod_can_opt_out(run: Cli, value: str, is_evicted: bool) -> None:
    victim = k8s.pod("v", gpus=4, node_name="n1", labels={NEVER_RECLAIM_LABEL: value})
    objs = one_node(victim, k8s.preemptor("p"))
    result = run.plan(objs, [usage("v")])
    assert bool(evicted(result)) is is_evicted
    if not is_evicted:
        assert "[opted-out]" in run.explain("ml/v", objs, [usage("v")])


def test_opt_out_comes_before_minimum_preemptable_priority(run: Cli) -> None:
    cls = k8s.victim_class("batch", 100, minimum_preemptable_priority="500")
    victim = k8s.pod(
        "v", gpus=4, node_name="n1", priority_class="batch", labels={NEVER_RECLAIM_LABEL: "true"}
    )
    result = run.plan([*one_node(victim, k8s.preemptor("p")), cls], [usage("v")])
    assert evicted(result) == {}


# --- 9. most candidates with unknown usage is visible ------------------------------------------------------


def test_unknown_usage_of_most_candidates_is_a_metric() -> None:
    kube = FakeKube(two_nodes_cluster())
    metrics = AutomatorMetrics(CollectorRegistry())
    run_pass(kube, FakePrometheus({}), PlannerConfig(), Mode.DRY_RUN, NOW, metrics=metrics)
    sample = metrics.registry.get_sample_value
    assert sample("gpu_steward_automator_candidate_victims") == 2
    assert sample("gpu_steward_automator_candidate_victims_usage_unknown") == 2


def test_nonfinite_series_are_counted() -> None:
    kube = FakeKube(two_nodes_cluster())
    metrics = AutomatorMetrics(CollectorRegistry())
    run_pass(
        kube, FakePrometheus(k8s.idle("x"), nonfinite=1), PlannerConfig(), Mode.DRY_RUN, NOW, metrics=metrics
    )
    assert metrics.registry.get_sample_value("gpu_steward_automator_nonfinite_series_total") == 1


def test_usage_file_reads_the_recent_maximum(tmp_path: Path) -> None:
    from automator.reclaim.snapshot import load_usage

    path = tmp_path / "usage.yaml"
    path.write_text(yaml.safe_dump({"pods": [{"namespace": "a", "name": "b", "gpu_activity": 0.0,
                                              "gpu_recent_max": 0.5}, {"namespace": "a", "name": "c",
                                                                       "gpu_activity": 0.0}]}))  # fmt: skip
    got = load_usage(path)
    assert got[ObjectKey("a", "b")] == PodUsage(0.0, 1.0, None, 0.5)
    assert got[ObjectKey("a", "c")].gpu_recent_max is None
