"""`make demo-fast`, end to end: the fake cluster, the mock exporters, a real Prometheus and Alertmanager,
the real automator enforcing through its Kubernetes adapter, and the KEDA stand-in (tools/demo/run.py,
docs/demo.md).

The three stories are driven to completion with their narrator; every claim is then checked again here,
from the parts themselves: the fake API server's request log and objects, Prometheus, Alertmanager's API,
the automator's /dra. The demo's closing backtest is checked against what the live automator did: the
history it reads is the one the stories wrote.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime

import pytest

from steward_common.conventions import (
    KUEUE_DEACTIVATED_FOR_ANNOTATION,
    KUEUE_REASON_DEACTIVATED,
    REASON_NOTICE,
    RECLAIM_NOTICE_ANNOTATION,
    RECLAIM_NOTICE_FOR_ANNOTATION,
)
from steward_common.series import IDLE_THRESHOLD, NAMESPACE_IDLE_GPU_SECONDS_TOTAL, POD_ACTIVITY
from tools.demo.backtest import SUBCOMMAND
from tools.demo.rules import DRA_ALERT, IDLE_ALERT
from tools.demo.run import (
    DRA_REASON,
    FAST,
    FINETUNE,
    KUEUE_API,
    NOTEBOOK,
    NOTEBOOK_POD,
    PREEMPTOR,
    VICTIM,
    Demo,
    Ports,
    Story,
    run_story,
)
from tools.fakes.kubeapi import is_dry_run

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


def test_the_victim_was_given_notice_then_evicted_after_its_deadline(story: Story) -> None:
    demo = story.demo
    assert demo.api is not None
    victim = f"/api/v1/namespaces/{VICTIM[0]}/pods/{VICTIM[1]}"
    writes = [(c.method, c.path, c.body) for c in demo.api.writes() if c.path.startswith(victim)]
    # the notice (one merge patch of both annotations), before any eviction request for the victim
    noticed = [i for i, (m, path, body) in enumerate(writes) if m == "PATCH" and path == victim
               and RECLAIM_NOTICE_ANNOTATION in body["metadata"]["annotations"]]  # fmt: skip
    asked = [i for i, (_, path, _) in enumerate(writes) if path == f"{victim}/eviction"]
    assert len(noticed) == 1 and asked and noticed[0] < asked[0]
    written = writes[noticed[0]][2]["metadata"]["annotations"]
    assert written[RECLAIM_NOTICE_FOR_ANNOTATION] == f"{PREEMPTOR[0]}/{PREEMPTOR[1]}"
    deadline = _unix(written[RECLAIM_NOTICE_ANNOTATION])
    (notice,) = [e for e in demo.api.objects_of("events") if e.get("reason") == REASON_NOTICE]
    assert (notice["type"], notice["involvedObject"]["name"]) == ("Warning", VICTIM[1])
    assert written[RECLAIM_NOTICE_ANNOTATION] in notice["message"] and PREEMPTOR[1] in notice["message"]
    # the deadline is --notice-seconds after the notice (whole seconds), the eviction not before it
    assert abs(deadline - _unix(notice["firstTimestamp"]) - demo.notice_seconds) <= 1
    assert _unix(story.live_evictions()[f"{VICTIM[0]}/{VICTIM[1]}"]) >= deadline
    assert story.told["notice"] <= story.told["evicted"]


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
    # The victim's namespace: the inference replicas KEDA scales down may idle for a while elsewhere.
    waste = f'sum({NAMESPACE_IDLE_GPU_SECONDS_TOTAL}{{namespace="{VICTIM[0]}"}})'
    (before,) = demo.prometheus.query(waste)
    assert float(before["value"][1]) > 0  # the idle pod did waste GPU time first
    time.sleep(3 * demo.scale.rule_interval_seconds)  # three more evaluations of the rules
    (after,) = demo.prometheus.query(waste)
    assert float(after["value"][1]) == float(before["value"][1])


def test_the_keda_endpoint_answers_for_the_demo_deployment(demo: Demo) -> None:
    # The URL the demo prints, with the token of the demo's TriggerAuthentication; without it, 401.
    req = urllib.request.Request(demo.keda_url, headers={"Authorization": f"Bearer {demo.keda_token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = json.load(r)
    assert r.status == 200 and body["pods"] >= 1 and body["deployment"] == "api", body
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(demo.keda_url, timeout=30)
    assert refused.value.code == 401


def test_keda_scaled_the_deployment_up_fell_back_while_prometheus_was_stopped_then_down(story: Story) -> None:
    demo = story.demo
    assert demo.api is not None and demo.keda is not None and story.outage is not None
    stopped, back = story.outage
    polls = demo.keda.history()
    # Up on the value before the outage; the fallback only while Prometheus was stopped; down after it.
    assert any(p.replicas > p.current and not p.error and p.at < stopped for p in polls)
    fallbacks = [p for p in polls if p.fallback]
    assert fallbacks and all(stopped <= p.at <= back + 5 and p.error for p in fallbacks)
    assert fallbacks[0].failures == (demo.scaled_object.failure_threshold or 0) + 1  # type: ignore[union-attr]
    assert any(p.replicas < p.current and not p.error and p.at > back for p in polls)
    # What the stand-in did is in the fake API server: merge patches of the Deployment's replicas...
    patches = [
        c.body["spec"]["replicas"]
        for c in demo.api.writes()
        if c.method == "PATCH" and c.path.endswith("/deployments/api")
    ]
    assert patches == [p.replicas for p in polls if p.replicas != p.current]
    # ...which its ReplicaSet played: api-* pods created, placed on the inference node, some deleted.
    created = [e for e in demo.api.objects_of("events") if e.get("reason") == "SuccessfulCreate"]
    deleted = [e for e in demo.api.objects_of("events") if e.get("reason") == "SuccessfulDelete"]
    assert created and deleted
    names = {e["message"].removeprefix("Created pod: ") for e in created}
    assert names and all(n.startswith("api-7d4b9c-") for n in names)
    placed = {
        e["involvedObject"]["name"]: e["message"].rsplit(" ", 1)[1]
        for e in demo.api.objects_of("events")
        if e.get("reason") == "Scheduled" and e["involvedObject"]["name"] in names
    }
    assert placed and set(placed.values()) == {"demo-gpu-node-2"}  # the inference node, never the H100s


def test_the_dra_check_found_the_broken_promise_wrote_the_event_and_alerted(story: Story) -> None:
    demo = story.demo
    assert demo.api is not None
    with urllib.request.urlopen(f"{demo.automator_url}/dra", timeout=30) as r:
        report = json.load(r)
    assert [(f["kind"], f["claim"], f["pod"]) for f in report["findings"]] == [
        ("usage-over-claim", "demo-dra/llm-chat-gpu", "demo-dra/llm-chat")
    ]
    events = [e for e in demo.api.objects_of("events") if e.get("reason") == DRA_REASON]
    assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events] == [
        ("ResourceClaim", "llm-chat-gpu")
    ]
    assert story.dra_received and all(a["labels"]["alertname"] == DRA_ALERT for a in story.dra_received)
    assert story.dra_finding["measured"] == "20Gi" and story.dra_finding["promised"] == "16000Mi"


def _unix(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_prometheus_holds_the_fake_clusters_kube_state_metrics_history(story: Story) -> None:
    demo, prom = story.demo, story.demo.prometheus
    assert prom is not None
    pods = {r["metric"]["pod"] for r in prom.query('kube_pod_info{job="kube-state-metrics"}')}
    assert {"train-busy", "train-urgent", "api-a", "llm-chat"} <= pods and VICTIM[1] not in pods
    # The victim is in history, and gone; its short terminating time (the grace period, shorter than the
    # scrape interval here) shows as a deletion timestamp when a scrape fell in it.
    victim = f'namespace="{VICTIM[0]}",pod="{VICTIM[1]}"'
    assert prom.query(f'max_over_time(kube_pod_status_phase{{{victim},phase="Running"}}[10m]) == 1')
    evicted = _unix(story.live_evictions()[f"{VICTIM[0]}/{VICTIM[1]}"])
    for deleted in prom.query(f"max_over_time(kube_pod_deletion_timestamp{{{victim}}}[10m])"):
        assert evicted <= float(deleted["value"][1]) <= evicted + 60
    # The preemptor: unschedulable while the GPUs were held, then scheduled once the victim was gone.
    urgent = f'namespace="{PREEMPTOR[0]}",pod="{PREEMPTOR[1]}"'
    assert prom.query(f"max_over_time(kube_pod_status_unschedulable{{{urgent}}}[10m]) == 1")
    assert prom.query(f"kube_pod_status_unschedulable{{{urgent}}}") == []
    (scheduled,) = prom.query(f"kube_pod_status_scheduled_time{{{urgent}}}")
    assert evicted <= float(scheduled["value"][1]) < time.time()
    (gpus,) = prom.query(f'kube_pod_container_resource_requests{{{urgent},resource="nvidia_com_gpu"}}')
    assert (gpus["metric"]["node"], gpus["metric"]["unit"], gpus["value"][1]) == (
        "demo-gpu-node-1",
        "integer",
        "2",
    )
    assert demo.started_at < evicted


def test_the_demo_ends_with_a_backtest_over_its_own_history(story: Story) -> None:
    demo, backtest = story.demo, story.backtest
    assert backtest is not None
    if backtest.skipped:
        pytest.skip(f"no `{SUBCOMMAND}` subcommand in this automator: {backtest.skipped}")
    assert not backtest.failed, backtest.failed
    report = backtest.report
    (policy,) = report["policies"]
    totals = policy["totals"]
    # From the demo's start to its end, at the scrape interval: every step counted.
    step = report["step_seconds"]
    assert step == demo.scrape_seconds and _unix(report["from"]) == int(demo.started_at)
    assert totals["steps"] == (_unix(report["to"]) - _unix(report["from"])) // step + 1
    # The steps of the Prometheus outage have no data and count as such, never as idle.
    assert story.outage is not None
    stopped, back = story.outage
    assert totals["steps_without_data"] >= (back - stopped) // step - 2
    # What it would have evicted is what the live automator evicted, for the same pod, not regretted. The
    # live eviction is in this history: the backtest finds it unless no step falls between the moment the
    # policy allows it and the scrape that shows the victim terminating (docs/demo.md).
    live = story.live_evictions()
    assert list(live) == [f"{VICTIM[0]}/{VICTIM[1]}"]
    assert len(backtest.evictions) <= 1
    for e in backtest.evictions:
        assert (e["victim"], e["preemptor"], e["gpus"], e["node"]) == (
            "research/batch-idle", "ml-team/train-urgent", 2, "demo-gpu-node-1")  # fmt: skip
        assert e["regret"] is False and e["busy_again_after_seconds"] is None
        # within a pass before the live eviction and a kube-state-metrics scrape after it
        assert (
            abs(_unix(e["at"]) - _unix(live[e["victim"]]))
            <= demo.pass_interval + demo.ksm_scrape_seconds + step
        )
    assert totals["evictions"] == len(backtest.evictions) and totals["regret_evictions"] == 0
    # The notice is replayed as the live automator gave it: one, never withdrawn.
    assert policy["settings"]["notice-seconds"] == demo.notice_seconds
    assert (totals["notices"], totals["notices_withdrawn"]) == (1, 0)
    # The table and the report's path are printed; the report is one file with nothing to fetch.
    assert backtest.html is not None and backtest.html.parent == demo.workdir
    lines = backtest.lines(live)
    assert backtest.table.strip() in lines and f"HTML report: {backtest.html}" in lines
    assert re.search(r"^default\s+" + str(totals["evictions"]) + r"\s", backtest.table, re.MULTILINE)
    page = backtest.html.read_text()
    assert "<html" in page.lower()
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)\s*=\s*[\"']?(https?:)?//", page, re.I)


def test_the_idle_kueue_workload_gave_its_quota_to_the_waiting_one(story: Story) -> None:
    demo = story.demo
    assert demo.api is not None
    assert story.told["kueue-idle"] <= story.told["kueue-deactivated"] <= story.told["kueue-admitted"]
    # the automator's one write on Kueue: the idle Workload deactivated for the waiting one, with its uid
    patches = [c for c in demo.api.writes() if c.method == "PATCH" and "/workloads/" in c.path]
    assert [(c.path, c.code) for c in patches] == [
        (f"/apis/{KUEUE_API}/namespaces/{NOTEBOOK[0]}/workloads/{NOTEBOOK[1]}", 200)
    ]
    (notebook,) = [w for w in demo.api.objects_of("workloads") if w["metadata"]["name"] == NOTEBOOK[1]]
    assert patches[0].body == {
        "metadata": {
            "annotations": {KUEUE_DEACTIVATED_FOR_ANNOTATION: f"{FINETUNE[0]}/{FINETUNE[1]}"},
            "uid": notebook["metadata"]["uid"],
        },
        "spec": {"active": False},
    }
    (event,) = [e for e in demo.api.objects_of("events") if e.get("reason") == KUEUE_REASON_DEACTIVATED]
    assert event["involvedObject"]["name"] == NOTEBOOK[1] and "team-a/finetune" in event["message"]
    # the stand-in's part: the notebook's pod gone (never evicted), its quota released, finetune admitted
    assert demo.api.pod(*NOTEBOOK_POD) is None
    assert not any(NOTEBOOK_POD[1] in path for path in evictions(demo))
    conditions = {c["type"]: c["status"] for c in notebook["status"]["conditions"]}
    assert conditions["Evicted"] == "True" and conditions["QuotaReserved"] == "False"
    (finetune,) = [w for w in demo.api.objects_of("workloads") if w["metadata"]["name"] == FINETUNE[1]]
    assert {c["type"]: c["status"] for c in finetune["status"]["conditions"]}["Admitted"] == "True"
    pod = demo.api.pod(FINETUNE[0], f"{FINETUNE[1]}-main-0")
    assert pod is not None and pod["spec"]["nodeName"] == "demo-gpu-node-3"
    with urllib.request.urlopen(f"{demo.automator_url}/decisions", timeout=30) as r:
        assert json.load(r)["kueue"]["mode"] == "deactivate"
