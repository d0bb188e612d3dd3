"""Replay: state carried from step to step as the service carries it, and the outcome functions, with the
usage and look-ahead samples given directly (no Prometheus)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pytest

from automator.backtest.cluster import Evidence, Frame
from automator.backtest.replay import Policy, Replay, busy_again_after, gpu_hours
from automator.backtest.report import policy_json, report_json, report_text
from automator.objects.keys import ObjectKey
from automator.objects.priority_class import priority_class_records
from automator.ports import PrometheusUnavailable
from automator.reclaim.model import PlannerConfig, PodUsage, UsageWindow
from steward_common.conventions import RECLAIM_COUNT_ANNOTATION
from tests.automator.backtest.frames import FrameBuilder
from tests.automator.backtest.test_reconstruction import CLASSES

T0 = 1_780_000_000
STEP = 300
IDLE = PodUsage(0.0, 1.0, None, 0.0)
VICTIM, PREEMPTOR = ObjectKey("ml", "idle"), ObjectKey("hi", "p")


def _evidence() -> Evidence:
    found = Evidence()
    for pod in ("p", "q"):
        found.add({"namespace": "hi", "pod": pod, "uid": f"uid-{pod}", "node": "gpu-1"})
    return found


def _frame(
    victim: str = "Running", preemptor_node: str = "", preemptor_started: float | None = None
) -> Frame:
    b = FrameBuilder().node("gpu-1")
    b.pod("ml", "idle", 8, node="gpu-1", created=T0 - 7200, phase=victim)
    b.pod("hi", "p", 8, node=preemptor_node, cls="high", created=T0, started=preemptor_started)
    return b.frame()


def _idle(windows: Mapping[ObjectKey, UsageWindow], at: int, recent: int) -> Mapping[ObjectKey, PodUsage]:
    return {key: IDLE for key in windows}


def _quiet(
    pods: Iterable[ObjectKey], at: float, seconds: int
) -> Mapping[ObjectKey, Sequence[tuple[float, float]]]:
    return {}


def _replay(**policy: int | None) -> Replay:
    hourly = policy.pop("hourly", None)
    config = PlannerConfig(**policy)  # type: ignore[arg-type]
    return Replay(Policy("p", config, {}, hourly), priority_class_records(CLASSES), _evidence(), STEP, 1800)


def test_outcomes_of_one_eviction_read_forward_in_history() -> None:
    replay = _replay()
    replay.step(T0, _frame(), _idle, _quiet)
    [e] = replay.evictions
    assert (e.victim, e.preemptor, e.gpus, e.node, e.at) == (VICTIM, PREEMPTOR, 8, "gpu-1", T0)
    # History still shows both as they were: the victim is gone from the simulation, the preemptor bound.
    replay.step(T0 + STEP, _frame(), _idle, _quiet)
    assert len(replay.evictions) == 1
    assert replay.annotations[PREEMPTOR][RECLAIM_COUNT_ANNOTATION] == "1"
    replay.step(T0 + 2 * STEP, _frame(victim="Succeeded"), _idle, _quiet)  # the victim ended in history
    replay.step(
        T0 + 3 * STEP,
        _frame(victim="Succeeded", preemptor_node="gpu-1", preemptor_started=T0 + 800),
        _idle,
        _quiet,
    )
    replay.finish(T0 + 4 * STEP)
    assert e.ended == T0 + 2 * STEP
    [wait] = replay.waits
    assert wait.saved == 800
    totals = policy_json(replay)["totals"]
    assert (
        totals["gpu_hours_reclaimed"]
        == pytest.approx(gpu_hours(8, T0, T0 + 2 * STEP))
        == pytest.approx(8 * 600 / 3600)
    )
    assert totals["wait_saved_seconds"] == 800 and totals["steps"] == 4 and totals["steps_without_data"] == 0


def test_a_preemptor_history_schedules_stops_waiting() -> None:
    bound = _replay()
    bound.step(T0, _frame(preemptor_node="gpu-1", preemptor_started=T0), _idle, _quiet)
    assert bound.evictions == []
    waiting = _replay()  # the same step with it still pending: evicted for
    waiting.step(T0, _frame(), _idle, _quiet)
    assert len(waiting.evictions) == 1


def test_missing_data_is_counted_and_evicts_nothing() -> None:
    replay = _replay()
    replay.step(T0, FrameBuilder().node("gpu-1").frame(), _idle, _quiet)  # no kube_pod_info

    def stale(windows: Mapping[ObjectKey, UsageWindow], at: int, recent: int) -> Mapping[ObjectKey, PodUsage]:
        return {key: PodUsage(0.0, 1.0, None, None) for key in windows}  # no fresh sample

    def down(windows: Mapping[ObjectKey, UsageWindow], at: int, recent: int) -> Mapping[ObjectKey, PodUsage]:
        raise PrometheusUnavailable("connection refused")

    replay.step(T0 + STEP, _frame(), stale, _quiet)
    replay.step(T0 + 2 * STEP, _frame(), down, _quiet)
    replay.step(T0 + 3 * STEP, _frame(), lambda w, a, r: {}, _quiet)
    assert replay.evictions == [] and replay.steps_without_data == 4
    assert any("connection refused" in w for w in replay.warnings)
    replay.step(T0 + 4 * STEP, _frame(), _idle, _quiet)
    assert len(replay.evictions) == 1 and replay.steps == 5


def test_the_hourly_budget_carries_across_steps() -> None:
    frame = FrameBuilder().node("gpu-1", gpus=16)
    frame.pod("ml", "idle", 8, node="gpu-1", created=T0 - 7200).pod(
        "ml", "idle2", 8, node="gpu-1", created=T0 - 7200
    )
    frame.pod("hi", "p", 8, cls="high", created=T0).pod("hi", "q", 8, cls="high", created=T0 + 1)
    replay = _replay(max_evictions_per_pass=1, hourly=1)
    for i in range(3):
        replay.step(T0 + i * STEP, frame.frame(), _idle, _quiet)
    assert len(replay.evictions) == 1  # one an hour, though each pass allows one
    unlimited = _replay(max_evictions_per_pass=1)
    for i in range(3):
        unlimited.step(T0 + i * STEP, frame.frame(), _idle, _quiet)
    assert len(unlimited.evictions) == 2


def test_regret_from_the_look_ahead() -> None:
    def busy(
        pods: Iterable[ObjectKey], at: float, seconds: int
    ) -> Mapping[ObjectKey, Sequence[tuple[float, float]]]:
        return {VICTIM: [(at + 15, 0.0), (at + 615, 0.5)]}

    replay = _replay()
    replay.step(T0, _frame(), _idle, busy)
    [e] = replay.evictions
    assert e.regret and e.busy_again_after == 615

    def unreadable(
        pods: Iterable[ObjectKey], at: float, seconds: int
    ) -> Mapping[ObjectKey, Sequence[tuple[float, float]]]:
        raise PrometheusUnavailable("timed out")

    unknown = _replay()
    unknown.step(T0, _frame(), _idle, unreadable)
    assert unknown.evictions[0].regret and unknown.evictions[0].busy_again_after is None
    assert any("timed out" in w for w in unknown.warnings)


def test_busy_again_after() -> None:
    samples = [(90.0, 0.9), (110.0, 0.05), (130.0, 0.06), (401.0, 0.9)]
    assert (
        busy_again_after(samples, 100.0, 0.05, 300) == 30.0
    )  # at the threshold is idle; before `at` ignored
    assert busy_again_after(samples, 100.0, 0.1, 300) is None  # 401 is past the look-ahead
    assert busy_again_after(samples, 100.0, 0.1, 301) == 301.0
    assert busy_again_after([], 0.0, 0.0, 60) is None


def test_text_report_names_the_regret_evictions() -> None:
    def busy(
        pods: Iterable[ObjectKey], at: float, seconds: int
    ) -> Mapping[ObjectKey, Sequence[tuple[float, float]]]:
        return {VICTIM: [(at + 60, 1.0)]}

    replay = _replay()
    replay.step(T0, _frame(), _idle, busy)
    replay.finish(T0 + STEP)
    report = report_json(T0, T0 + STEP, STEP, 1800, [replay], ["a warning"])
    assert report["policies"][0]["evictions"] == [
        {
            "at": "2026-05-28T20:26:40Z",
            "victim": "ml/idle",
            "gpus": 8,
            "node": "gpu-1",
            "preemptor": "hi/p",
            "regret": True,
            "busy_again_after_seconds": 60.0,
        }
    ]
    assert report["policies"][0]["by_namespace"] == {
        "ml": {"evictions": 1, "regret_evictions": 1, "gpu_hours_reclaimed": pytest.approx(8 * 300 / 3600)}
    }
    text = report_text(report)
    assert "ml/idle (8 GPUs on gpu-1) for hi/p: busy again after 60 s" in text
    assert "a warning" in text
    assert text.splitlines()[2].split() == [
        "policy",
        "evictions",
        "regret",
        "GPU-hours",
        "wait",
        "saved",
        "(h)",
        "steps",
        "no",
        "data",
    ]


def test_notice_is_replayed_an_eviction_only_after_an_idle_notice() -> None:
    """--notice-seconds 600 with 300-s steps: notice at T0, still under notice at T0+300, evicted at T0+600
    (the victim idle throughout); the same history with the victim busy at T0+300 withdraws the notice."""
    replay = _replay(notice_seconds=600)
    replay.step(T0, _frame(), _idle, _quiet)
    assert replay.evictions == [] and replay.notices_given == 1 and VICTIM in replay.notices
    replay.step(T0 + STEP, _frame(), _idle, _quiet)
    assert replay.evictions == [] and replay.notices_given == 1
    replay.step(T0 + 2 * STEP, _frame(), _idle, _quiet)
    [e] = replay.evictions
    assert e.at == T0 + 2 * STEP and VICTIM not in replay.notices
    totals = policy_json(replay)["totals"]
    assert (totals["notices"], totals["notices_withdrawn"], totals["evictions"]) == (1, 0, 1)

    def busy(windows: Mapping[ObjectKey, UsageWindow], at: int, recent: int) -> Mapping[ObjectKey, PodUsage]:
        return {key: PodUsage(0.9, 1.0, None, 0.9) if key == VICTIM else IDLE for key in windows}

    withdrawn = _replay(notice_seconds=600)
    withdrawn.step(T0, _frame(), _idle, _quiet)
    withdrawn.step(T0 + STEP, _frame(), busy, _quiet)
    withdrawn.step(T0 + 2 * STEP, _frame(), busy, _quiet)
    assert withdrawn.evictions == [] and withdrawn.notices_withdrawn == {"busy": 1}
    totals = policy_json(withdrawn)["totals"]
    assert totals["notices_withdrawn_by_reason"] == {"busy": 1} and totals["evictions"] == 0
    # Without notice the same history evicts at once, and its totals keep today's keys.
    plain = _replay()
    plain.step(T0, _frame(), _idle, _quiet)
    assert len(plain.evictions) == 1 and "notices" not in policy_json(plain)["totals"]
    text = report_text(report_json(T0, T0 + 3 * STEP, STEP, 1800, [plain, withdrawn], []))
    assert "p notices: 1 given, 1 withdrawn (busy 1)" in text
