"""`make demo` and `make demo-fast`: the automator's four jobs on one machine, no cluster (docs/demo.md).

Starts the fake Kubernetes API server with its simulated kubelet, scheduler, ReplicaSet controller and GPUs
(tools/fakes/fakekube.py, tools/fakes/fakesim.py) holding deploy/demo/cluster.yaml and
deploy/demo/dra-cluster.yaml, a mock exporter per GPU node following the fake's GPUs, a real Prometheus with
the recording rules and alerts, Alertmanager receiving the alerts, `gpu-automator run` in enforce mode
reaching the fake through a kubeconfig and its real Kubernetes adapter, and a stand-in for KEDA
(tools/fakes/kedasim.py) playing deploy/demo/keda.yaml against the automator's KEDA endpoint. It then
narrates the four stories as they happen (Story): reclaim (the idle pod given notice, --notice-seconds
scaled, then evicted after the deadline), KEDA scaling (with Prometheus stopped for a while on purpose, so
that the ScaledObject's fallback applies), the DRA check's broken promise, and an idle Kueue Workload giving
its quota to a waiting one (deploy/demo/kueue.yaml, with a stand-in for Kueue's controller,
tools/fakes/kueuesim.py, in the fake cluster); then sums up where to look, and ends with a backtest over its
own history (tools/demo/backtest.py): the fake cluster's kube-state-metrics series (tools/fakes/ksm.py,
scraped as job kube-state-metrics) and the GPU Steward series, read back from Prometheus.

`--fast` divides the story's durations by 10 (tools/demo/rules.py) and exits when every story is complete:
0, or 1 when one fails or is not complete within DEMO_TIMEOUT seconds (180), naming it.
Environment: DEMO_API_PORT (16443), DEMO_EXPORTER_PORT (31995), DEMO_INFERENCE_EXPORTER_PORT (31996),
DEMO_DRA_EXPORTER_PORT (31997), DEMO_KUEUE_EXPORTER_PORT (31998), DEMO_PROMETHEUS_PORT (19090),
DEMO_ALERTMANAGER_PORT (19093), DEMO_AUTOMATOR_PORT (18080), DEMO_KUBE_STATE_METRICS_PORT (18081) for
`make demo` (`--fast` takes free ports), DEMO_DURATION (seconds; `make demo` runs until Ctrl-C without it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from automator.dra.model import USAGE_OVER_CLAIM
from automator.dra.report import FINDINGS_METRIC, REASONS
from automator.settings import ALL_SETTINGS
from steward_common.conventions import (
    KUEUE_REASON_DEACTIVATED,
    REASON_NOTICE,
    REASON_VICTIM,
    RECLAIM_NOTICE_ANNOTATION,
    RECLAIM_NOTICE_FOR_ANNOTATION,
)
from steward_common.series import IDLE_THRESHOLD, NAMESPACE_IDLE_GPU_SECONDS_TOTAL, POD_ACTIVITY
from tools.demo import rules as demorules
from tools.demo.backtest import CLASSES, Backtest, run_backtest, write_priority_classes
from tools.demo.rules import DRA_ALERT, IDLE_ALERT, TimeScale
from tools.fakes.fakekube import FakeApiServer
from tools.fakes.fakesim import GpuDevices, rfc3339
from tools.fakes.kedasim import KedaStandIn, Poll, ScaledObject, describe
from tools.fakes.ksm import JOB as KSM_JOB
from tools.fakes.ksm import KsmServer, of_fake
from tools.fakes.kubeapi import KUEUE_RESOURCES, is_dry_run, load_objects
from tools.fakes.promserver import (
    ROOT,
    Alertmanager,
    Prometheus,
    free_port,
    start_alertmanager,
    start_mock_exporter,
    start_prometheus,
    stop,
    wait_http,
)

KUEUE_API = KUEUE_RESOURCES[0].api_version  # kueue.x-k8s.io/v1beta2, as current Kueue serves it
NORMAL = TimeScale(factor=1, idle_alert_seconds=60, dra_alert_seconds=60)
FAST = TimeScale(factor=10, idle_alert_seconds=6, dra_alert_seconds=6)
DEMO = ROOT / "deploy" / "demo"
NODE = "demo-gpu-node-1"
# The GPU nodes the exporters play: scenario file, and the Ports field of its exporter.
SCENARIOS = {"scenario.yaml": "exporter", "inference-scenario.yaml": "inference_exporter",
             "dra-scenario.yaml": "dra_exporter", "kueue-scenario.yaml": "kueue_exporter"}  # fmt: skip
DRA_REASON = REASONS[USAGE_OVER_CLAIM]
# The amounts a usage-over-claim message compares: measured, then promised (bytes, and their short form).
_AMOUNTS = re.compile(r"uses GPU memory (\d+)(?: \(([^)]+)\))?.* consumed (\d+)(?: \(([^)]+)\))?")
OUTAGE_SECONDS = 80  # Prometheus stopped on purpose for this long (scaled): past the KEDA fallback
STORIES = {
    "reclaim": (
        "recording",
        "idle",
        "alert",
        "alertmanager",
        "notice",
        "evicted",
        "gone",
        "scheduled",
        "busy",
        "waste",
    ),
    "KEDA": ("keda-applied", "keda-up", "keda-fallback", "keda-down"),
    "DRA": ("dra-finding", "dra-event", "dra-alert", "dra-alertmanager"),
    "Kueue": ("kueue-idle", "kueue-deactivated", "kueue-admitted"),
}
VICTIM, BUSY, PREEMPTOR = ("research", "batch-idle"), ("ml-team", "train-busy"), ("ml-team", "train-urgent")
# The Kueue story (deploy/demo/kueue.yaml): the idle admitted Workload, its pod, the waiting Workload.
NOTEBOOK, NOTEBOOK_POD, FINETUNE = (
    ("team-a", "notebook"),
    ("team-a", "notebook-main-0"),
    ("team-a", "finetune"),
)
KUEUE_MODE = "deactivate"
NEVER_EVICTED = (BUSY, ("inference", "api-a"), NOTEBOOK_POD)
WASTE = f"sum({NAMESPACE_IDLE_GPU_SECONDS_TOTAL})"
# Automator windows the story must fit in, passed when the automator has the flag (the
# recent-activity window, 300 s by default: longer than the whole demo).
OPTIONAL_WINDOWS = {"--recent-window": 120}
# The notice the automator gives a victim before it evicts it (docs/reclaim.md "Notice"; 600 s recommended in
# production): demo seconds, scaled like the rest, so that the story shows the notice, then the eviction.
NOTICE_SECONDS = 60
FLAT_EVALUATIONS = 2  # the waste total unchanged over this many more rule evaluations counts as stopped
BACKTEST_TIMEOUT = 300  # seconds for each run of the closing backtest


@dataclass(frozen=True)
class Ports:
    api: int = 0
    exporter: int = 0
    prometheus: int = 0
    alertmanager: int = 0
    automator: int = 0
    inference_exporter: int = 0
    dra_exporter: int = 0
    kube_state_metrics: int = 0
    kueue_exporter: int = 0

    @classmethod
    def from_env(cls) -> Ports:
        env = os.environ
        return cls(
            int(env.get("DEMO_API_PORT", "16443")),
            int(env.get("DEMO_EXPORTER_PORT", "31995")),
            int(env.get("DEMO_PROMETHEUS_PORT", "19090")),
            int(env.get("DEMO_ALERTMANAGER_PORT", "19093")),
            int(env.get("DEMO_AUTOMATOR_PORT", "18080")),
            int(env.get("DEMO_INFERENCE_EXPORTER_PORT", "31996")),
            int(env.get("DEMO_DRA_EXPORTER_PORT", "31997")),
            int(env.get("DEMO_KUBE_STATE_METRICS_PORT", "18081")),
            int(env.get("DEMO_KUEUE_EXPORTER_PORT", "31998")),
        )

    def resolved(self) -> Ports:
        return Ports(*(p or free_port() for p in (self.api, self.exporter, self.prometheus, self.alertmanager,
                                                  self.automator, self.inference_exporter,
                                                  self.dra_exporter, self.kube_state_metrics,
                                                  self.kueue_exporter)))  # fmt: skip


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return str(obj["metadata"].get("namespace")), str(obj["metadata"]["name"])


def _pod(key: tuple[str, str]) -> str:
    return "/".join(key)


def _instant(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time as the API and the automator write it."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class Demo:
    """Every part of the demo, started in order; stop() ends them all."""

    workdir: Path
    scale: TimeScale = NORMAL
    ports: Ports = field(default_factory=Ports)
    api: FakeApiServer | None = None
    devices: GpuDevices | None = None  # the training node's GPUs (demo-gpu-node-1)
    inference_devices: GpuDevices | None = None  # the inference node's (demo-gpu-node-2)
    kueue_devices: GpuDevices | None = None  # the Kueue story's node's (demo-gpu-node-3)
    ksm: KsmServer | None = None  # the fake cluster's kube-state-metrics series
    prometheus: Prometheus | None = None
    alertmanager: Alertmanager | None = None
    started_at: float = 0.0  # wall clock: the start of the history the closing backtest reads
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    automator_url: str = ""
    keda_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    keda: KedaStandIn | None = None
    scaled_object: ScaledObject | None = None
    exporter_urls: list[str] = field(default_factory=list)
    _prometheus_args: dict[str, Any] = field(default_factory=dict)

    @property
    def keda_url(self) -> str:
        """The demo ScaledObject's metrics-api URL (deploy/demo/keda.yaml), on the demo's automator."""
        so = self.scaled_object or ScaledObject.from_manifests(load_objects(DEMO / "keda.yaml"))
        parts = urllib.parse.urlsplit(so.url)
        return f"{self.automator_url}{parts.path}?{parts.query}"

    @property
    def exporter_url(self) -> str:
        return self.exporter_urls[0] if self.exporter_urls else ""

    def _prepare(self) -> tuple[list[dict[str, Any]], list[Path]]:
        """The (time-scaled) clusters, scenarios, KEDA objects, rules and alerts under workdir."""
        shutil.rmtree(self.workdir, ignore_errors=True)  # fresh TSDB: the story starts at t=0
        self.workdir.mkdir(parents=True)
        for name in SCENARIOS:
            scenario = yaml.safe_load((DEMO / name).read_text())
            base = self.workdir / name.replace(".yaml", ".base.yaml")
            base.write_text(yaml.safe_dump(demorules.scale_scenario(scenario, self.scale), sort_keys=False))
        self.devices = GpuDevices.from_file(
            self.workdir / "scenario.base.yaml", self.workdir / "scenario.yaml"
        )
        self.inference_devices = GpuDevices.from_file(
            self.workdir / "inference-scenario.base.yaml", self.workdir / "inference-scenario.yaml"
        )
        self.kueue_devices = GpuDevices.from_file(
            self.workdir / "kueue-scenario.base.yaml", self.workdir / "kueue-scenario.yaml"
        )
        shutil.copy(self.workdir / "dra-scenario.base.yaml", self.workdir / "dra-scenario.yaml")
        self.scaled_object = demorules.scale_scaled_object(
            ScaledObject.from_manifests(load_objects(DEMO / "keda.yaml")), self.scale
        )
        (self.workdir / "keda-token").write_text(self.keda_token + "\n")
        rules = demorules.write_rule_files(ROOT, self.workdir / "rules", self.scale)
        objects = [*load_objects(DEMO / "cluster.yaml"), *load_objects(DEMO / "dra-cluster.yaml"),
                   *load_objects(DEMO / "kueue.yaml")]  # fmt: skip
        # The ScaledObject is in the cluster, as `kubectl apply` puts it: it declares the question asked
        objects += [o for o in load_objects(DEMO / "keda.yaml") if o.get("kind") == "ScaledObject"]
        return demorules.scale_cluster(objects, self.scale), rules

    def start(self) -> Demo:
        """Everything but the GPUs first; the exporters last, so their scenarios' clock starts with the
        story."""
        objects, rules = self._prepare()
        ports = self.ports.resolved()
        self.api = FakeApiServer(
            objects,
            simulate=True,
            devices=[d for d in (self.devices, self.inference_devices, self.kueue_devices) if d is not None],
            tick=0.2,
            port=ports.api,
            kueue_apis=[KUEUE_API],
        ).start()
        kubeconfig = self.api.kubeconfig(self.workdir / "kubeconfig")
        self.ksm = KsmServer(of_fake(self.api), port=ports.kube_state_metrics).start()
        fast = self.scale.factor > 1
        self.alertmanager = start_alertmanager(self.workdir / "alertmanager", ports.alertmanager)
        scrape = f"{self.scrape_seconds:g}s"
        exporters = {name: getattr(ports, field_) for name, field_ in SCENARIOS.items()}
        self._prometheus_args = {
            "workdir": self.workdir / "prometheus",
            "scrape_targets": {
                "gpu-steward-exporter": [f"127.0.0.1:{port}" for port in exporters.values()],
                "gpu-steward-automator": [f"127.0.0.1:{ports.automator}"],
            },
            # kube-state-metrics less often than the exporters, as clusters commonly scrape it.
            "extra_scrape_configs": [
                {
                    "job_name": KSM_JOB,
                    "scrape_interval": f"{self.ksm_scrape_seconds:g}s",
                    "static_configs": [{"targets": [self.ksm.target]}],
                }
            ],
            "rule_files": rules,
            "scrape_interval": scrape,
            "evaluation_interval": scrape,
            "port": ports.prometheus,
            "alertmanagers": [f"127.0.0.1:{ports.alertmanager}"],
        }
        self.started_at = time.time()
        self.prometheus = start_prometheus(**self._prometheus_args)
        self._start_automator(kubeconfig, ports.automator)
        for name, port in exporters.items():
            self.procs.append(
                start_mock_exporter(
                    self.workdir / name,
                    port,
                    self.workdir / name.replace("scenario.yaml", "exporter.log"),
                    *("--interval", "1" if fast else "5", "--scenario-reload", "--compat", "dcgm"),
                )
            )
            self.exporter_urls.append(f"http://127.0.0.1:{port}/metrics")
        return self

    def _start_automator(self, kubeconfig: Path, port: int) -> None:
        assert self.prometheus is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_STEWARD_") and k != "KUBECONFIG"}
        env["POD_NAME"] = "gpu-automator-demo"
        seconds = self.scale.seconds
        cmd = [
            sys.executable, "-m", "automator", "run",
            "--mode", "enforce",
            "--kubeconfig", str(kubeconfig),
            "--lease-namespace", "gpu-steward",
            "--prometheus-url", self.prometheus.url,
            "--interval", f"{self.pass_interval:g}",
            "--listen-address", "127.0.0.1",
            "--port", str(port),
            # No probe listener of its own (its 8081 default): the main port serves /healthz, and two demos
            # (or the demo and its closed-loop test) do not collide on a fixed port.
            "--probe-port", "0",
            # The DRA check as often as the service allows in the fast demo (10 s at least).
            "--dra-check-interval", f"{max(10, round(seconds(20)))}",
            "--keda-bearer-token-file", str(self.workdir / "keda-token"),
            "--keda-refresh-seconds", f"{max(1.0, seconds(15)):g}",
            "--keda-max-age-seconds", f"{max(1, round(seconds(120)))}",
            "--keda-pod-grace-seconds", f"{max(1, round(seconds(120)))}",
            # Kueue's idle Workloads give their quota to waiting ones (docs/kueue.md); not a reclaim policy
            # flag, so the closing backtest (which does not replay Kueue) is not given it.
            "--kueue", KUEUE_MODE,
        ]  # fmt: skip
        cmd += [part for flag_value in self.policy for part in flag_value]
        log = (self.workdir / "automator.log").open("wb")
        self.procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        self.automator_url = f"http://127.0.0.1:{port}"
        wait_http(f"{self.automator_url}/healthz")

    @property
    def pass_interval(self) -> float:
        """Seconds between the automator's passes."""
        return max(1.0, self.scale.seconds(20))

    @property
    def scrape_seconds(self) -> float:
        """The exporters' scrape interval: the resolution of the usage history, and so the closing
        backtest's step. Finer than a pass, so that a step falls between the moment the policy allows an
        eviction and the scrape of kube-state-metrics that shows the live automator's eviction of that pod
        (terminating: no longer a victim)."""
        return 1.0 if self.scale.factor > 1 else 5.0

    @property
    def ksm_scrape_seconds(self) -> float:
        """kube-state-metrics' scrape interval: one rule interval, as production scrapes it every 30 s."""
        return self.scale.rule_interval_seconds

    @property
    def notice_seconds(self) -> int:
        """The automator's --notice-seconds: NOTICE_SECONDS, scaled."""
        return max(1, round(self.scale.seconds(NOTICE_SECONDS)))

    @property
    def policy(self) -> list[tuple[str, str]]:
        """The policy flags of the demo's automator, which the closing backtest replays."""
        flags = [("--rule-interval", f"{self.scale.rule_interval_seconds:g}"),
                 ("--notice-seconds", f"{self.notice_seconds}")]  # fmt: skip
        known = {s.flag for s in ALL_SETTINGS}
        for flag, window in OPTIONAL_WINDOWS.items():  # windows of automator versions that have them
            if flag in known:
                flags.append((flag, f"{max(1, round(self.scale.seconds(window)))}"))
        return flags

    def backtest(self, timeout: float = BACKTEST_TIMEOUT) -> Backtest:
        """`gpu-automator backtest` over the demo's history so far, with its automator's policy and the fake
        cluster's PriorityClasses (tools/demo/backtest.py)."""
        assert self.prometheus is not None and self.api is not None
        classes = write_priority_classes(self.workdir / CLASSES, self.api.objects_of("priorityclasses"))
        return run_backtest(self.prometheus.url, self.started_at, time.time(), self.scrape_seconds, classes,
                            self.policy, self.workdir, timeout)  # fmt: skip

    def start_keda(self) -> KedaStandIn:
        """The KEDA stand-in, polling the endpoint the demo ScaledObject names, with its bearer token."""
        assert self.scaled_object is not None and self.api is not None
        self.keda = KedaStandIn(self.scaled_object, self.keda_url, self.api.url, self.keda_token).start()
        return self.keda

    def stop_prometheus(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()

    def restart_prometheus(self) -> None:
        """Prometheus again, on the same port and TSDB."""
        self.prometheus = start_prometheus(**self._prometheus_args)

    def exited(self) -> str | None:
        """The first part that stopped on its own, if any."""
        for p in self.procs:
            if p.poll() is not None:
                return f"{' '.join(str(a) for a in p.args[1:4])} exited with {p.returncode}"  # type: ignore[index]
        return None

    def stop(self) -> None:
        if self.keda is not None:
            self.keda.stop()
        for p in self.procs:
            stop(p)
        for part in (self.prometheus, self.alertmanager, self.ksm, self.api):
            if part is not None:
                part.stop()

    def where_to_look(self) -> str:
        assert self.prometheus is not None and self.alertmanager is not None and self.api is not None
        pad = " " * (len(self.prometheus.url) + 26)
        work = self.workdir
        return "\n".join(
            [
                f"  Prometheus     {self.prometheus.url}   try:  {POD_ACTIVITY}",
                f'{pad}ALERTS{{alertname="{IDLE_ALERT}"}}',
                f"{pad}{WASTE}",
                f"  Alertmanager   {self.alertmanager.url}",
                f"  automator      {self.automator_url}/decisions   (enforce; log: {work / 'automator.log'})",
                f"                 {self.automator_url}/dra   (the DRA check's last report)",
                f"  KEDA           {self.keda_url}",
                f"                 (bearer token in {work / 'keda-token'}; stand-in: tools/fakes/kedasim.py)",
                f"  exporters      {'  '.join(self.exporter_urls)}",
                f"  fake cluster   {self.api.url}   kubectl --kubeconfig {work / 'kubeconfig'} get pods -A",
                f"                 {self.ksm.url if self.ksm else ''}   (its kube-state-metrics series)",
                f"  dashboards     import {ROOT / 'dashboards' / 'json'}/*.json into Grafana "
                f"(data source: Prometheus {self.prometheus.url})",
            ]
        )


@dataclass
class Story:
    """The story's steps, each told once when it has happened; `failed` when something must not happen."""

    demo: Demo
    started: float = field(default_factory=time.monotonic)
    told: dict[str, float] = field(default_factory=dict)
    failed: str = ""
    waste: list[tuple[float, float]] = field(default_factory=list)
    # Alertmanager's answer when it had the alert.
    received: list[dict[str, Any]] = field(default_factory=list)
    dra_received: list[dict[str, Any]] = field(default_factory=list)
    dra_finding: dict[str, Any] = field(default_factory=dict)
    keda_told: int = 0  # KEDA polls looked at so far
    keda_answer: tuple[Any, ...] | None = None
    keda_steps: list[Poll] = field(default_factory=list)  # the polls that scaled
    outage: tuple[float, float] | None = None  # Prometheus stopped, and back (0: not yet)
    backtest: Backtest | None = None  # the closing backtest, once run

    STEPS = tuple(step for steps in STORIES.values() for step in steps)

    def _step(self, name: str) -> str | None:
        if name == "waste":
            return self._waste_stopped() if "gone" in self.told else None
        method = {"evicted": "_evicted_step"}.get(name, "_" + name.replace("-", "_"))
        step: Callable[[], str | None] = getattr(self, method)
        return step()

    @property
    def complete(self) -> bool:
        return all(step in self.told for step in self.STEPS)

    def story_complete(self, story: str) -> bool:
        return all(step in self.told for step in STORIES[story])

    def _activity(self, key: tuple[str, str]) -> float | None:
        assert self.demo.prometheus is not None
        result = self.demo.prometheus.query(f'{POD_ACTIVITY}{{namespace="{key[0]}",pod="{key[1]}"}}')
        return float(result[0]["value"][1]) if result else None

    def _evicted(self) -> list[tuple[str, str]]:
        assert self.demo.api is not None
        return [
            (c.path.split("/")[4], c.path.split("/")[6])
            for c in self.demo.api.writes()
            if c.path.endswith("/eviction")
            and c.code == 201
            and not is_dry_run(c.query, (c.body or {}).get("deleteOptions"))  # the automator's dry run first
        ]

    def _recording(self) -> str | None:
        levels = {k: self._activity(k) for k in (VICTIM, BUSY, ("inference", "api-a"))}
        if any(v is None for v in levels.values()):
            return None
        shown = ", ".join(f"{_pod(k)} {v:.2f}" for k, v in levels.items())
        return f"Prometheus records each pod's GPU activity ({POD_ACTIVITY}): {shown}"

    def _idle(self) -> str | None:
        idle, busy = self._activity(VICTIM), self._activity(BUSY)
        if idle is None or idle > IDLE_THRESHOLD:
            return None
        return f"{_pod(VICTIM)} went idle: GPU activity {idle:.2f}, holding 2 GPUs" + (
            f" ({_pod(BUSY)} next to it, same PriorityClass: {busy:.2f})" if busy is not None else ""
        )

    def _alert(self) -> str | None:
        assert self.demo.prometheus is not None
        query = f'ALERTS{{alertname="{IDLE_ALERT}",alertstate="firing",pod="{VICTIM[1]}"}}'
        if not self.demo.prometheus.query(query):
            return None
        after = self.demo.scale.idle_alert_seconds
        return f"alert {IDLE_ALERT} fires for {_pod(VICTIM)} (idle {after} s in the demo; 1 h in production)"

    def _alertmanager(self) -> str | None:
        am = self.demo.alertmanager
        assert am is not None
        alerts = am.alerts(IDLE_ALERT) if "alert" in self.told else []
        if not any(a["labels"].get("pod") == VICTIM[1] for a in alerts):
            return None
        self.received = alerts  # it resolves once the pod is gone: keep what Alertmanager showed
        return f"Alertmanager received it: {am.url}/#/alerts"

    def notice_given(self) -> dict[str, str] | None:
        """The notice annotations the automator first wrote on the victim (its merge patch, in the fake's
        request log: the pod may be gone by the time one looks)."""
        assert self.demo.api is not None
        path = f"/api/v1/namespaces/{VICTIM[0]}/pods/{VICTIM[1]}"
        for c in self.demo.api.writes():
            written = ((c.body or {}).get("metadata") or {}).get("annotations") or {}
            if c.method == "PATCH" and c.path == path and written.get(RECLAIM_NOTICE_ANNOTATION):
                return {k: str(v) for k, v in written.items()}
        return None

    def _victim_events(self, reason: str) -> list[dict[str, Any]]:
        assert self.demo.api is not None
        return [
            e
            for e in self.demo.api.objects_of("events")
            if e.get("reason") == reason and _key({"metadata": e["involvedObject"]}) == VICTIM
        ]

    def _notice(self) -> str | None:
        notice, events = self.notice_given(), self._victim_events(REASON_NOTICE)
        if notice is None or not events:
            return None  # the Event is written right after the annotations, in the same pass
        return (
            f"the automator gave {_pod(VICTIM)} notice instead of evicting it (--notice-seconds "
            f"{self.demo.notice_seconds}): {RECLAIM_NOTICE_ANNOTATION}={notice[RECLAIM_NOTICE_ANNOTATION]}, "
            f"{RECLAIM_NOTICE_FOR_ANNOTATION}={notice.get(RECLAIM_NOTICE_FOR_ANNOTATION)}\n"
            f"           Event {REASON_NOTICE} ({events[0].get('type')}): {events[0]['message']}"
        )

    def _evicted_step(self) -> str | None:
        if VICTIM not in self._evicted():
            return None
        notice = self.notice_given()
        if notice is None:
            self.failed = f"{_pod(VICTIM)} was evicted without notice"
            return None
        deadline = notice[RECLAIM_NOTICE_ANNOTATION]
        evicted, events = self.live_evictions().get(_pod(VICTIM)), self._victim_events(REASON_VICTIM)
        if evicted is None or not events or "notice" not in self.told:
            return None  # the Event is written right after the eviction, in the same pass
        if _instant(evicted) < _instant(deadline):
            self.failed = f"{_pod(VICTIM)} was evicted at {evicted}, before its notice's deadline {deadline}"
            return None
        assert self.demo.prometheus is not None
        waste = self.demo.prometheus.query(WASTE)
        spent = f"; idle GPU-seconds so far: {float(waste[0]['value'][1]):.0f}" if waste else ""
        return (
            f"the automator evicted {_pod(VICTIM)} at {evicted}, after its notice's deadline {deadline}: "
            f"a pass on fresh data still chose it (Eviction API, enforce){spent}\n"
            f"           Event {REASON_VICTIM}: {events[0]['message']}"
        )

    def _gone(self) -> str | None:
        assert self.demo.api is not None
        if "evicted" not in self.told or self.demo.api.pod(*VICTIM) is not None:
            return None
        return f"{_pod(VICTIM)} terminated after its grace period and is gone: its GPUs are free"

    def _scheduled(self) -> str | None:
        assert self.demo.api is not None
        pod = self.demo.api.pod(*PREEMPTOR)
        if pod is None or not pod["spec"].get("nodeName"):
            return None
        gpus = self.demo.devices.assigned.get(PREEMPTOR, []) if self.demo.devices else []
        where = f"{pod['spec']['nodeName']} (GPUs {', '.join(map(str, gpus))})"
        return f"the scheduler started {_pod(PREEMPTOR)} on {where}"

    def _busy(self) -> str | None:
        level = self._activity(PREEMPTOR) if "scheduled" in self.told else None
        if level is None or level <= IDLE_THRESHOLD:
            return None
        return f"{_pod(PREEMPTOR)}'s GPUs are busy: GPU activity {level:.2f}"

    def _waste_stopped(self) -> str | None:
        """The fleet's idle GPU-seconds unchanged over FLAT_EVALUATIONS rule intervals, counted from one
        interval after the victim is gone (the evaluation that still saw it)."""
        assert self.demo.prometheus is not None
        interval = self.demo.scale.rule_interval_seconds
        now = time.monotonic()
        result = self.demo.prometheus.query(WASTE)
        if not result or now - self.told["gone"] < interval:
            return None
        value = float(result[0]["value"][1])
        if self.waste and value != self.waste[-1][1]:
            self.waste.clear()
        self.waste.append((now, value))
        since = self.waste[0][0]
        if now - since < FLAT_EVALUATIONS * interval:
            return None
        return (
            f"the waste counter stopped growing: {value:.0f} idle GPU-seconds in all, unchanged for "
            f"{now - since:.0f} s ({WASTE})"
        )

    # --- KEDA ---

    def _keda_applied(self) -> str | None:
        """The stand-in starts once the endpoint has an answer, as one applies a ScaledObject after
        checking that the workload has data (docs/keda.md)."""
        demo = self.demo
        req = urllib.request.Request(demo.keda_url, headers={"Authorization": f"Bearer {demo.keda_token}"})
        try:
            with urllib.request.urlopen(req, timeout=3) as r:
                body = json.load(r)
        except urllib.error.HTTPError:
            return None  # 503 while the first readings are recorded
        so = demo.scaled_object
        assert so is not None
        demo.start_keda()
        return (
            f"KEDA stand-in (tools/fakes/kedasim.py, not KEDA): ScaledObject {so.namespace}/{so.name} "
            f"applied; its metrics-api trigger answers value {body['value']:.2f} ({body.get('unit')}) for "
            f"{body.get('pods')} pod(s); polling every {so.polling_interval:g} s "
            f"({so.metric_type}, target {so.target:g}, replicas {so.min_replicas}-{so.max_replicas}, "
            f"fallback {so.fallback_replicas} after {so.failure_threshold} failures)"
        )

    def _keda_up(self) -> str | None:
        return None  # told by _keda_polls

    _keda_fallback = _keda_down = _keda_up

    def _keda_polls(self) -> list[tuple[float, str]]:
        """The stand-in's polls since the last look that changed its answer, and the milestones they make."""
        keda, so = self.demo.keda, self.demo.scaled_object
        if keda is None or so is None:
            return []
        polls = keda.history()
        out = []
        for poll in polls[self.keda_told :]:
            if poll.current < 0:
                continue  # the API server did not answer the stand-in
            scaled = poll.replicas != poll.current
            answer = (poll.replicas, poll.error == "", poll.fallback)
            if answer == self.keda_answer and not scaled:
                continue
            self.keda_answer = answer
            out.append((poll.at, describe(so, poll)))
            if poll.fallback and self.outage is None:
                self.failed = f"KEDA: the endpoint failed {poll.failures} polls in a row with Prometheus up"
            elif poll.fallback:
                self.told.setdefault("keda-fallback", poll.at)  # held, whether or not the size changed
            if scaled:
                self.keda_steps.append(poll)
                if not poll.error and poll.replicas > poll.current:
                    self.told.setdefault("keda-up", poll.at)
                elif not poll.error and "keda-fallback" in self.told:
                    self.told.setdefault("keda-down", poll.at)  # back on the value, after the fallback
        self.keda_told = len(polls)
        return out

    def _outage(self) -> list[tuple[float, str]]:
        """Prometheus stopped on purpose once the reclaim and DRA stories are told and KEDA has scaled up,
        and started again OUTAGE_SECONDS (scaled) later."""
        now = time.monotonic()
        length = self.demo.scale.seconds(OUTAGE_SECONDS)
        if self.outage is None:
            ready = self.story_complete("reclaim") and self.story_complete("DRA") and "keda-up" in self.told
            if not ready:
                return []
            self.demo.stop_prometheus()
            self.outage = (now, 0.0)
            return [(now, f"stopping Prometheus on purpose for {length:g} s: the KEDA endpoint cannot read "
                          "fresh data and answers 503; watch the stand-in apply the ScaledObject's fallback "
                          "after failureThreshold failed polls, as KEDA would")]  # fmt: skip
        if self.outage[1] == 0.0 and now - self.outage[0] >= length:
            self.demo.restart_prometheus()
            self.outage = (self.outage[0], now)
            return [(now, "Prometheus is back: the endpoint answers again once fresh readings are recorded")]
        return []

    # --- DRA ---

    def _dra_finding(self) -> str | None:
        with urllib.request.urlopen(f"{self.demo.automator_url}/dra", timeout=10) as r:
            report = json.load(r)
        found = [f for f in report.get("findings") or [] if f.get("kind") == USAGE_OVER_CLAIM]
        if not found:
            return None
        f = self.dra_finding = found[0]
        amounts = _AMOUNTS.search(f["message"])
        measured = (amounts.group(2) or amounts.group(1)) if amounts else "?"
        promised = (amounts.group(4) or amounts.group(3)) if amounts else "?"
        f["measured"], f["promised"] = measured, promised
        return (
            f"the DRA check found a broken promise ({f['kind']}, {f['severity']}): pod {f['pod']} on node "
            f"{f['node']}, device {f['device']}, claim {f['claim']}: {measured} of GPU memory measured, "
            f"{promised} promised ({self.demo.automator_url}/dra)"
        )

    def _dra_event(self) -> str | None:
        assert self.demo.api is not None
        events = [
            e
            for e in self.demo.api.objects_of("events")
            if e.get("reason") == DRA_REASON and e["involvedObject"].get("kind") == "ResourceClaim"
        ]
        if not events:
            return None
        e = events[0]
        obj = e["involvedObject"]
        claim = f"{obj['namespace']}/{obj['name']}"
        return f"Event {DRA_REASON} ({e.get('type')}) on ResourceClaim {claim}: {e['message']}"

    def _dra_alert(self) -> str | None:
        assert self.demo.prometheus is not None
        if not self.demo.prometheus.query(f'ALERTS{{alertname="{DRA_ALERT}",alertstate="firing"}}'):
            return None
        production = demorules.alert_for(ROOT, DRA_ALERT)
        return (
            f'alert {DRA_ALERT} fires ({FINDINGS_METRIC}{{kind="{USAGE_OVER_CLAIM}"}} > 0 for '
            f"{self.demo.scale.dra_alert_seconds} s in the demo; {production} in production)"
        )

    def _dra_alertmanager(self) -> str | None:
        am = self.demo.alertmanager
        assert am is not None
        alerts = am.alerts(DRA_ALERT) if "dra-alert" in self.told else []
        if not alerts:
            return None
        self.dra_received = alerts
        severity = alerts[0]["labels"].get("severity")
        return f"Alertmanager received {DRA_ALERT} (severity {severity}): {am.url}/#/alerts"

    # --- Kueue ---

    def _workload(self, key: tuple[str, str]) -> dict[str, Any] | None:
        assert self.demo.api is not None
        return next(
            (
                w
                for w in self.demo.api.objects_of("workloads")
                if (w["metadata"].get("namespace"), w["metadata"]["name"]) == key
            ),
            None,
        )

    def _kueue_idle(self) -> str | None:
        idle, waiting = self._activity(NOTEBOOK_POD), self._workload(FINETUNE)
        if idle is None or idle > IDLE_THRESHOLD or waiting is None:
            return None
        return (
            f"Kueue: {_pod(FINETUNE)} (priority {waiting['spec']['priority']}) waits for 2 GPUs of "
            f"ClusterQueue demo-cq's quota, held by {_pod(NOTEBOOK)}, whose pod's GPU activity is {idle:.2f}"
        )

    def _kueue_deactivated(self) -> str | None:
        assert self.demo.api is not None
        notebook = self._workload(NOTEBOOK)
        if notebook is None or notebook["spec"].get("active") is not False:
            return None
        events = [
            e["message"]
            for e in self.demo.api.objects_of("events")
            if e.get("reason") == KUEUE_REASON_DEACTIVATED and e["involvedObject"].get("kind") == "Workload"
        ]
        if not events:
            return None  # written right after the patch, in the same pass
        return (
            f"the automator (--kueue {KUEUE_MODE}) set {_pod(NOTEBOOK)}'s spec.active to false\n"
            f"           Event {KUEUE_REASON_DEACTIVATED}: {events[0]}"
        )

    def _kueue_admitted(self) -> str | None:
        assert self.demo.api is not None
        finetune = self._workload(FINETUNE)
        conditions = {
            c["type"]: c["status"] for c in ((finetune or {}).get("status") or {}).get("conditions") or []
        }
        pod = self.demo.api.pod(FINETUNE[0], f"{FINETUNE[1]}-main-0")
        if conditions.get("Admitted") != "True" or pod is None or not pod["spec"].get("nodeName"):
            return None
        gpus = self.demo.kueue_devices.assigned.get(_key(pod), []) if self.demo.kueue_devices else []
        return (
            f"Kueue (stand-in, tools/fakes/kueuesim.py) stopped {_pod(NOTEBOOK)}'s job, released its quota "
            f"and admitted {_pod(FINETUNE)}: its pod runs on {pod['spec']['nodeName']} (GPUs "
            f"{', '.join(map(str, gpus))})"
        )

    def poll(self) -> list[str]:
        """What happened since the last poll, as timeline lines."""
        lines: list[tuple[float, str]] = []
        for key in NEVER_EVICTED:
            if key in self._evicted():
                self.failed = f"{_pod(key)} was evicted: it must never be"
        for name in self.STEPS:
            if name in self.told:
                continue
            try:
                message = self._step(name)
            except (OSError, urllib.error.URLError, json.JSONDecodeError, KeyError, IndexError):
                message = None  # a part still starting (or Prometheus stopped): ask again next time
            if message is not None:
                self.told[name] = time.monotonic()
                lines.append((self.told[name], message))
        lines += self._keda_polls()
        lines += self._outage()
        return [f"[{at - self.started:3.0f} s] {message}" for at, message in sorted(lines)]

    def live_evictions(self) -> dict[str, str]:
        """What the live automator evicted, and when (its Events on the victims): "ns/name" -> RFC 3339."""
        assert self.demo.api is not None
        return {
            f"{e['involvedObject']['namespace']}/{e['involvedObject']['name']}": rfc3339(
                _instant(str(e["firstTimestamp"]))
            )
            for e in self.demo.api.objects_of("events")
            if e.get("reason") == REASON_VICTIM and e["involvedObject"].get("kind", "Pod") == "Pod"
        }

    def missing(self) -> list[str]:
        """The stories not complete, each with its missing steps: `KEDA (keda-fallback)`."""
        return [
            f"{story} ({', '.join(s for s in steps if s not in self.told)})"
            for story, steps in STORIES.items()
            if not self.story_complete(story)
        ]

    def summary(self) -> str:
        """What each job did, and where to look."""
        demo = self.demo
        assert demo.prometheus is not None and demo.alertmanager is not None
        prom, am = demo.prometheus.url, demo.alertmanager.url
        waste = self.waste[-1][1] if self.waste else None
        gpus = demo.devices.assigned.get(PREEMPTOR, []) if demo.devices else []
        steps = [str(self.keda_steps[0].current)] if self.keda_steps else []
        steps += [f"{p.replicas}" + (" (fallback)" if p.fallback else "") for p in self.keda_steps]
        f = self.dra_finding
        q = urllib.parse.quote
        return "\n".join(
            [
                "What each job did, and where to look:",
                f"  reclaim    gave {_pod(VICTIM)} (idle, holding 2 GPUs) {demo.notice_seconds} s of notice, "
                f"then evicted it for {_pod(PREEMPTOR)}, "
                f"now busy on GPUs {', '.join(map(str, gpus))}"
                + (f"; {waste:.0f} idle GPU-seconds in all" if waste is not None else ""),
                f"             {demo.automator_url}/decisions   {prom}/graph?g0.expr={q(WASTE)}",
                f"             {prom}/graph?g0.expr={q(POD_ACTIVITY)}",
                "  KEDA       (stand-in) scaled inference/api on its own GPU utilization, replicas "
                f"{' -> '.join(steps) or 'unchanged'}; the fallback held while Prometheus was stopped",
                f"             {demo.keda_url}   (Authorization: Bearer <{demo.workdir / 'keda-token'}>)",
                f"             {prom}/graph?g0.expr={q('gpu_steward_automator_keda_requests_total')}",
                f"  DRA        {f.get('pod', '?')} uses {f.get('measured', '?')} of GPU memory on "
                f"{f.get('device', '?')}, its claim {f.get('claim', '?')} promised {f.get('promised', '?')}: "
                f"Event {DRA_REASON} on the claim, alert {DRA_ALERT} in Alertmanager",
                f"             {demo.automator_url}/dra   {am}/#/alerts   "
                f"{prom}/graph?g0.expr={q(FINDINGS_METRIC)}",
                f"  Kueue      deactivated {_pod(NOTEBOOK)} (idle, holding 2 GPUs of ClusterQueue demo-cq's "
                f"quota); Kueue (stand-in) released the quota and admitted {_pod(FINETUNE)}",
                f"             {demo.automator_url}/decisions (kueue)   "
                f"kubectl --kubeconfig {demo.workdir / 'kubeconfig'} get workloads -A",
                f"  dashboards import {ROOT / 'dashboards' / 'json'}/*.json into Grafana "
                f"(data source: Prometheus {prom}; docs/dashboards.md)",
            ]
        )


def run_story(
    demo: Demo,
    timeout: float | None,
    stop_when_complete: bool,
    stopping: Callable[[], bool] = lambda: False,
    story: Story | None = None,
) -> int:
    """Narrate until complete (or forever); 0, or 1 on a failure, a part exiting, or the timeout."""
    story = story or Story(demo)
    poll = max(0.5, min(2.0, demo.scale.rule_interval_seconds / 3))
    summarized = False
    while not stopping():
        for line in story.poll():
            print(line, flush=True)
        if stopping():  # Ctrl-C reaches the parts too: their exit is no failure
            break
        if story.failed or (why := demo.exited()):
            print(f"demo: FAILED: {story.failed or why}", flush=True)
            return 1
        if story.complete and not summarized:
            print(story.summary(), flush=True)
            summarized = True
            took = time.monotonic() - story.started
            story.backtest = demo.backtest()
            if stopping():
                break
            print(story.backtest.lines(story.live_evictions()), flush=True)
            if story.backtest.failed:
                print(f"demo: FAILED: the backtest: {story.backtest.failed}", flush=True)
                return 1
            if stop_when_complete:
                print(f"demo: all four stories are complete ({took:.0f} s)", flush=True)
                return 0
        if timeout is not None and time.monotonic() - story.started > timeout:
            if story.complete:
                return 0
            print(
                f"demo: not complete after {timeout:.0f} s; missing: {'; '.join(story.missing())}", flush=True
            )
            return 1
        time.sleep(poll)
    # Interrupted: fine for `make demo`; `make demo-fast` promised a complete story.
    return 0 if story.complete or not stop_when_complete else 130


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="GPU Steward's closed-loop demo (docs/demo.md)")
    parser.add_argument("--fast", action="store_true", help="time / 10; exit when the story is complete")
    args = parser.parse_args(argv)
    scale = FAST if args.fast else NORMAL
    ports = Ports() if args.fast else Ports.from_env()
    stopping = False

    def on_signal(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    demo = Demo(ROOT / (".demo-fast" if args.fast else ".demo"), scale, ports)
    try:
        try:
            demo.start()
        except (OSError, RuntimeError, TimeoutError, AssertionError) as e:
            print(
                f"demo: could not start: {e} (ports in use? set the DEMO_*_PORT variables)", file=sys.stderr
            )
            return 1
        print(
            f"GPU Steward demo{' (time / 10)' if args.fast else ''}: a fake cluster, the mock exporters, "
            "Prometheus, Alertmanager, the automator in enforce mode and a stand-in for KEDA.\n"
            + demo.where_to_look()
            + ("" if args.fast else "\n  Ctrl-C stops everything.")
            + "\n",
            flush=True,
        )
        duration = float(os.environ.get("DEMO_DURATION", "0")) or None
        timeout = float(os.environ.get("DEMO_TIMEOUT", "180")) if args.fast else duration
        return run_story(demo, timeout, stop_when_complete=args.fast, stopping=lambda: stopping)
    finally:
        demo.stop()
        print("demo stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
