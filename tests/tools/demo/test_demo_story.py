"""The demo's narrator without its parts: it names the story that is not complete, and fails a story whose
victim is evicted without notice or before its deadline (tools/demo/run.py)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steward_common.conventions import (
    REASON_NOTICE,
    REASON_VICTIM,
    RECLAIM_NOTICE_ANNOTATION,
    RECLAIM_NOTICE_FOR_ANNOTATION,
)
from tools.demo.run import FAST, NORMAL, NOTICE_SECONDS, STORIES, VICTIM, Demo, Story
from tools.fakes.fakekube import FakeApiServer
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


# --- the notice before the eviction, against the fake API server's request log and Events ---

DEADLINE = "2026-12-05T10:00:06Z"


def _send(api: FakeApiServer, method: str, path: str, body: dict[str, Any], content_type: str) -> None:
    data = json.dumps(body).encode()
    req = urllib.request.Request(api.url + path, data, {"Content-Type": content_type}, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status in (200, 201), r.status


def _event(api: FakeApiServer, reason: str, at: str, message: str) -> None:
    ns, name = VICTIM
    body = {"metadata": {"name": f"{name}.{reason.lower()}", "namespace": ns}, "reason": reason,
            "type": "Warning", "message": message, "firstTimestamp": at,
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": name}}  # fmt: skip
    _send(api, "POST", f"/api/v1/namespaces/{ns}/events", body, "application/json")


def _give_notice(api: FakeApiServer) -> None:
    ns, name = VICTIM
    written = {RECLAIM_NOTICE_ANNOTATION: DEADLINE, RECLAIM_NOTICE_FOR_ANNOTATION: "ml-team/train-urgent"}
    body = {"metadata": {"annotations": written}}
    _send(api, "PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", body, "application/merge-patch+json")
    _event(api, REASON_NOTICE, "2026-12-05T10:00:00Z", f"gpu-steward will evict it after {DEADLINE}")


def _evict(api: FakeApiServer, at: str) -> None:
    ns, name = VICTIM
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
    _send(api, "POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", body, "application/json")
    _event(api, REASON_VICTIM, at, "Evicted by gpu-steward")


@pytest.fixture
def cluster() -> Iterator[FakeApiServer]:
    with FakeApiServer(load_objects(ROOT / "deploy" / "demo" / "cluster.yaml")).start() as api:
        yield api


def _story(tmp_path: Path, api: FakeApiServer) -> Story:
    demo = Demo(tmp_path, FAST)
    demo.api = api
    return Story(demo)


def test_the_notice_step_shows_the_annotations_and_the_event(tmp_path: Path, cluster: FakeApiServer) -> None:
    story = _story(tmp_path, cluster)
    assert story._notice() is None and story.notice_given() is None
    _give_notice(cluster)
    told = story._notice()
    assert told is not None and f"--notice-seconds {story.demo.notice_seconds}" in told
    assert f"{RECLAIM_NOTICE_ANNOTATION}={DEADLINE}" in told and "=ml-team/train-urgent" in told
    assert f"Event {REASON_NOTICE} (Warning): gpu-steward will evict it after {DEADLINE}" in told


class _NoWaste:
    def query(self, expr: str) -> list[Any]:
        return []


def test_the_eviction_is_told_after_the_notice_and_its_deadline(
    tmp_path: Path, cluster: FakeApiServer
) -> None:
    story = _story(tmp_path, cluster)
    story.demo.prometheus = _NoWaste()  # type: ignore[assignment]
    _give_notice(cluster)
    _evict(cluster, DEADLINE)  # in the deadline's second: not before it
    assert story._evicted_step() is None  # the notice step is told first
    story.told["notice"] = 0.0
    told = story._evicted_step()
    assert told is not None and not story.failed
    assert told.startswith(f"the automator evicted {VICTIM[0]}/{VICTIM[1]} at {DEADLINE}, after its notice's")


def test_an_eviction_before_the_deadline_fails_the_story(tmp_path: Path, cluster: FakeApiServer) -> None:
    story = _story(tmp_path, cluster)
    _give_notice(cluster)
    story.told["notice"] = 0.0
    _evict(cluster, "2026-12-05T10:00:05Z")
    assert story._evicted_step() is None
    assert story.failed.endswith(
        f"was evicted at 2026-12-05T10:00:05Z, before its notice's deadline {DEADLINE}"
    )


def test_an_eviction_without_notice_fails_the_story(tmp_path: Path, cluster: FakeApiServer) -> None:
    story = _story(tmp_path, cluster)
    assert story._evicted_step() is None and not story.failed  # nothing evicted yet
    _evict(cluster, "2026-12-05T10:00:05Z")
    assert story._evicted_step() is None and story.failed.endswith("was evicted without notice")


def test_the_notice_is_scaled_and_replayed_by_the_backtest(tmp_path: Path) -> None:
    fast, normal = Demo(tmp_path, FAST), Demo(tmp_path, NORMAL)
    assert (normal.notice_seconds, fast.notice_seconds) == (NOTICE_SECONDS, NOTICE_SECONDS / FAST.factor)
    # one list of flags for the live automator and the closing backtest
    assert ("--notice-seconds", f"{fast.notice_seconds}") in fast.policy
    steps = STORIES["reclaim"]
    assert steps.index("alertmanager") < steps.index("notice") < steps.index("evicted")
