"""The demo's narrator without its parts: it names the story that is not complete (tools/demo.py)."""

from __future__ import annotations

from pathlib import Path

from tools.demo import FAST, STORIES, Demo, Story


def test_missing_names_each_incomplete_story_and_its_steps(tmp_path: Path) -> None:
    story = Story(Demo(tmp_path, FAST))
    assert [m.split(" ")[0] for m in story.missing()] == list(STORIES)
    for step in STORIES["reclaim"] + STORIES["DRA"]:
        story.told[step] = 0.0
    assert story.missing() == ["KEDA (" + ", ".join(STORIES["KEDA"]) + ")"]
    story.told["keda-up"] = story.told["keda-applied"] = 0.0
    assert story.missing() == ["KEDA (keda-fallback, keda-down)"] and not story.complete
    story.told["keda-fallback"] = story.told["keda-down"] = 0.0
    assert story.missing() == [] and story.complete
