"""Numbers from flags, variables and annotations: ASCII digits only, a bounded length, and an error that
never echoes thousands of characters (int() alone takes `1_000`, other scripts' digits and 4,300 digits)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from automator.objects.keys import ObjectKey
from automator.objects.pod import pod_record
from automator.objects.priority_class import priority_class_record
from automator.objects.resources import FieldError, parse_time
from automator.reclaim.annotations import reclaim_annotations
from automator.reclaim.class_settings import class_settings
from automator.reclaim.model import Decision, PlannerConfig
from steward_common import settingspec as spec
from steward_common.conventions import ANN_TOLERATION_SECONDS, RECLAIM_COUNT_ANNOTATION

NOT_WHOLE = ["1_0", "\u0663", "\uff15", "0x5", "5.0", "", "+", "9" * 19, "9" * 5000]


@pytest.mark.parametrize("text", NOT_WHOLE)
def test_a_flag_takes_ascii_digits_only(text: str) -> None:
    with pytest.raises(ValueError, match="expected a whole number") as info:
        spec.integer(0, 10**30)(text)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("text", ["5", " 5", "5\n", "+5", "-0"])
def test_whole_numbers_still_read(text: str) -> None:
    assert spec.integer(-10, 10)(text) == int(text)


def test_a_long_number_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValueError) as info:
        spec.number(0, 10)("1" + "0" * 5000)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("text", ["1_0", "\u0663", "9" * 5000])
def test_an_annotation_takes_ascii_digits_only(text: str) -> None:
    pc = {"metadata": {"name": "low", "annotations": {ANN_TOLERATION_SECONDS: text}}, "value": 1}
    settings = class_settings(priority_class_record(pc), PlannerConfig())
    (warning,) = settings.malformed
    assert warning.annotation == ANN_TOLERATION_SECONDS and len(warning.message) < 300


@pytest.mark.parametrize("count", ["9" * 4300, "1_0", "\u0663"])
def test_a_hostile_reclaim_count_starts_again(count: str) -> None:
    preemptor = {
        "metadata": {"name": "p", "namespace": "ml", "annotations": {RECLAIM_COUNT_ANNOTATION: count}}
    }
    decision = Decision(ObjectKey("ml", "p"), 1000, 1, "gpu-a", (), 1, 0)
    written = reclaim_annotations(pod_record(preemptor), decision, datetime(2025, 6, 1, tzinfo=UTC))
    assert written[RECLAIM_COUNT_ANNOTATION] == "1"


@pytest.mark.parametrize("text", ["\u0662\u0660\u0662\u0665-06-01T12:00:00Z", "2025-06-01T12:00:00Z\x00"])
def test_times_take_ascii_digits_only(text: str) -> None:
    with pytest.raises(FieldError):
        parse_time(text, "--now")
