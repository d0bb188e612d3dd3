"""The reclaim annotations: one reader per field, the same answer for the planner, the service and the
backtest (automator/reclaim/annotations.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from automator.objects.cluster import ClusterState
from automator.objects.keys import ObjectKey
from automator.objects.pod import pod_record
from automator.objects.resources import FieldProblem
from automator.reclaim.annotations import read_marks, reclaim_annotations
from automator.reclaim.model import Decision, PlannerConfig, Victim
from automator.reclaim.planner import plan
from automator.service.cooldown import with_reclaim_memory
from steward_common.conventions import (
    LAST_RECLAIM_ANNOTATION,
    RECLAIM_COUNT_ANNOTATION,
    RECLAIM_NODE_ANNOTATION,
    RECLAIM_VICTIMS_ANNOTATION,
)
from tests.automator import k8s

NAIVE = "2025-06-01T11:59:00"  # no zone: malformed, never read as UTC


def _planned(annotations: dict[str, str]) -> str | None:
    """The preemptor's unresolved reason when it is the only pod wanting the node's GPUs (None: served)."""
    state = k8s.cluster(*k8s.held_node("n1", "v"), k8s.preemptor("p", annotations=annotations))
    result = plan(state, k8s.idle("v"), PlannerConfig(), k8s.NOW)
    return None if result.decisions else result.unresolved[0].reason


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-06-01T12:00:00Z", datetime(2025, 6, 1, 12, tzinfo=UTC)),
        ("2025-06-01T14:00:00+02:00", datetime(2025, 6, 1, 12, tzinfo=UTC)),
        (" 2025-06-01T12:00:00.5z ", datetime(2025, 6, 1, 12, 0, 0, 500000, tzinfo=UTC)),
    ],
)
def test_a_time_with_a_zone_is_read_in_utc(text: str, expected: datetime) -> None:
    assert read_marks({LAST_RECLAIM_ANNOTATION: text}).last == expected


@pytest.mark.parametrize("text", [NAIVE, "2025-06-01", "20250601T1200Z", "yesterday", ""])
def test_a_time_without_a_zone_or_not_rfc3339_is_malformed(text: str) -> None:
    last = read_marks({LAST_RECLAIM_ANNOTATION: text}).last
    assert isinstance(last, FieldProblem) and last.path == LAST_RECLAIM_ANNOTATION
    assert repr(text) in last.problem


def test_a_naive_time_keeps_the_planner_in_cooldown() -> None:
    reason = _planned({LAST_RECLAIM_ANNOTATION: NAIVE})
    assert reason is not None and reason.startswith("cooldown") and "not an RFC 3339 time" in reason
    assert _planned({LAST_RECLAIM_ANNOTATION: k8s.ago(3600)}) is None  # the same time with a zone: served


def test_the_service_memory_does_not_overwrite_a_naive_time_as_if_it_were_utc() -> None:
    # Read as UTC the naive time would be older than the memory, and the memory would replace it.
    pod = pod_record(k8s.preemptor("p", annotations={LAST_RECLAIM_ANNOTATION: NAIVE}))
    memory = {pod.key: (k8s.NOW, {LAST_RECLAIM_ANNOTATION: k8s.ts(k8s.NOW)})}
    [kept] = with_reclaim_memory(ClusterState([], [pod], [], []), memory).pods
    assert kept.annotations[LAST_RECLAIM_ANNOTATION] == NAIVE
    older = pod_record(k8s.preemptor("p", annotations={LAST_RECLAIM_ANNOTATION: k8s.ago(60)}))
    [updated] = with_reclaim_memory(ClusterState([], [older], [], []), memory).pods
    assert updated.annotations[LAST_RECLAIM_ANNOTATION] == k8s.ts(k8s.NOW)


@pytest.mark.parametrize(("text", "count"), [("0", 0), ("3", 3), (" 12 ", 12), ("+2", 2)])
def test_a_count_is_a_whole_number(text: str, count: int) -> None:
    assert read_marks({RECLAIM_COUNT_ANNOTATION: text}).count == count


@pytest.mark.parametrize("text", ["1_0", "-1", "1.0", "\u0663", "three", "9" * 30])
def test_a_count_that_is_not_a_whole_number_of_ascii_digits_is_malformed(text: str) -> None:
    count = read_marks({RECLAIM_COUNT_ANNOTATION: text}).count
    assert isinstance(count, FieldProblem) and count.path == RECLAIM_COUNT_ANNOTATION


@pytest.mark.parametrize("text", ["1_0", "-1"])
def test_a_malformed_count_gives_up_in_the_planner_and_starts_again_when_written(text: str) -> None:
    reason = _planned({RECLAIM_COUNT_ANNOTATION: text})
    assert reason is not None and reason.startswith("gave-up") and "is not a count" in reason
    preemptor = pod_record(k8s.preemptor("p", annotations={RECLAIM_COUNT_ANNOTATION: text}))
    decision = Decision(ObjectKey("ml", "p"), 1000, 1, "n1", (), 1, 0)
    assert reclaim_annotations(preemptor, decision, k8s.NOW)[RECLAIM_COUNT_ANNOTATION] == "1"


def test_a_long_malformed_value_is_not_echoed_whole() -> None:
    count = read_marks({RECLAIM_COUNT_ANNOTATION: "x" * 5000}).count
    assert isinstance(count, FieldProblem) and len(count.problem) < 200


def test_victims_are_keys_and_an_item_that_is_not_one_is_skipped() -> None:
    marks = read_marks({RECLAIM_VICTIMS_ANNOTATION: "ml/a, bad,ml/b/c,,/x, ml/c "})
    assert marks.victims == (ObjectKey("ml", "a"), ObjectKey("ml", "c"))
    assert read_marks({}).victims == ()


def test_absent_annotations_read_as_absent() -> None:
    marks = read_marks({})
    assert (marks.last, marks.node, marks.victims, marks.count) == (None, "", (), None)


def test_what_is_written_reads_back() -> None:
    victims = tuple(Victim(ObjectKey("ml", n), 2, 100, 0.0, None, None) for n in ("a", "b"))
    decision = Decision(ObjectKey("ml", "p"), 1000, 4, "n1", victims, 4, 0)
    preemptor = pod_record(k8s.preemptor("p", annotations={RECLAIM_COUNT_ANNOTATION: "2"}))
    now = datetime(2025, 6, 1, 12, tzinfo=UTC) + timedelta(seconds=7)
    written = reclaim_annotations(preemptor, decision, now)
    assert written[RECLAIM_NODE_ANNOTATION] == "n1"
    marks = read_marks(written)
    assert (marks.last, marks.node, marks.count) == (now, "n1", 3)
    assert marks.victims == (ObjectKey("ml", "a"), ObjectKey("ml", "b"))


def test_the_notice_is_read_as_written_and_withdrawn_by_nulls() -> None:
    from automator.reclaim.annotations import WITHDRAWN, defer_until, notice_annotations, read_notice
    from steward_common.conventions import (
        DEFER_UNTIL_ANNOTATION,
        NOTICE_ANNOTATIONS,
        RECLAIM_NOTICE_ANNOTATION,
        RECLAIM_NOTICE_FOR_ANNOTATION,
    )

    deadline = datetime(2025, 6, 1, 12, 10, tzinfo=UTC)
    written = {k: str(v) for k, v in notice_annotations(deadline, "ml/big").items()}
    marks = read_notice(written)
    assert marks.problem is None and marks.deadline_for("ml/big") == deadline
    assert marks.deadline_for("ml/other") is None
    assert set(WITHDRAWN) == set(NOTICE_ANNOTATIONS) and all(v is None for v in WITHDRAWN.values())
    assert not read_notice({}).present
    # A time without a zone, or one of the two alone, is malformed: never a deadline.
    naive = read_notice({**written, RECLAIM_NOTICE_ANNOTATION: NAIVE})
    assert isinstance(naive.deadline, FieldProblem) and naive.deadline_for("ml/big") is None
    alone = read_notice({RECLAIM_NOTICE_FOR_ANNOTATION: "ml/big"})
    assert alone.problem is not None and alone.problem.path == RECLAIM_NOTICE_ANNOTATION
    assert isinstance(defer_until({DEFER_UNTIL_ANNOTATION: NAIVE}), FieldProblem)
    assert defer_until({DEFER_UNTIL_ANNOTATION: "2025-06-01T14:00:00+02:00"}) == datetime(
        2025, 6, 1, 12, tzinfo=UTC
    )
