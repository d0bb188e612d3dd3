"""The usage file's freshness contract: a stale newest sample makes recent usage unknown (protected)."""

from __future__ import annotations

from pathlib import Path

import pytest

from automator.objects.files import InputError
from automator.objects.keys import ObjectKey
from automator.reclaim.snapshot import load_usage
from steward_common.series import MAX_SAMPLE_AGE_SECONDS


def _usage(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "usage.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("extra", "top", "known"),
    [
        ("", "", True),  # absent: taken as fresh, as before the field existed
        (f", newest_sample_age_seconds: {MAX_SAMPLE_AGE_SECONDS}", "", True),
        (f", newest_sample_age_seconds: {MAX_SAMPLE_AGE_SECONDS + 1}", "", False),
        (", newest_sample_age_seconds: 240", "", False),
        (", newest_sample_age_seconds: 240", "max_sample_age_seconds: 300\n", True),
    ],
)
def test_a_stale_newest_sample_makes_recent_usage_unknown(
    tmp_path: Path, extra: str, top: str, known: bool
) -> None:
    path = _usage(
        tmp_path, f"{top}pods:\n- {{namespace: ml, name: a, gpu_activity: 0.0, gpu_recent_max: 0.0{extra}}}\n"
    )
    usage = load_usage(path)[ObjectKey("ml", "a")]
    assert usage.gpu_activity == 0.0
    assert (usage.gpu_recent_max is not None) is known


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("pods:\n- {namespace: ml, name: a, newest_sample_age_seconds: -1}\n", "newest_sample_age_seconds"),
        ("pods:\n- {namespace: ml, name: a, newest_sample_age_seconds: .nan}\n", "newest_sample_age_seconds"),
        ("max_sample_age_seconds: soon\npods: []\n", "max_sample_age_seconds"),
    ],
)
def test_bad_freshness_fields_are_named(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(InputError, match=field):
        load_usage(_usage(tmp_path, text))
