"""The demo's narrator without its parts: it names the story that is not complete (tools/demo/run.py)."""

from __future__ import annotations

from pathlib import Path

from tools.demo.run import FAST, STORIES, Demo, Story
from tools.fakes.kedasim import Poll, ScaledObject
from tools.fakes.kubeapi import load_objects
from tools.fakes.promserver import ROOT


def test_missing_names_each_incomplete_story_and_its_steps(tmp_path: Path) -> None:
    story = Story(Demo(tmp_path, FAST))
    assert [m.split(" ")[0] for m in story.missing()] == list(STORIES)
    for step in STORIES["reclaim"] + STORIES["DRA"] + STORIES["Kueue"]:
        story.told[step] = 0.0
    assert story.missing() == ["KEDA (" + ", ".join(STORIES["KEDA"]) + ")"]
    story.told["keda-up"] = story.told["keda-applied"] = 0.0
    assert story.missing() == ["KEDA (keda-fallback, keda-down)"] and not story.complete
    story.told["keda-fallback"] = story.told["keda-down"] = 0.0
    assert story.missing() == [] and story.complete


class _Polls:
    def __init__(self, polls: list[Poll]) -> None:
        self.polls = polls

    def history(self) -> list[Poll]:
        return self.polls


def story_with(tmp_path: Path, polls: list[Poll], outage: tuple[float, float] | None) -> Story:
    demo = Demo(tmp_path, FAST)
    demo.scaled_object = ScaledObject.from_manifests(load_objects(ROOT / "deploy" / "demo" / "keda.yaml"))
    demo.keda = _Polls(polls)  # type: ignore[assignment]
    story = Story(demo)
    story.outage = outage
    return story


UP = Poll(1.0, 1, 2, value=86.0, unit="percent", raw=2)
FALLBACK = Poll(5.0, 2, 5, error="HTTP 503 prometheus_unavailable", failures=4, fallback=True)
DOWN = Poll(9.0, 5, 4, value=20.0, unit="percent", raw=2)


def test_the_keda_milestones_come_from_the_polls(tmp_path: Path) -> None:
    story = story_with(tmp_path, [UP, FALLBACK, DOWN], outage=(4.0, 8.0))
    lines = story._keda_polls()
    assert lines[0][1].endswith("GPU utilization 0.86 over target 0.70 -> 1 to 2 replicas")
    assert {"keda-up", "keda-fallback", "keda-down"} <= set(story.told) and not story.failed
    assert [p.replicas for p in story.keda_steps] == [2, 5, 4]


def test_a_fallback_with_prometheus_up_fails_the_story(tmp_path: Path) -> None:
    story = story_with(tmp_path, [UP, FALLBACK], outage=None)
    story._keda_polls()
    assert story.failed.startswith("KEDA:") and "keda-fallback" not in story.told
