"""docs/kueue.md: its worked example is the real output, its JSON is the keys plan writes, its flags and
words are the code's."""

from __future__ import annotations

import json
import re

import pytest

from automator import cli, settings
from steward_common import conventions
from tests.automator.settings.test_docs_consistency import (
    DOCS,
    REPO,
    console_runs,
    fenced,
    section,
    table_rows,
)

KUEUE_DOC = DOCS / "kueue.md"


def test_worked_example_output_is_the_real_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], clean_env: None
) -> None:
    runs = list(console_runs(section(KUEUE_DOC.read_text(), "Worked example")))
    assert [argv[argv.index("--kueue") + 1] for argv, _ in runs] == [
        "boost",
        "deactivate",
        "deactivate",
        "deactivate",
    ]
    monkeypatch.chdir(REPO)
    for argv, expected in runs:
        assert (REPO / argv[argv.index("--cluster") + 1]).parent.name == "kueue_example"
        assert cli.main(argv) == 0, argv
        assert capsys.readouterr().out.rstrip("\n") == expected, f"gpu-automator {' '.join(argv)}"


def test_the_json_shape_is_what_plan_writes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], clean_env: None
) -> None:
    (documented,) = fenced(section(KUEUE_DOC.read_text(), "Output"), "json")
    shape = json.loads("{" + documented + "}")["kueue"]
    monkeypatch.chdir(REPO)
    example = "tests/automator/fixtures/kueue_example"
    argv = ["plan", "--cluster", f"{example}/cluster.yaml", "--usage", f"{example}/usage.yaml"]
    assert cli.main([*argv, "--now", "2025-06-01T12:00:00Z", "--kueue", "boost", "--output", "json"]) == 0
    real = json.loads(capsys.readouterr().out)["kueue"]
    assert list(real) == list(shape)
    for key in ("boost", "unboost", "deactivate", "unresolved", "left_alone"):
        for entry in real[key]:
            assert list(entry) == list(shape[key][0]), key
    # off leaves the plan as it was: no kueue object
    assert cli.main([*argv, "--now", "2025-06-01T12:00:00Z", "--output", "json"]) == 0
    assert "kueue" not in json.loads(capsys.readouterr().out)


@pytest.mark.usefixtures("clean_env")
def test_flags_annotations_and_reason_words_are_the_codes() -> None:
    text = KUEUE_DOC.read_text()
    rows = {r[0]: r for r in table_rows(section(text, "Enabling it"))[1:] if r[0].startswith("`--")}
    for setting in settings.KUEUE_SETTINGS:
        row = rows[f"`{setting.flag}`"]
        assert row[1] == f"`{setting.env}`" and row[2] == f"`{setting.default}`", setting.flag
    for key in (*conventions.KUEUE_WRITTEN_ANNOTATIONS, conventions.KUEUE_YIELD_TO_EQUAL_ANNOTATION):
        assert f"`{key}" in text, key
    assert f"`Normal {conventions.KUEUE_REASON_DEACTIVATED}`" in text
    words = {v for k, v in vars(conventions).items() if k.startswith("WORD_KUEUE_")}
    actions = {"kueue-priority-booster", "kueue-boost", "kueue-unboost", "kueue-deactivate"}  # not reasons
    assert words == set(re.findall(r"`(kueue-[a-z-]+)`", text)) - actions
