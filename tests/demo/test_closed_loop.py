"""`make demo-fast`, end to end: the fake cluster, the mock exporter, a real Prometheus and Alertmanager, and
the real automator enforcing through its Kubernetes adapter (tools/demo.py, docs/demo.md).

The story is driven to completion with its narrator; every claim is then checked again here, from the
parts themselves: the fake API server's request log and objects, Prometheus, Alertmanager's API.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from collections.abc import Iterator

import pytest

from steward_common.series import IDLE_THRESHOLD, POD_ACTIVITY
from tools.demo import FAST, PREEMPTOR, VICTIM, WASTE, Demo, Ports, Story, run_story
from tools.demorules import IDLE_ALERT
from tools.kubeapi import is_dry_run

pytestmark = pytest.mark.integration

# The story takes about 40 s here (docs/demo.md); this bound only stops a broken run.
STORY_TIMEOUT = 150


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    for binary in ("prometheus", "promtool"):
        if shutil.which(binary) is None:
            pytest.skip(f"{binary} not installed (make deps)")
    if shutil.which("prometheus-alertmanager") is None and shutil.which("alertmanager") is None:
        pytest.skip("alertmanager not installed (make deps)")
    demo = Demo(tmp_path_factory.mktemp("demo"), FAST, Ports()).start()
    try:
        story = Story(demo)
        code = run_story(demo, STORY_TIMEOUT, stop_when_complete=True, story=story)
        assert code == 0, (demo.workdir / "automator.log").read_text()
        yield story
    finally:
        demo.stop()


@pytest.fixture
def demo(story: Story) -> Demo:
    return story.demo


def evictions(demo: Demo) -> list[str]:
    assert demo.api is not None
    # Real evictions only: the automator first asks for each victim with a server-side dry run (issue 7).
    return [
        c.path
        for c in demo.api.writes()
        if c.path.endswith("/eviction") and not is_dry_run(c.query, (c.body or {}).get("deleteOptions"))
    ]


def test_the_idle_pod_is_evicted_and_the_busy_one_never(demo: Demo) -> None:
    assert evictions(demo) == [f"/api/v1/namespaces/{VICTIM[0]}/pods/{VICTIM[1]}/eviction"]
    assert demo.api is not None
    assert demo.api.pod(*VICTIM) is None
    busy = demo.api.pod("ml-team", "train-busy")
    assert busy is not None and "deletionTimestamp" not in busy["metadata"]


def test_the_preemptor_ends_running_on_the_freed_gpus(demo: Demo) -> None:
    assert demo.api is not None and demo.devices is not None and demo.prometheus is not None
    pod = demo.api.pod(*PREEMPTOR)
    assert pod is not None
    assert (pod["status"]["phase"], pod["spec"]["nodeName"]) == ("Running", "demo-gpu-node-1")
    assert demo.devices.assigned[PREEMPTOR] == [4, 5]  # the GPUs the victim held
    (sample,) = demo.prometheus.query(f'{POD_ACTIVITY}{{namespace="{PREEMPTOR[0]}",pod="{PREEMPTOR[1]}"}}')
    assert float(sample["value"][1]) > IDLE_THRESHOLD


def test_the_idle_alert_reached_alertmanager(story: Story) -> None:
    # What Alertmanager's v2 API answered while the alert was active (it resolves once the pod is gone).
    alerts = story.received
    assert {(a["labels"]["namespace"], a["labels"]["pod"]) for a in alerts} >= {VICTIM}
    assert all(a["labels"]["alertname"] == IDLE_ALERT and a["labels"]["pod"] != "train-busy" for a in alerts)
    assert story.demo.prometheus is not None
    port = story.demo.prometheus.url.rsplit(":", 1)[1]
    assert all(f":{port}/graph?" in a["generatorURL"] for a in alerts)  # sent by the demo's Prometheus


def test_the_waste_series_stops_growing_after_the_eviction(demo: Demo) -> None:
    assert demo.prometheus is not None
    (before,) = demo.prometheus.query(WASTE)
    assert float(before["value"][1]) > 0  # the idle pod did waste GPU time first
    time.sleep(3 * demo.scale.rule_interval_seconds)  # three more evaluations of the rules
    (after,) = demo.prometheus.query(WASTE)
    assert float(after["value"][1]) == float(before["value"][1])


def test_the_keda_endpoint_answers_for_the_demo_deployment(demo: Demo) -> None:
    # The URL the demo prints: the Deployment inference/api's pod api-a, busy on its own GPUs.
    with urllib.request.urlopen(demo.keda_url, timeout=30) as r:
        body = json.load(r)
    assert r.status == 200 and body["pods"] == 1 and body["value"] > 0, body
