"""End to end: the real `python -m automator run` process against a fake API server and a real Prometheus.

The API server is tools/fakes/fakekube.py, the project's one Kubernetes API fake: a real HTTP server holding
the cluster in memory (lists, Evictions with dry runs and uid preconditions, merge patches, Events), reached
through a kubeconfig file as a cluster would be; it records every request. Prometheus is Debian's, holding
backfilled recorded series for the last 40 minutes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from automator.prom import GPU_SERIES
from steward_common.conventions import LAST_RECLAIM_ANNOTATION, RECLAIM_ANNOTATION
from tools.fakes.fakekube import FakeApiServer
from tools.fakes.promserver import ROOT, Prometheus, free_port, start_backfilled_prometheus, stop

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
RULE_INTERVAL = 30
IDLE, BUSY, PREEMPTOR = "ml/idle", "ml/busy", "team/urgent"
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def ts(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def running_pod(ns: str, name: str, gpus: int, uid: str) -> dict[str, Any]:
    two_hours_ago = ts(datetime.now(UTC) - timedelta(hours=2))  # scheduled long before the 1800 s window
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": two_hours_ago},
        "spec": {
            "nodeName": "gpu-node-1",
            "priorityClassName": "batch",
            "priority": 100,
            "containers": [{"name": "main", "resources": {"limits": {GPU: str(gpus)}}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": two_hours_ago}],
        },
    }


def cluster_objects() -> dict[str, list[dict[str, Any]]]:
    """One 8-GPU node running an idle 2-GPU pod and a busy 4-GPU pod; a pending 4-GPU preemptor.

    The preemptor asks for 4 GPUs, not 2: with 2 free GPUs a 2-GPU preemptor already fits and nothing
    would be evicted. Evicting the idle pod frees exactly enough.
    """
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-node-1", "labels": {"kubernetes.io/hostname": "gpu-node-1"}},
        "spec": {},
        "status": {
            "allocatable": {GPU: "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    preemptor = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "urgent",
            "namespace": "team",
            "uid": "uid-urgent",
            "creationTimestamp": ts(datetime.now(UTC) - timedelta(minutes=5)),
        },
        "spec": {
            "priorityClassName": "reclaim",
            "priority": 1000,
            "preemptionPolicy": "Never",
            "containers": [{"name": "main", "resources": {"limits": {GPU: "4"}}}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    classes = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "reclaim", "annotations": {RECLAIM_ANNOTATION: "true"}},
            "value": 1000,
            "preemptionPolicy": "Never",
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "batch"},
            "value": 100,
        },
    ]
    return {
        "nodes": [node],
        "pods": [
            running_pod("ml", "idle", 2, "uid-idle"),
            running_pod("ml", "busy", 4, "uid-busy"),
            preemptor,
        ],
        "priorityclasses": classes,
        "poddisruptionbudgets": [],
    }


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    """The fake API server (tools/fakes/fakekube.py) holding the cluster; nothing runs its kubelet or
    scheduler, so an evicted pod stays terminating (holding its GPUs) and the preemptor stays pending."""
    objects = [obj for kind in cluster_objects().values() for obj in kind]
    with FakeApiServer(objects).start() as fake:
        yield fake


@pytest.fixture
def kubeconfig(tmp_path: Path, api: FakeApiServer) -> Path:
    """A kubeconfig for the plain-HTTP fake server, without credentials."""
    return api.kubeconfig(tmp_path / "kubeconfig")


def _openmetrics(end: int) -> str:
    """80 samples, one every 30 s, the last at `end`: 40 minutes of history per pod."""
    lines = [f"# TYPE {GPU_SERIES} gauge"]
    for pod, value in (("idle", 0.0), ("busy", 0.9)):
        lines += [
            f'{GPU_SERIES}{{namespace="ml",pod="{pod}"}} {value} {end - RULE_INTERVAL * i}'
            for i in reversed(range(80))
        ]
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    if shutil.which("promtool") is None or shutil.which("prometheus") is None:
        pytest.skip("prometheus/promtool not installed (make deps)")
    # Computed here, not at import: the service queries at its own clock, which must see a full window.
    samples = _openmetrics(int(time.time()) - 5)
    prom = start_backfilled_prometheus(tmp_path_factory.mktemp("e2e-prom"), samples)
    try:
        prom.wait_for(f"count_over_time({GPU_SERIES}[1h])", timeout=30)
        yield prom
    finally:
        prom.stop()


@dataclass
class Automator:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as e:
            return int(e.code), e.read().decode()

    def decisions(self) -> dict[str, Any]:
        code, body = self.get("/decisions")
        assert code == 200, body
        result: dict[str, Any] = json.loads(body)
        return result

    def metric(self, name: str, **labels: str) -> float:
        """Value of one sample of /metrics (0 when absent)."""
        _, text = self.get("/metrics")
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return float(s.value)
        return 0.0

    def wait(self, what: str, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"automator exited ({self.proc.returncode}) waiting for {what}:\n{self.log()}"
                )
            if predicate():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{self.log()}")

    def passes(self, result: str) -> float:
        return self.metric("gpu_steward_automator_passes_total", result=result)


@pytest.fixture
def start_automator(tmp_path: Path, kubeconfig: Path) -> Iterator[Callable[..., Automator]]:
    started: list[Automator] = []

    def start(prometheus_url: str, *extra: str) -> Automator:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_STEWARD_") and k != "KUBECONFIG"}
        env["POD_NAME"] = "automator-e2e"
        log_path = tmp_path / f"automator-{len(started)}.log"
        cmd = [
            sys.executable, "-m", "automator", "run",
            "--kubeconfig", str(kubeconfig),
            "--no-leader-election", "--single-replica",
            "--prometheus-url", prometheus_url,
            "--prometheus-timeout", "3",
            "--interval", "1",
            "--listen-address", "127.0.0.1",
            "--port", str(port),
            "--probe-port", str(free_port()),  # the default 8081 may be taken on a shared machine
            *extra,
        ]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
        automator = Automator(proc, f"http://127.0.0.1:{port}", log_path)
        started.append(automator)

        def healthy() -> bool:
            try:
                return automator.get("/healthz")[0] == 200
            except OSError:
                return False

        automator.wait("/healthz", healthy, timeout=30)
        return automator

    yield start
    for automator in started:
        stop(automator.proc)  # SIGTERM: the service's graceful shutdown


def test_enforce_evicts_the_idle_pod_only(
    api: FakeApiServer, prometheus: Prometheus, start_automator: Callable[..., Automator]
) -> None:
    automator = start_automator(prometheus.url, "--mode", "enforce")

    # The pass that evicts also annotates and posts both Events; then a further pass must evict nothing.
    automator.wait("an eviction", lambda: any(c.path.endswith("/eviction") for c in api.writes()))
    first_ok = automator.passes("ok")
    automator.wait("two more ok passes", lambda: automator.passes("ok") >= first_ok + 2)

    writes = api.writes()
    evictions = [c for c in writes if c.path.endswith("/eviction")]
    path = "/api/v1/namespaces/ml/pods/idle/eviction"
    assert [(c.method, c.path) for c in evictions] == [("POST", path)] * 2  # the dry run, then the eviction
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "idle", "namespace": "ml"},
    }
    assert evictions[0].body == {
        **eviction,
        "deleteOptions": {"preconditions": {"uid": "uid-idle"}, "dryRun": ["All"]},
    }
    assert evictions[1].body == {**eviction, "deleteOptions": {"preconditions": {"uid": "uid-idle"}}}
    # The preemptor was read again just before.
    assert any(c.method == "GET" and c.path == "/api/v1/namespaces/team/pods/urgent" for c in api.requests())
    assert not any("busy" in c.path for c in writes)

    patches = [c for c in writes if c.method == "PATCH"]
    assert [c.path for c in patches] == ["/api/v1/namespaces/team/pods/urgent"]
    assert patches[0].content_type == "application/merge-patch+json"
    stamp = patches[0].body["metadata"]["annotations"][LAST_RECLAIM_ANNOTATION]
    assert RFC3339.match(stamp), stamp
    assert abs(datetime.fromisoformat(stamp) - datetime.now(UTC)) < timedelta(minutes=5)
    # The fake applied the writes as an API server would: the idle pod terminates, the preemptor is annotated.
    idle, busy, urgent = api.pod("ml", "idle"), api.pod("ml", "busy"), api.pod("team", "urgent")
    assert idle is not None and idle["metadata"].get("deletionTimestamp")
    assert busy is not None and "deletionTimestamp" not in busy["metadata"]
    assert urgent is not None and urgent["metadata"]["annotations"][LAST_RECLAIM_ANNOTATION] == stamp

    events = {c.body["involvedObject"]["name"]: c.body for c in writes if c.path.endswith("/events")}
    assert set(events) == {"idle", "urgent"}, [c.path for c in writes]
    assert events["urgent"]["reason"] == "GpuReclaimPreemptor"
    assert events["urgent"]["involvedObject"]["uid"] == "uid-urgent"
    assert IDLE in events["urgent"]["message"] and "0.000" in events["urgent"]["message"]
    assert events["idle"]["reason"] == "GpuIdleReclaimed"
    assert events["idle"]["involvedObject"] == {
        "apiVersion": "v1", "kind": "Pod", "namespace": "ml", "name": "idle", "uid": "uid-idle",
    }  # fmt: skip
    assert PREEMPTOR in events["idle"]["message"] and "gpu-node-1" in events["idle"]["message"]
    assert events["idle"]["metadata"]["namespace"] == "ml"
    assert events["idle"]["reportingInstance"] == "automator-e2e"
    # Nothing else was written: 1 dry run, 1 eviction, 1 patch, 2 Events.
    assert len(writes) == 5, [(c.method, c.path) for c in writes]

    # /decisions holds the last pass, which found the preemptor cooling down.
    last = automator.decisions()
    assert last["mode"] == "enforce" and last["result"] == "ok"
    assert last["skipped_cooldown"] == [PREEMPTOR] and last["decisions"] == []
    assert automator.metric("gpu_steward_automator_evictions_total", result="ok") == 1
    assert automator.metric("gpu_steward_automator_evictions_total", result="error") == 0
    assert automator.metric("gpu_steward_automator_decisions_total", mode="enforce") == 1
    assert automator.metric("gpu_steward_automator_prometheus_queries_per_pass") == 2  # recent + 1800 s
    assert automator.passes("prometheus_unavailable") == 0
    assert "evicted ml/idle for team/urgent" in automator.log()


def test_enforce_decision_is_shown_while_it_is_the_last_pass(
    api: FakeApiServer, prometheus: Prometheus, start_automator: Callable[..., Automator]
) -> None:
    # A long interval keeps the acting pass as the last one, so /decisions shows what was done.
    automator = start_automator(prometheus.url, "--mode", "enforce", "--interval", "600")
    automator.wait("the first pass", lambda: automator.passes("ok") >= 1)

    last = automator.decisions()
    assert last["acted"] is True and last["mode"] == "enforce"
    (decision,) = last["decisions"]
    assert decision["preemptor"] == PREEMPTOR and decision["node"] == "gpu-node-1"
    assert decision["victims"] == [IDLE] and decision["gpus_freed"] == 2
    (victim,) = decision["victim_details"]
    assert victim["gpu_activity"] == pytest.approx(0.0) and victim["gpus"] == 2
    evict = [a for a in last["actions"] if a["kind"] == "evict"]
    assert evict == [{"kind": "evict", "pod": IDLE, "result": "ok", "detail": f"for {PREEMPTOR}"}]
    assert automator.metric("gpu_steward_automator_evictions_total", result="ok") == 1
    assert [c.path for c in api.writes() if c.path.endswith("/eviction")] == [
        "/api/v1/namespaces/ml/pods/idle/eviction"
    ] * 2  # the dry run, then the eviction


def test_prometheus_down_evicts_nothing(
    api: FakeApiServer, start_automator: Callable[..., Automator]
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    automator = start_automator(closed, "--mode", "enforce")

    automator.wait("two failed passes", lambda: automator.passes("prometheus_unavailable") >= 2)

    assert api.writes() == []
    assert any(c.path == "/api/v1/pods" for c in api.requests())  # it did read the cluster
    assert automator.passes("ok") == 0
    assert automator.metric("gpu_steward_automator_evictions_total", result="ok") == 0
    last = automator.decisions()
    assert last["result"] == "prometheus_unavailable" and last["acted"] is False
    assert "no eviction this pass" in last["reason"] and closed in last["reason"]
    code, why = automator.get("/readyz")
    assert code == 503 and "prometheus_unavailable" in why
    assert (
        f"Prometheus unavailable, no eviction this pass: recent 300s query to {closed} failed"
        in automator.log()
    )


def test_dry_run_is_the_default_and_writes_nothing(
    api: FakeApiServer, prometheus: Prometheus, start_automator: Callable[..., Automator]
) -> None:
    automator = start_automator(prometheus.url)

    automator.wait("two ok passes", lambda: automator.passes("ok") >= 2)

    assert api.writes() == []
    last = automator.decisions()
    assert last["mode"] == "dry-run" and last["acted"] is False and last["actions"] == []
    (decision,) = last["decisions"]
    assert decision["preemptor"] == PREEMPTOR and decision["victims"] == [IDLE]
    assert automator.metric("gpu_steward_automator_decisions_total", mode="dry-run") >= 2
    assert automator.metric("gpu_steward_automator_evictions_total", result="ok") == 0
    assert "decision mode=dry-run preemptor=team/urgent" in automator.log()
    assert "would evict ml/idle (2 GPU, priority 100, GPU activity 0.000 over 1800s)" in automator.log()
