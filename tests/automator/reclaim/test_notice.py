"""Notice before eviction (docs/reclaim.md, "Notice"): every transition of a notice, on the pure planner.

Giving notice, the stable choice, eviction after the deadline on fresh data, each withdrawal reason, the
owner's deferral and its bounds, --max-notices, gangs, and the output only changing when notice is in use.
The service's side (writes, Events, restarts) is tests/automator/service/test_notice_service.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from automator.objects.keys import ObjectKey
from automator.reclaim import planner
from automator.reclaim.eligibility import Rule
from automator.reclaim.model import EVICT, NOTICE, Plan, PlannerConfig, PodUsage
from automator.reclaim.report import explain, plan_to_json, plan_to_text
from steward_common.conventions import (
    DEFER_UNTIL_ANNOTATION,
    GANG_COSCHEDULING_LABEL,
    NEVER_RECLAIM_LABEL,
    RECLAIM_NOTICE_ANNOTATION,
    RECLAIM_NOTICE_FOR_ANNOTATION,
    NoticeWithdrawal,
    UnresolvedReason,
)
from tests.automator import k8s

NOW = k8s.NOW
N = 600
CONFIG = PlannerConfig(notice_seconds=N)
P = "ml/p"
PASSED = k8s.ago(60)  # a deadline a minute ago
AHEAD = k8s.ts(NOW + timedelta(seconds=300))


def notice(deadline: str = PASSED, target: str = P) -> dict[str, str]:
    return {RECLAIM_NOTICE_ANNOTATION: deadline, RECLAIM_NOTICE_FOR_ANNOTATION: target}


def key(name: str) -> ObjectKey:
    return ObjectKey("ml", name)


def node_a(b: dict[str, str] | None = None, c: dict[str, str] | None = None, **a: Any) -> list[Any]:
    """An 8-GPU node full: a (4 GPUs, priority 100), b and c (2 GPUs each, priority 200); pending p (4 GPUs).
    Usual order: {a} (one victim) before {b, c}."""
    return [
        k8s.node("n1", gpus=8),
        k8s.pod("a", gpus=4, node_name="n1", **a),
        k8s.pod("b", gpus=2, node_name="n1", priority=200, annotations=b),
        k8s.pod("c", gpus=2, node_name="n1", priority=200, annotations=c),
        k8s.preemptor("p", gpus=4),
    ]


def run(
    objs: list[Any], usage: dict[ObjectKey, PodUsage] | None = None, config: PlannerConfig = CONFIG
) -> Plan:
    return planner.plan(k8s.cluster(*objs), usage or k8s.idle("a", "b", "c"), config, NOW)


def victims(plan: Plan) -> list[str]:
    return [v.pod.name for d in plan.decisions for v in d.victims]


def withdrawn(plan: Plan) -> dict[str, NoticeWithdrawal]:
    return {w.pod.name: w.reason for w in plan.withdrawals}


# --- output unchanged without notice -------------------------------------------------------------------


def test_without_notice_the_json_and_text_are_todays() -> None:
    plan = run(node_a(), config=PlannerConfig())
    body = plan_to_json(plan)
    assert victims(plan) == ["a"] and plan.decisions[0].action == EVICT
    assert "action" not in body["decisions"][0] and "under_notice" not in body
    assert "notice" not in plan_to_text(plan)


def test_notices_in_the_snapshot_show_even_with_notice_seconds_0() -> None:
    plan = run(node_a(b=notice(), c=notice()), config=PlannerConfig())
    body = plan_to_json(plan)
    # N = 0: today's order (no notice to wait for), but the noticed set still comes first (it fits)
    assert body["decisions"][0]["action"] == "evict" and victims(plan) == ["b", "c"]
    assert [u["pod"] for u in body["under_notice"]] == ["ml/b", "ml/c"]


# --- giving notice -------------------------------------------------------------------------------------


def test_a_victim_without_notice_is_given_notice_not_evicted() -> None:
    plan = run(node_a())
    (d,) = plan.decisions
    assert d.action == NOTICE and [v.pod.name for v in d.victims] == ["a"]
    assert d.notice_deadline == NOW + timedelta(seconds=N) and d.victims[0].noticed is None
    body = plan_to_json(plan)["decisions"][0]
    assert body["action"] == "notice" and body["notice_deadline"] == "2025-06-01T12:10:00Z"
    assert "notice 1 pod(s)" in plan_to_text(plan) and "evicted after 2025-06-01T12:10:00Z" in plan_to_text(
        plan
    )


def test_the_noticed_gpus_are_reserved_for_that_preemptor_in_the_pass() -> None:
    # q (lower priority, same size) comes second: a's GPUs are kept for p although nothing is evicted.
    objs = [*node_a(), k8s.preemptor("q", gpus=4, priority=900, created_ago=60)]
    plan = run(objs)
    assert [d.preemptor.name for d in plan.decisions] == ["p", "q"]
    assert [v.pod.name for v in plan.decisions[1].victims] == ["b", "c"]


def test_a_notice_before_its_deadline_keeps_its_deadline() -> None:
    plan = run(node_a(), {**k8s.idle("b", "c"), **k8s.busy("a")})
    assert victims(plan) == ["b", "c"] and plan.decisions[0].action == NOTICE
    plan = run(node_a(b=notice(AHEAD), c=notice(AHEAD)))
    (d,) = plan.decisions
    assert d.action == NOTICE and d.notice_deadline == NOW + timedelta(seconds=300)
    assert all(v.noticed is not None for v in d.victims) and not plan.withdrawals


def test_a_set_of_noticed_and_new_victims_notices_the_new_ones_and_waits() -> None:
    objs = [k8s.node("n1", gpus=4), *(k8s.pod(n, gpus=2, node_name="n1") for n in "xy"), k8s.preemptor("p")]
    objs[1]["metadata"]["annotations"] = notice()
    plan = run(objs, k8s.idle("x", "y"))
    (d,) = plan.decisions
    assert d.action == NOTICE and d.notice_deadline == NOW + timedelta(seconds=N)
    assert {v.pod.name: v.noticed is not None for v in d.victims} == {"x": True, "y": False}


# --- the stable choice and eviction after the deadline -------------------------------------------------


def test_the_noticed_set_comes_first_and_is_evicted_after_its_deadline() -> None:
    plan = run(node_a(b=notice(), c=notice()))
    (d,) = plan.decisions
    assert (
        d.action == EVICT and victims(plan) == ["b", "c"] and d.notice_deadline == NOW - timedelta(seconds=60)
    )
    assert not plan.withdrawals


def test_a_set_noticed_for_another_preemptor_is_not_first() -> None:
    plan = run(node_a(b=notice(target="ml/other"), c=notice(target="ml/other")))
    assert victims(plan) == ["a"] and plan.decisions[0].action == NOTICE
    # ml/other is not pending: the notices go, the pods are not chosen
    assert withdrawn(plan) == {"b": NoticeWithdrawal.PREEMPTOR_GONE, "c": NoticeWithdrawal.PREEMPTOR_GONE}


def test_a_noticed_set_that_no_longer_fits_gives_way_to_todays_order() -> None:
    plan = run(node_a(b=notice(), c=notice()), {**k8s.idle("a", "c"), **k8s.busy("b")})
    assert victims(plan) == ["a"] and plan.decisions[0].action == NOTICE
    assert withdrawn(plan) == {"b": NoticeWithdrawal.BUSY, "c": NoticeWithdrawal.OTHER_VICTIMS}


@pytest.mark.parametrize(
    ("usage", "reason"),
    [
        ({**k8s.idle("a", "b"), **k8s.busy("c")}, NoticeWithdrawal.BUSY),
        (
            k8s.idle("a", "b", "c", gpu_recent_max=0.0) | {key("c"): PodUsage(0.0, gpu_recent_max=0.5)},
            NoticeWithdrawal.BUSY,
        ),
        (k8s.idle("a", "b"), NoticeWithdrawal.USAGE_UNKNOWN),
        (
            k8s.idle("a", "b") | {key("c"): PodUsage(0.0, coverage=0.1, gpu_recent_max=0.0)},
            NoticeWithdrawal.USAGE_UNKNOWN,
        ),
        (k8s.idle("a", "b") | {key("c"): PodUsage(0.0, gpu_recent_max=None)}, NoticeWithdrawal.USAGE_UNKNOWN),
    ],
)
def test_after_the_deadline_fresh_data_decide(
    usage: dict[ObjectKey, PodUsage], reason: NoticeWithdrawal
) -> None:
    """A noticed victim busy again, or whose data are unknown now, is not evicted: its notice is withdrawn."""
    plan = run(node_a(b=notice(), c=notice()), usage)
    assert "c" not in victims(plan) and withdrawn(plan)["c"] is reason


# --- withdrawal ----------------------------------------------------------------------------------------


def test_opted_out_and_deferred_victims_lose_their_notice() -> None:
    objs = node_a(b=notice(), c={**notice(), DEFER_UNTIL_ANNOTATION: AHEAD})
    objs[2]["metadata"]["labels"] = {NEVER_RECLAIM_LABEL: "true"}
    plan = run(objs)
    assert withdrawn(plan) == {"b": NoticeWithdrawal.OPTED_OUT, "c": NoticeWithdrawal.DEFERRED}


def test_a_preemptor_that_started_is_gone_or_fits_withdraws_its_notices() -> None:
    started = [k8s.node("n2", gpus=4), k8s.pod("p", gpus=4, node_name="n2", priority=1000)]
    objs = [o for o in node_a(b=notice(), c=notice()) if o["metadata"]["name"] != "p"]
    assert set(withdrawn(run([*objs, *started])).values()) == {NoticeWithdrawal.PREEMPTOR_STARTED}
    assert set(withdrawn(run(objs)).values()) == {NoticeWithdrawal.PREEMPTOR_GONE}
    fits = [*node_a(b=notice(), c=notice()), k8s.node("n2", gpus=4)]
    plan = run(fits)
    assert [d.node for d in plan.already_fit] == ["n2"] and not plan.decisions
    assert set(withdrawn(plan).values()) == {NoticeWithdrawal.PREEMPTOR_FITS}


def test_a_notice_the_plan_no_longer_picks_is_withdrawn() -> None:
    # p now has priority 150: b and c (200) are not lower, so no set of them is a victim set any more.
    objs = node_a(b=notice(), c=notice())
    objs[-1]["spec"]["priority"] = 150
    plan = run(objs)
    assert victims(plan) == ["a"]
    assert set(withdrawn(plan).values()) == {NoticeWithdrawal.OTHER_VICTIMS}
    objs[1]["metadata"]["labels"] = {NEVER_RECLAIM_LABEL: "true"}  # a protected too: p is unresolved
    plan = run(objs)
    assert not plan.decisions and set(withdrawn(plan).values()) == {NoticeWithdrawal.NOT_PLANNED}


@pytest.mark.parametrize(
    "annotations",
    [
        notice("2025-06-01T11:00:00"),  # a time without a zone
        notice("soon"),
        notice(target="not a key"),
        {RECLAIM_NOTICE_ANNOTATION: PASSED},  # notice-for missing
        {RECLAIM_NOTICE_FOR_ANNOTATION: P},  # deadline missing
    ],
)
def test_a_malformed_notice_is_withdrawn_and_never_read_as_passed(annotations: dict[str, str]) -> None:
    plan = run(node_a(b=annotations, c=notice()), {**k8s.idle("b", "c"), **k8s.busy("a")})
    assert withdrawn(plan) == {"b": NoticeWithdrawal.MALFORMED}
    assert plan.decisions[0].action == NOTICE  # b counts as not noticed: nothing evicted


def test_a_preemptor_held_by_a_budget_keeps_its_notices() -> None:
    plan = run(
        node_a(b=notice(), c=notice()), config=PlannerConfig(notice_seconds=N, max_evictions_per_pass=1)
    )
    assert [u.kind for u in plan.unresolved] == [UnresolvedReason.EVICTION_BUDGET]
    assert not plan.withdrawals


# --- objection -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "deferred"),
    [
        (AHEAD, True),
        (k8s.ts(NOW + timedelta(seconds=86_400)), True),  # exactly --max-defer-seconds ahead
        (k8s.ts(NOW + timedelta(seconds=86_401)), False),  # further: ignored
        (PASSED, False),
        (k8s.ts(NOW), False),  # now is not ahead
        ("2025-06-01T13:00:00", False),  # no zone: unreadable
        ("tomorrow", False),
    ],
)
def test_defer_until_protects_within_its_bound_else_warns(value: str, deferred: bool) -> None:
    objs = node_a()
    objs[1]["metadata"]["annotations"] = {DEFER_UNTIL_ANNOTATION: value}
    plan = run(objs, {**k8s.busy("b", "c"), **k8s.idle("a")})
    verdicts = plan.verdicts.get(key("a"), [])
    if deferred:
        assert not plan.decisions and [v.rule for v in verdicts] == [Rule.DEFERRED]
        assert not plan.pod_warnings
    else:
        assert victims(plan) == ["a"]
        (warning,) = plan.pod_warnings
        assert warning.pod == key("a") and warning.annotation == DEFER_UNTIL_ANNOTATION
        assert "ignored" in warning.message
        assert plan_to_json(plan)["warnings"][-1]["pod"] == "ml/a"


def test_max_defer_seconds_is_the_bound() -> None:
    objs = node_a()
    objs[1]["metadata"]["annotations"] = {DEFER_UNTIL_ANNOTATION: AHEAD}  # 300 s ahead
    usage = {**k8s.busy("b", "c"), **k8s.idle("a")}
    assert run(objs, usage, PlannerConfig(notice_seconds=N, max_defer_seconds=299)).decisions
    assert not run(objs, usage, PlannerConfig(notice_seconds=N, max_defer_seconds=300)).decisions


# --- bounds --------------------------------------------------------------------------------------------


def test_max_notices_bounds_the_pods_under_notice() -> None:
    usage = {**k8s.busy("a"), **k8s.idle("b", "c")}
    plan = run(node_a(), usage, PlannerConfig(notice_seconds=N, max_notices=1))
    (u,) = plan.unresolved
    assert u.kind is UnresolvedReason.NOTICE_BUDGET and u.reason.startswith("notice-budget: 1 pods")
    assert run(node_a(), usage, PlannerConfig(notice_seconds=N, max_notices=2)).decisions
    # pods already under notice count: one noticed for someone else leaves room for one more only
    objs = [
        *node_a(),
        k8s.node("n9", gpus=1),
        k8s.pod("z", gpus=1, node_name="n9", annotations=notice(AHEAD, "ml/q")),
    ]
    objs.append(k8s.preemptor("q", gpus=2, priority=50))  # z (100) is not lower: q keeps its notice pending
    plan = run(objs, usage | k8s.idle("z"), PlannerConfig(notice_seconds=N, max_notices=2))
    assert [u.kind for u in plan.unresolved if u.preemptor.name == "p"] == [UnresolvedReason.NOTICE_BUDGET]
    # the default is 4 x --max-evictions-per-pass
    assert PlannerConfig(max_evictions_per_pass=3).notice_limit == 12


def test_notices_do_not_spend_the_eviction_budget() -> None:
    plan = run(node_a(), config=PlannerConfig(notice_seconds=N, max_evictions_per_pass=0, max_notices=4))
    assert plan.decisions[0].action == NOTICE
    # and after the deadline the eviction keeps the budget
    plan = run(
        node_a(b=notice(), c=notice()), config=PlannerConfig(notice_seconds=N, max_evictions_per_pass=1)
    )
    assert not plan.decisions and plan.unresolved[0].kind is UnresolvedReason.EVICTION_BUDGET


# --- gangs ---------------------------------------------------------------------------------------------


def _victim_gang(annotations: tuple[dict[str, str] | None, dict[str, str] | None]) -> list[Any]:
    """The 2-member victim gang ml/train on n1 and n2 (4 GPUs each, 4-GPU nodes); pending p (4 GPUs)."""
    label = {GANG_COSCHEDULING_LABEL: "train"}
    return [
        k8s.node("n1", gpus=4),
        k8s.node("n2", gpus=4),
        k8s.pod("g-0", gpus=4, node_name="n1", labels=label, annotations=annotations[0]),
        k8s.pod("g-1", gpus=4, node_name="n2", labels=label, annotations=annotations[1]),
        k8s.pod_group("train", 2),
        k8s.preemptor("p", gpus=4),
    ]


def test_a_victim_gang_is_noticed_whole_and_evicted_whole() -> None:
    usage = k8s.idle("g-0", "g-1")
    plan = run(_victim_gang((None, None)), usage)
    assert plan.decisions[0].action == NOTICE and victims(plan) == ["g-0", "g-1"]
    plan = run(_victim_gang((notice(), None)), usage)  # one member not noticed yet: it is, and the gang waits
    assert plan.decisions[0].action == NOTICE
    assert [v.noticed is not None for v in plan.decisions[0].victims] == [True, False]
    plan = run(_victim_gang((notice(), notice())), usage)
    assert plan.decisions[0].action == EVICT and victims(plan) == ["g-0", "g-1"]


def test_a_deferral_on_one_member_protects_the_victim_gang_and_withdraws_both() -> None:
    objs = _victim_gang((notice(), {**notice(), DEFER_UNTIL_ANNOTATION: AHEAD}))
    plan = run(objs, k8s.idle("g-0", "g-1"))
    assert not plan.decisions
    assert plan.verdicts[key("g-0")][0].rule == Rule.GANG_MEMBER_PROTECTED
    assert withdrawn(plan) == {"g-0": NoticeWithdrawal.NOT_PLANNED, "g-1": NoticeWithdrawal.DEFERRED}


def test_a_busy_member_withdraws_the_whole_gangs_notice_as_busy() -> None:
    plan = run(_victim_gang((notice(), notice())), {**k8s.idle("g-0"), **k8s.busy("g-1")})
    assert withdrawn(plan) == {"g-0": NoticeWithdrawal.BUSY, "g-1": NoticeWithdrawal.BUSY}


def _preemptor_gang(annotations: dict[str, str] | None = None) -> list[Any]:
    """Two 4-GPU nodes held by idle x and y; the pending gang ml/big of two 4-GPU members."""
    label = {GANG_COSCHEDULING_LABEL: "big"}
    return [
        k8s.node("n1", gpus=4),
        k8s.node("n2", gpus=4),
        k8s.pod("x", gpus=4, node_name="n1", annotations=annotations),
        k8s.pod("y", gpus=4, node_name="n2", annotations=annotations),
        k8s.preemptor("big-0", gpus=4, labels=label),
        k8s.preemptor("big-1", gpus=4, labels=label),
        k8s.pod_group("big", 2),
    ]


def test_a_preemptor_gangs_victims_are_noticed_for_the_gang_and_evicted_together() -> None:
    usage = k8s.idle("x", "y")
    plan = run(_preemptor_gang(), usage)
    assert [d.action for d in plan.decisions] == [NOTICE, NOTICE]
    assert {d.target for d in plan.decisions} == {"ml/big"}
    assert len({d.notice_deadline for d in plan.decisions}) == 1
    plan = run(_preemptor_gang(notice(target="ml/big")), usage)
    assert [d.action for d in plan.decisions] == [EVICT, EVICT] and victims(plan) == ["x", "y"]
    # noticed for one member instead of the gang: not the gang's notice, given again for the gang
    plan = run(_preemptor_gang(notice(target="ml/big-0")), usage)
    assert [d.action for d in plan.decisions] == [NOTICE, NOTICE]
    plan = run(_preemptor_gang(), usage, PlannerConfig(notice_seconds=N, max_notices=1))
    assert {u.kind for u in plan.unresolved} == {UnresolvedReason.NOTICE_BUDGET} and not plan.decisions


# --- explain -------------------------------------------------------------------------------------------


def test_explain_shows_a_pods_notice_and_its_withdrawal() -> None:
    objs = node_a(b=notice(), c=notice())
    plan = run(objs, {**k8s.idle("a", "c"), **k8s.busy("b")})
    text = explain(plan, k8s.cluster(*objs), key("b"), CONFIG)
    assert f"under notice for {P} until {PASSED}" in text
    assert f"notice (for {P}) withdrawn: busy:" in text
    text = explain(plan, k8s.cluster(*objs), key("a"), CONFIG)
    assert "victim: given notice for ml/p" in text
