"""The Kueue decisions (automator/kueue/decide.py): waiting and holding Workloads, idleness by the planner's
victim rules, candidates across ClusterQueue and cohort, boost and unboost, deactivation sets, budgets,
cooldown, and a user's own boost left alone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from automator.kueue.decide import plan_kueue, workload_pods
from automator.kueue.model import KueueMode, KueuePlan, KueueSettings
from automator.kueue.report import kueue_json, kueue_lines
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.kueue import kueue_workload
from automator.reclaim.model import PlannerConfig, PodUsage
from steward_common.conventions import (
    GANG_KUEUE_LABEL,
    KUEUE_BOOST_ANNOTATION,
    KUEUE_BOOST_OWNER_ANNOTATION,
    KUEUE_DEACTIVATED_FOR_ANNOTATION,
    KUEUE_YIELD_TO_EQUAL_ANNOTATION,
    PLUGIN_PREFIX,
)
from tests.automator import k8s

BOOST = KueueSettings(KueueMode.BOOST)
DEACTIVATE = KueueSettings(KueueMode.DEACTIVATE)
OURS = {KUEUE_BOOST_ANNOTATION: "-100000", KUEUE_BOOST_OWNER_ANNOTATION: "gpu-steward"}


def holder(
    name: str, node: str = "n1", gpus: int = 8, pods: int = 1, priority: int = 100, **kw: Any
) -> list[JsonObj]:
    """An admitted Workload of ClusterQueue cq (unless admitted_in says) and its running pods."""
    kw.setdefault("admitted_in", "cq")
    per_pod = gpus // pods
    workload = k8s.kueue_workload(
        name, gpus=per_pod, count=pods, priority=priority, job_uid=f"job-{name}", **kw
    )
    members = [
        k8s.owned(k8s.pod(f"{name}-{i}", gpus=per_pod, node_name=node, priority=priority), f"job-{name}")
        for i in range(pods)
    ]
    return [workload, *members]


def base(*extra: JsonObj, cq: JsonObj | None = None) -> list[JsonObj]:
    return [
        k8s.node("n1"),
        k8s.node("n2"),
        k8s.node("n3"),
        cq if cq is not None else k8s.cluster_queue("cq", nominal=16, used=16),
        k8s.local_queue("q", "cq"),
        *extra,
    ]


def idle_usage(*pods: str, **kw: Any) -> dict[ObjectKey, PodUsage]:
    return k8s.idle(*pods, **kw)


def run(
    objs: list[JsonObj],
    usage: dict[ObjectKey, PodUsage],
    settings: KueueSettings = BOOST,
    **kw: Any,
) -> KueuePlan:
    config = PlannerConfig(**kw.pop("config", {}))
    return plan_kueue(k8s.with_kueue(objs), usage, config, k8s.NOW, settings, **kw)


def boosted(plan: KueuePlan) -> dict[str, str]:
    return {str(b.target.key): str(b.waiting) for b in plan.boost}


def notes(plan: KueuePlan) -> dict[str, str]:
    return {str(n.workload): n.reason for n in plan.unresolved}


# --- waiting Workloads and their need -----------------------------------------------------------------


def test_need_from_resource_requests_else_pod_sets_by_the_scheduler_formula() -> None:
    record = kueue_workload(k8s.kueue_workload("w", gpus=2, count=3))
    assert record.gpus(["nvidia.com/gpu"]) == 6
    stated = kueue_workload(k8s.kueue_workload("w", gpus=2, count=3, requests={"nvidia.com/gpu": "4"}))
    assert stated.gpus(["nvidia.com/gpu"]) == 4
    # init containers: the peak during init counts when it is above the sum of the app containers
    obj = k8s.kueue_workload("w", gpus=1, count=2)
    template = obj["spec"]["podSets"][0]["template"]["spec"]
    template["initContainers"] = [{"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "3"}}}]
    assert kueue_workload(obj).gpus(["nvidia.com/gpu"]) == 6
    assert kueue_workload(obj).gpus(["example.com/gpu"]) == 0


def test_waiting_is_active_unfinished_without_quota_reserved_and_needing_gpus() -> None:
    objs = base(
        k8s.kueue_workload("wait", priority=200),
        k8s.kueue_workload("no-gpu", gpus=0, priority=200),
        k8s.kueue_workload("inactive", priority=200, active=False),
        k8s.kueue_workload(
            "reserved", priority=200, conditions=[{"type": "QuotaReserved", "status": "True"}]
        ),
        k8s.kueue_workload("done", priority=200, conditions=[{"type": "Finished", "status": "True"}]),
        *holder("idle"),
    )
    plan = run(objs, idle_usage("idle-0"))
    assert [str(w.key) for w in plan.waiting] == ["ml/wait"]
    assert plan.waiting[0].gpus == 8 and plan.waiting[0].cluster_queue == "cq"
    assert boosted(plan) == {"ml/idle": "ml/wait"}


def test_a_waiting_workload_whose_queue_is_not_listed_is_unresolved() -> None:
    objs = base(k8s.kueue_workload("wait", priority=200, queue="nope"), *holder("idle"))
    plan = run(objs, idle_usage("idle-0"))
    assert notes(plan)["ml/wait"].startswith("kueue-queue-unknown: LocalQueue ml/nope is not listed")
    assert plan.boost == []


# --- boost --------------------------------------------------------------------------------------------


def test_boost_writes_the_value_for_an_idle_lower_priority_holder_of_the_same_cluster_queue() -> None:
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle", pods=2))
    plan = run(objs, idle_usage("idle-0", "idle-1"))
    (b,) = plan.boost
    assert (str(b.target.key), str(b.waiting), b.value, b.gpus, b.pods) == (
        "ml/idle",
        "ml/wait",
        -100000,
        8,
        2,
    )
    assert b.target.uid == "uid-wl-ml-idle" and b.target.api_version == "kueue.x-k8s.io/v1beta2"
    assert plan.idle_gpus_held == 8 and plan.served == [ObjectKey("ml", "wait")]
    assert kueue_json(plan) == {
        "mode": "boost",
        "boost": [{"workload": "ml/idle", "for": "ml/wait", "value": -100000, "gpus": 8}],
        "unboost": [],
        "deactivate": [],
        "unresolved": [],
        "left_alone": [],
    }
    custom = run(objs, idle_usage("idle-0", "idle-1"), settings=KueueSettings(KueueMode.BOOST, -5))
    assert [b.value for b in custom.boost] == [-5]


def test_one_busy_pod_protects_the_whole_workload_and_its_boost_goes() -> None:
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle", pods=2, annotations=OURS))
    usage = {**idle_usage("idle-0"), **k8s.busy("idle-1")}
    plan = run(objs, usage)
    assert plan.boost == []
    assert notes(plan)["ml/wait"].startswith("kueue-no-idle-workload: no idle Workload")
    assert "ml/idle-1 [6-gpu-busy]" in notes(plan)["ml/wait"]
    (u,) = plan.unboost
    assert str(u.target.key) == "ml/idle" and u.reason.startswith("kueue-not-idle: ml/idle-1 [6-gpu-busy]")


@pytest.mark.parametrize(
    ("usage", "rule"),
    [
        ({}, "5-usage-unknown"),
        (k8s.idle("idle-0", coverage=0.5), "5-coverage-low"),
        (k8s.idle("idle-0", gpu_recent_max=None), "recent-usage-unknown"),
        (k8s.idle("idle-0", gpu_recent_max=0.5), "recently-busy"),
    ],
)
def test_unknown_or_recent_data_protects_a_holder_as_it_protects_a_pod(
    usage: dict[ObjectKey, PodUsage], rule: str
) -> None:
    plan = run(base(k8s.kueue_workload("wait", priority=200), *holder("idle")), usage)
    assert plan.boost == [] and f"[{rule}]" in notes(plan)["ml/wait"]


def test_scope_labels_pdbs_and_young_pods_protect_a_holder() -> None:
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle"))
    objs[-1]["metadata"]["labels"]["gpu-steward.io/never-reclaim"] = "true"
    assert "[opted-out]" in notes(run(objs, idle_usage("idle-0")))["ml/wait"]
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle", pods=2))
    for pod in objs[-2:]:
        pod["metadata"]["labels"]["app"] = "train"
    objs.append(k8s.pdb("one-at-a-time", {"matchLabels": {"app": "train"}}, 1))
    assert (
        "[0-pdb] PodDisruptionBudget ml/one-at-a-time allows 1"
        in notes(run(objs, idle_usage("idle-0", "idle-1")))["ml/wait"]
    )
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle"))
    objs[-1]["status"]["conditions"][0]["lastTransitionTime"] = k8s.ago(60)
    assert "[4-too-young]" in notes(run(objs, idle_usage("idle-0")))["ml/wait"]


def test_minimum_preemptable_priority_makes_a_busy_holder_a_candidate() -> None:
    cls = k8s.victim_class("batch", 100, minimum_preemptable_priority="150")
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle"), cls)
    objs[-2]["spec"]["priorityClassName"] = "batch"
    plan = run(objs, k8s.busy("idle-0"))
    assert boosted(plan) == {"ml/idle": "ml/wait"}


def test_priority_is_the_workloads_strictly_lower_or_equal_where_the_class_yields() -> None:
    objs = base(k8s.kueue_workload("wait", priority=100), *holder("idle", priority=100))
    plan = run(objs, idle_usage("idle-0"))
    assert plan.boost == [] and notes(plan)["ml/wait"].startswith("kueue-no-idle-workload")
    yielding = k8s.priority_class("batch", 100, {KUEUE_YIELD_TO_EQUAL_ANNOTATION: "true"})
    objs = base(k8s.kueue_workload("wait", priority=100), *holder("idle", priority=100), yielding)
    objs[-2]["spec"]["priorityClassName"] = "batch"
    assert boosted(run(objs, idle_usage("idle-0"))) == {"ml/idle": "ml/wait"}
    # a higher-priority Workload never yields, whatever its pods' priority
    objs = base(k8s.kueue_workload("wait", priority=100), *holder("idle", priority=300))
    objs[-1]["spec"]["priority"] = 1
    assert run(objs, idle_usage("idle-0")).boost == []


def test_candidates_across_cluster_queue_and_cohort() -> None:
    def cluster(within: str | None, reclaim: str | None) -> list[JsonObj]:
        cq = k8s.cluster_queue("cq", within=within, reclaim=reclaim, cohort="research")
        other = k8s.cluster_queue("other", within=None, cohort="research")
        lonely = k8s.cluster_queue("lonely", within=None, cohort="elsewhere")
        return base(
            other,
            lonely,
            k8s.kueue_workload("wait", priority=200),
            *holder("mine", node="n1"),
            *holder("theirs", node="n2", admitted_in="other"),
            *holder("far", node="n3", admitted_in="lonely"),
            cq=cq,
        )

    usage = idle_usage("mine-0", "theirs-0", "far-0")
    assert set(boosted(run(cluster("LowerPriority", "Any"), usage))) == {"ml/mine", "ml/theirs"}
    assert set(boosted(run(cluster("LowerPriority", None), usage))) == {"ml/mine"}
    assert set(boosted(run(cluster("Never", "LowerPriority"), usage))) == {"ml/theirs"}
    plan = run(cluster("Never", "Never"), usage)
    assert plan.boost == []
    assert notes(plan)["ml/wait"] == (
        "kueue-no-preemption: ClusterQueue cq: withinClusterQueue is Never and reclaimWithinCohort is Never: "
        "Kueue cannot preempt for it"
    )
    # deactivate: the same ClusterQueue only, whatever the policies say
    deactivated = run(cluster("Never", "Any"), usage, settings=DEACTIVATE)
    assert [str(d.target.key) for d in deactivated.deactivate] == ["ml/mine"]


def test_a_boost_the_user_wrote_is_left_alone_and_reported() -> None:
    users = {KUEUE_BOOST_ANNOTATION: "-5"}
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle", annotations=users))
    plan = run(objs, idle_usage("idle-0"))
    assert plan.boost == [] and plan.unboost == []
    assert [(str(n.workload), n.reason) for n in plan.left_alone] == [
        (
            "ml/idle",
            "kueue-foreign-boost: it carries kueue.x-k8s.io/priority-boost=-5 that gpu-steward did not write",
        )
    ]
    assert kueue_json(plan)["left_alone"] == [{"workload": "ml/idle", "reason": plan.left_alone[0].reason}]


def test_a_boost_in_place_is_not_written_again_and_goes_when_nothing_waits_or_not_admitted() -> None:
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle", annotations=OURS))
    plan = run(objs, idle_usage("idle-0"))
    assert plan.boost == [] and plan.unboost == [] and plan.idle_gpus_held == 8
    plan = run(base(*holder("idle", annotations=OURS)), idle_usage("idle-0"))
    assert [(str(u.target.key), u.reason.split(":")[0]) for u in plan.unboost] == [
        ("ml/idle", "kueue-nothing-waits")
    ]
    requeued = k8s.kueue_workload("idle", annotations=OURS, priority=100)  # preempted by Kueue: waiting again
    plan = run(base(requeued), {})
    assert [u.reason for u in plan.unboost] == ["kueue-not-admitted: not admitted"]


def test_boosts_count_their_pods_against_the_budget() -> None:
    objs = base(
        k8s.kueue_workload("wait", priority=200),
        *holder("a", node="n1", pods=2),
        *holder("b", node="n2", pods=2),
    )
    usage = idle_usage("a-0", "a-1", "b-0", "b-1")
    plan = run(objs, usage, budget=3)
    assert boosted(plan) == {"ml/a": "ml/wait"}
    assert notes(plan)["ml/wait"] == "eviction-budget: boosting ml/b counts 2 pod(s), 1 left this pass"
    assert boosted(run(objs, usage, budget=4)) == {"ml/a": "ml/wait", "ml/b": "ml/wait"}


def test_a_waiting_workload_served_within_the_cooldown_gets_no_new_boost() -> None:
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle"))
    served = {ObjectKey("ml", "wait"): k8s.NOW - timedelta(seconds=60)}
    plan = run(objs, idle_usage("idle-0"), served=served)
    assert plan.boost == [] and notes(plan)["ml/wait"].startswith("cooldown: served 60 s ago")
    long_ago = {ObjectKey("ml", "wait"): k8s.NOW - timedelta(seconds=3600)}
    assert boosted(run(objs, idle_usage("idle-0"), served=long_ago)) == {"ml/idle": "ml/wait"}


# --- deactivate ---------------------------------------------------------------------------------------


def test_deactivation_covers_the_shortfall_with_the_best_set_by_the_victim_order() -> None:
    # cq: 24 nominal, 24 used; the waiting Workload needs 8: one 8-GPU Workload beats two 4-GPU ones, and of
    # two 8-GPU ones the lower priority goes
    cq = k8s.cluster_queue("cq", nominal=24, used=24)
    objs = base(
        k8s.kueue_workload("wait", priority=200),
        *holder("small-a", node="n1", gpus=4),
        *holder("small-b", node="n1", gpus=4),
        *holder("big-hi", node="n2", gpus=8, priority=150),
        *holder("big-lo", node="n3", gpus=8, priority=120),
        cq=cq,
    )
    usage = idle_usage("small-a-0", "small-b-0", "big-hi-0", "big-lo-0")
    plan = run(objs, usage, settings=DEACTIVATE)
    assert [(str(d.target.key), str(d.waiting), d.gpus) for d in plan.deactivate] == [
        ("ml/big-lo", "ml/wait", 8)
    ]
    assert "GPU activity at most 0" in plan.deactivate[0].activity
    assert kueue_json(plan)["deactivate"] == [{"workload": "ml/big-lo", "for": "ml/wait", "gpus": 8}]
    # 4 unused: the shortfall is 4, one 4-GPU Workload covers it (fewest GPUs), the first by name
    partly = base(*objs[5:], cq=k8s.cluster_queue("cq", nominal=28, used=24))
    assert [str(d.target.key) for d in run(partly, usage, settings=DEACTIVATE).deactivate] == ["ml/small-a"]


def test_no_set_covers_quota_free_and_quota_not_offered_twice() -> None:
    objs = base(k8s.kueue_workload("wait", priority=200, gpus=16), *holder("idle"))
    plan = run(objs, idle_usage("idle-0"), settings=DEACTIVATE)
    assert plan.deactivate == []
    assert notes(plan)["ml/wait"].startswith(
        "kueue-no-set-covers: ClusterQueue cq: it needs 16 GPUs, 0 unused; 1 idle Workload(s) hold 8"
    )
    free = base(k8s.kueue_workload("wait", priority=200), *holder("idle"), cq=k8s.cluster_queue("cq", 24, 16))
    assert notes(run(free, idle_usage("idle-0"), settings=DEACTIVATE))["ml/wait"].startswith(
        "kueue-quota-free: ClusterQueue cq has 8 unused GPUs"
    )
    # two waiting Workloads, one idle holder: the first (higher priority) takes it, the next finds no set
    two = base(
        k8s.kueue_workload("first", priority=300, created_ago=10),
        k8s.kueue_workload("second", priority=200, created_ago=9999),
        *holder("idle"),
    )
    plan = run(two, idle_usage("idle-0"), settings=DEACTIVATE)
    assert [(str(d.target.key), str(d.waiting)) for d in plan.deactivate] == [("ml/idle", "ml/first")]
    assert notes(plan)["ml/second"].startswith("kueue-no-set-covers")


def test_deactivations_count_their_pods_and_a_released_quota_is_a_cooldown() -> None:
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle", pods=4))
    usage = idle_usage(*(f"idle-{i}" for i in range(4)))
    plan = run(objs, usage, settings=DEACTIVATE, budget=3)
    assert plan.deactivate == []
    assert notes(plan)["ml/wait"] == "eviction-budget: the set covering it counts 4 pod(s), 3 left this pass"
    # deactivated for ml/wait and still running: its quota is on its way, ml/wait is not served again
    stopping = holder(
        "gone", node="n2", annotations={KUEUE_DEACTIVATED_FOR_ANNOTATION: "ml/wait"}, active=False
    )
    plan = run([*objs, *stopping], usage, settings=DEACTIVATE)
    assert plan.deactivate == []
    assert notes(plan)["ml/wait"] == "kueue-quota-releasing: ml/gone, deactivated for it, still has pods"


# --- pods of a Workload, and what is not read ---------------------------------------------------------


def test_pods_are_found_by_job_job_uid_label_jobset_jobs_and_pod_group() -> None:
    by_label = k8s.kueue_workload("labelled", admitted_in="cq")
    by_label["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": "job-labelled"}
    jobset = k8s.kueue_workload("js", admitted_in="cq", job_uid="jobset-uid")
    group = k8s.kueue_workload("grp", admitted_in="cq")
    objs = base(
        by_label,
        k8s.owned(k8s.pod("labelled-0", node_name="n1"), "job-labelled"),
        jobset,
        k8s.job("js-workers-0", "job-js-0", owner_uid="jobset-uid"),
        k8s.owned(k8s.pod("js-0", node_name="n1"), "job-js-0"),
        group,
        k8s.pod("grp-0", node_name="n2", labels={GANG_KUEUE_LABEL: "grp"}),
        k8s.owned(k8s.pod("elsewhere", node_name="n2", namespace="other"), "job-labelled"),
    )
    found = workload_pods(k8s.with_kueue(objs))
    assert {str(k): sorted(str(p.key) for p in v) for k, v in found.items()} == {
        "ml/labelled": ["ml/labelled-0"],
        "ml/js": ["ml/js-0"],
        "ml/grp": ["ml/grp-0"],
    }


def test_a_holder_without_bound_pods_or_on_an_unknown_node_is_not_idle() -> None:
    objs = base(k8s.kueue_workload("wait", priority=200), k8s.kueue_workload("empty", admitted_in="cq"))
    assert "ml/empty: no bound pod" in notes(run(objs, {}))["ml/wait"]
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle", node="gone"))
    assert "[node-unknown]" in notes(run(objs, idle_usage("idle-0")))["ml/wait"]


def test_a_malformed_workload_is_left_unresolved_and_never_written() -> None:
    bad = k8s.kueue_workload("bad", admitted_in="cq", annotations=OURS)
    bad["spec"]["priority"] = "high"
    objs = base(k8s.kueue_workload("wait", priority=200), bad)
    plan = run(objs, {})
    assert (
        notes(plan)["ml/bad"]
        == "kueue-malformed: Workload ml/bad: spec.priority: 'high' is not a 32-bit integer"
    )
    assert plan.unboost == [] and plan.boost == []


def test_off_reads_nothing_and_the_text_says_what_each_mode_does() -> None:
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle"))
    off = run(objs, idle_usage("idle-0"), settings=KueueSettings())
    assert off.writes == 0 and off.waiting == [] and kueue_lines(off) == []
    lines = kueue_lines(run(objs, idle_usage("idle-0")), acting=False)
    assert lines == [
        "kueue (boost): would boost ml/idle to kueue.x-k8s.io/priority-boost -100000 for ml/wait "
        "(8 GPUs of quota, 1 pod(s))"
    ]
    assert PLUGIN_PREFIX  # the class annotations the victim rules read are the planner's own


def test_deactivate_removes_the_boosts_boost_mode_wrote() -> None:
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle", annotations=OURS))
    plan = run(objs, idle_usage("idle-0"), settings=DEACTIVATE)
    assert [str(d.target.key) for d in plan.deactivate] == ["ml/idle"]
    assert [(str(u.target.key), u.reason) for u in plan.unboost] == [
        ("ml/idle", "kueue-nothing-waits: --kueue deactivate keeps no boost")
    ]


def test_idleness_reads_the_holders_own_pods_not_their_neighbours() -> None:
    # a neighbour whose requests cannot be read makes its node unplannable for the reclaim, but says nothing
    # about the holder's pod: its verdict reads its own class, usage, scope and PDBs
    neighbour = k8s.pod("odd", gpus="abc", node_name="n1")
    objs = base(k8s.kueue_workload("wait", priority=200), *holder("idle"), neighbour)
    assert boosted(run(objs, idle_usage("idle-0"))) == {"ml/idle": "ml/wait"}
