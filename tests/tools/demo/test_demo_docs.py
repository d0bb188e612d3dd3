"""docs/demo.md and README.md against the demo's code and data: a change to either makes this fail."""

from __future__ import annotations

import re

from tools.demo.backtest import CLASSES, REPORT, REPORT_JSON
from tools.demo.run import FAST, NORMAL, OUTAGE_SECONDS, STORIES, Demo, Ports
from tools.fakes.kedasim import ScaledObject
from tools.fakes.kubeapi import RESOURCES, load_objects
from tools.fakes.promserver import ROOT

DOC = (ROOT / "docs" / "demo.md").read_text()
README = (ROOT / "README.md").read_text()


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_the_pod_table_is_the_cluster() -> None:
    objects = load_objects(ROOT / "deploy" / "demo" / "cluster.yaml")
    pods = {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}": (
            o["spec"]["priorityClassName"],
            o["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        )
        for o in objects
        if o["kind"] == "Pod"
    }
    rows = re.findall(
        r"^\| `([\w-]+/[\w-]+)` \| ([^|]+) \| `([\w-]+)`", section(DOC, "## The story"), re.MULTILINE
    )
    assert {pod for pod, _, _ in rows} == set(pods)
    for pod, gpus, klass in rows:
        assert klass == pods[pod][0], pod
        count = (
            len(range(int(gpus.split("-")[0]), int(gpus.split("-")[1]) + 1)) if "-" in gpus else int(gpus[-1])
        )
        assert str(count) == pods[pod][1], pod


def test_the_documented_numbers_are_the_code() -> None:
    fast = section(DOC, "## `make demo-fast`")
    assert f"divided by {FAST.factor:g}" in fast and f"fires after {FAST.idle_alert_seconds} s" in fast
    assert f"after {NORMAL.idle_alert_seconds} s of idleness" in DOC
    # the notice the story shows, scaled like the rest
    notice_fast, notice = (
        Demo(ROOT / ".unused", FAST).notice_seconds,
        Demo(ROOT / ".unused", NORMAL).notice_seconds,
    )
    assert f"`--notice-seconds {notice_fast}` ({notice} in `make demo`)" in " ".join(fast.split())
    assert f"--notice-seconds {notice}` (600 is recommended in production)" in " ".join(DOC.split())
    reclaim = " ".join((ROOT / "docs" / "reclaim.md").read_text().split())
    assert f"(`--notice-seconds {notice}`, {notice_fast} in `make demo-fast`)" in reclaim
    ports = Ports.from_env()
    for port in (ports.api, ports.exporter, ports.prometheus, ports.alertmanager, ports.automator,
                 ports.kube_state_metrics):  # fmt: skip
        assert f"127.0.0.1:{port}" in DOC, port


def test_the_closing_backtest_is_documented_as_it_runs() -> None:
    backtest = " ".join(section(DOC, "### The closing backtest").split())
    fast, normal = Demo(ROOT / ".unused", FAST), Demo(ROOT / ".unused", NORMAL)
    assert f"--step {fast.scrape_seconds:g}s" in backtest
    assert (
        f"{fast.scrape_seconds:g} s in `make demo-fast`, {normal.scrape_seconds:g} s in `make demo`"
        in backtest
    )
    for flag, _ in fast.policy:
        assert flag in backtest, flag
    assert f"up to one pass, {fast.pass_interval:g} s" in backtest  # the pass it is finer than
    assert (
        f"once a rule interval ({fast.ksm_scrape_seconds:g} s, {normal.ksm_scrape_seconds:g} s)" in backtest
    )
    for name in (CLASSES, REPORT, REPORT_JSON):
        assert name in backtest and name in DOC, name
    assert "job `kube-state-metrics`" in backtest


def test_every_served_resource_is_documented() -> None:
    served = section(DOC, "## What the fake API server is and is not")
    for res in RESOURCES:
        assert res.kind + ("es" if res.kind.endswith("s") else "s") in served, res.kind


def test_readme_gives_both_demo_commands_and_the_tour() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "deploy/demo/run_demo.py --fast" in makefile and "\ndemo-fast: deps" in makefile
    assert "make demo " in README and "make demo-fast" in README and "docs/demo.md" in README
    tour = section(README, "### What the demo shows")
    steps = ("went idle", "alert GpuStewardGpuAllocatedIdle fires", "Alertmanager received it",
             "notice instead of evicting it", "the automator evicted", "after its notice's deadline",
             "the scheduler started", "busy", "waste counter stopped")  # fmt: skip
    for step in steps:
        assert step in tour and step in DOC, step


def test_the_keda_story_is_documented_as_a_stand_in_with_the_demo_scaled_objects_numbers() -> None:
    so = ScaledObject.from_manifests(load_objects(ROOT / "deploy" / "demo" / "keda.yaml"))
    keda = " ".join(section(DOC, "### KEDA: a stand-in").split())
    assert "stand-in" in keda and "tools/fakes/kedasim.py" in keda
    assert f"({so.failure_threshold})" in keda and f"`fallback.replicas` ({so.fallback_replicas})" in keda
    assert f"{so.polling_interval:g} s `pollingInterval`" in keda
    assert f"{so.min_replicas}..{so.max_replicas}" in keda
    assert f"stops Prometheus for {OUTAGE_SECONDS} s ({FAST.seconds(OUTAGE_SECONDS):g} s in" in keda
    fast = " ".join(section(DOC, "## `make demo-fast`").split())
    assert f"Prometheus is stopped for {FAST.seconds(OUTAGE_SECONDS):g} s" in fast
    assert f"DRA usage alert fires after {FAST.dra_alert_seconds} s" in fast
    for story in STORIES:
        assert f"**{story}**" in DOC and f"**{story}**" in README, story
