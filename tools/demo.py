"""`make demo` and `make demo-fast`: the closed loop on one machine, no cluster (docs/demo.md).

Starts the fake Kubernetes API server with its simulated kubelet, scheduler and GPUs (tools/fakekube.py,
tools/fakesim.py) holding deploy/demo/cluster.yaml, the mock exporter following the fake's GPUs, a real
Prometheus with the recording rules and alerts, Alertmanager receiving the alerts, and `gpu-automator run`
in enforce mode reaching the fake through a kubeconfig and its real Kubernetes adapter. It then narrates
the story as it happens (Story) and says where to look.

`--fast` divides the story's durations by 10 (tools/demorules.py) and exits when the story is complete:
0, or 1 when it fails or has not completed within DEMO_TIMEOUT seconds (180).
Environment: DEMO_API_PORT (16443), DEMO_EXPORTER_PORT (31995), DEMO_PROMETHEUS_PORT (19090),
DEMO_ALERTMANAGER_PORT (19093), DEMO_AUTOMATOR_PORT (18080) for `make demo` (`--fast` takes free ports),
DEMO_DURATION (seconds; `make demo` runs until Ctrl-C without it).
"""

from __future__ import annotations

import argparse
import json
import os
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
from pathlib import Path
from typing import Any

import yaml

from automator.settings import ALL_SETTINGS
from steward_common.conventions import REASON_VICTIM
from steward_common.series import IDLE_THRESHOLD, NAMESPACE_IDLE_GPU_SECONDS_TOTAL, POD_ACTIVITY
from tools import demorules
from tools.demorules import IDLE_ALERT, TimeScale
from tools.fakekube import FakeApiServer
from tools.fakesim import GpuDevices
from tools.kubeapi import is_dry_run, load_objects
from tools.promserver import (
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

NORMAL = TimeScale(factor=1, idle_alert_seconds=60)
FAST = TimeScale(factor=10, idle_alert_seconds=6)
DEMO = ROOT / "deploy" / "demo"
NODE = "demo-gpu-node-1"
VICTIM, BUSY, PREEMPTOR = ("research", "batch-idle"), ("ml-team", "train-busy"), ("ml-team", "train-urgent")
NEVER_EVICTED = (BUSY, ("inference", "api-a"))
WASTE = f"sum({NAMESPACE_IDLE_GPU_SECONDS_TOTAL})"
# Automator windows the story must fit in, passed when the automator has the flag (issue 7 adds the
# recent-activity window, 300 s by default: longer than the whole demo).
OPTIONAL_WINDOWS = {"--recent-window": 120}
FLAT_EVALUATIONS = 2  # the waste total unchanged over this many more rule evaluations counts as stopped


@dataclass(frozen=True)
class Ports:
    api: int = 0
    exporter: int = 0
    prometheus: int = 0
    alertmanager: int = 0
    automator: int = 0

    @classmethod
    def from_env(cls) -> Ports:
        env = os.environ
        return cls(
            int(env.get("DEMO_API_PORT", "16443")),
            int(env.get("DEMO_EXPORTER_PORT", "31995")),
            int(env.get("DEMO_PROMETHEUS_PORT", "19090")),
            int(env.get("DEMO_ALERTMANAGER_PORT", "19093")),
            int(env.get("DEMO_AUTOMATOR_PORT", "18080")),
        )

    def resolved(self) -> Ports:
        return Ports(*(p or free_port() for p in (self.api, self.exporter, self.prometheus,
                                                  self.alertmanager, self.automator)))  # fmt: skip


def _pod(key: tuple[str, str]) -> str:
    return "/".join(key)


@dataclass
class Demo:
    """Every part of the demo, started in order; stop() ends them all."""

    workdir: Path
    scale: TimeScale = NORMAL
    ports: Ports = field(default_factory=Ports)
    api: FakeApiServer | None = None
    devices: GpuDevices | None = None
    prometheus: Prometheus | None = None
    alertmanager: Alertmanager | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    automator_url: str = ""

    @property
    def keda_url(self) -> str:
        """The KEDA metrics-api URL of the demo's Deployment inference/api (docs/keda.md)."""
        query = "namespace=inference&deployment=api&profile=triton-inference"
        return f"{self.automator_url}/keda/v1/metrics?{query}"

    exporter_url: str = ""

    def _prepare(self) -> tuple[list[dict[str, Any]], list[Path]]:
        """The (time-scaled) cluster, scenario, rules and alerts under workdir."""
        shutil.rmtree(self.workdir, ignore_errors=True)  # fresh TSDB: the story starts at t=0
        self.workdir.mkdir(parents=True)
        scenario = yaml.safe_load((DEMO / "scenario.yaml").read_text())
        base = self.workdir / "scenario.base.yaml"
        base.write_text(yaml.safe_dump(demorules.scale_scenario(scenario, self.scale), sort_keys=False))
        self.devices = GpuDevices.from_file(base, self.workdir / "scenario.yaml")
        rules = demorules.write_rule_files(ROOT, self.workdir / "rules", self.scale)
        return demorules.scale_cluster(load_objects(DEMO / "cluster.yaml"), self.scale), rules

    def start(self) -> Demo:
        """Everything but the GPUs first; the exporter last, so the scenario's clock starts with the story."""
        objects, rules = self._prepare()
        ports = self.ports.resolved()
        self.api = FakeApiServer(
            objects, simulate=True, devices=self.devices, tick=0.2, port=ports.api
        ).start()
        kubeconfig = self.api.kubeconfig(self.workdir / "kubeconfig")
        fast = self.scale.factor > 1
        self.alertmanager = start_alertmanager(self.workdir / "alertmanager", ports.alertmanager)
        scrape = "1s" if fast else "5s"
        self.prometheus = start_prometheus(
            self.workdir / "prometheus",
            {
                "gpu-steward-exporter": [f"127.0.0.1:{ports.exporter}"],
                "gpu-steward-automator": [f"127.0.0.1:{ports.automator}"],
            },
            rule_files=rules,
            scrape_interval=scrape,
            evaluation_interval=scrape,
            port=ports.prometheus,
            alertmanagers=[f"127.0.0.1:{ports.alertmanager}"],
        )
        self._start_automator(kubeconfig, ports.automator)
        self.procs.append(
            start_mock_exporter(
                self.workdir / "scenario.yaml",
                ports.exporter,
                self.workdir / "exporter.log",
                *("--interval", "1" if fast else "5", "--scenario-reload", "--compat", "dcgm"),
            )
        )
        self.exporter_url = f"http://127.0.0.1:{ports.exporter}/metrics"
        return self

    def _start_automator(self, kubeconfig: Path, port: int) -> None:
        assert self.prometheus is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_STEWARD_") and k != "KUBECONFIG"}
        env["POD_NAME"] = "gpu-automator-demo"
        cmd = [
            sys.executable, "-m", "automator", "run",
            "--mode", "enforce",
            "--kubeconfig", str(kubeconfig),
            "--lease-namespace", "gpu-steward",
            "--prometheus-url", self.prometheus.url,
            "--interval", f"{max(1.0, self.scale.seconds(20)):g}",
            "--rule-interval", f"{self.scale.rule_interval_seconds:g}",
            "--listen-address", "127.0.0.1",
            "--port", str(port),
        ]  # fmt: skip
        flags = {s.flag for s in ALL_SETTINGS}
        for flag, seconds in OPTIONAL_WINDOWS.items():  # windows of automator versions that have them
            if flag in flags:
                cmd += [flag, f"{max(1, round(self.scale.seconds(seconds)))}"]
        log = (self.workdir / "automator.log").open("wb")
        self.procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        self.automator_url = f"http://127.0.0.1:{port}"
        wait_http(f"{self.automator_url}/healthz")

    def exited(self) -> str | None:
        """The first part that stopped on its own, if any."""
        for p in self.procs:
            if p.poll() is not None:
                return f"{' '.join(str(a) for a in p.args[1:4])} exited with {p.returncode}"  # type: ignore[index]
        return None

    def stop(self) -> None:
        for p in self.procs:
            stop(p)
        for part in (self.prometheus, self.alertmanager, self.api):
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
                f"  KEDA           {self.keda_url}",
                f"  exporter       {self.exporter_url}   (follows {work / 'scenario.yaml'})",
                f"  fake cluster   {self.api.url}   kubectl --kubeconfig {work / 'kubeconfig'} get pods -A",
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

    STEPS = ("recording", "idle", "alert", "alertmanager", "evicted", "gone", "scheduled", "busy", "waste")

    def _step(self, name: str) -> str | None:
        if name == "waste":
            return self._waste_stopped() if "gone" in self.told else None
        step: Callable[[], str | None] = getattr(self, f"_{name}" if name != "evicted" else "_evicted_step")
        return step()

    @property
    def complete(self) -> bool:
        return all(step in self.told for step in self.STEPS)

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

    def _evicted_step(self) -> str | None:
        api, prom = self.demo.api, self.demo.prometheus
        assert api is not None and prom is not None
        if VICTIM not in self._evicted():
            return None
        events = [e["message"] for e in api.objects_of("events") if e.get("reason") == REASON_VICTIM]
        if not events:
            return None  # written right after the eviction, in the same pass
        waste = prom.query(WASTE)
        spent = f"; idle GPU-seconds so far: {float(waste[0]['value'][1]):.0f}" if waste else ""
        return (
            f"the automator evicted {_pod(VICTIM)} (Eviction API, enforce){spent}\n"
            f"           Event {REASON_VICTIM}: {events[0]}"
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

    def poll(self) -> list[str]:
        """What happened since the last poll, as timeline lines."""
        lines = []
        for key in NEVER_EVICTED:
            if key in self._evicted():
                self.failed = f"{_pod(key)} was evicted: it must never be"
        for name in self.STEPS:
            if name in self.told:
                continue
            try:
                message = self._step(name)
            except (OSError, urllib.error.URLError, json.JSONDecodeError, KeyError, IndexError):
                message = None  # a part still starting: ask again next time
            if message is not None:
                self.told[name] = time.monotonic()
                lines.append(f"[{self.told[name] - self.started:5.0f} s] {message}")
        return lines

    def missing(self) -> list[str]:
        return [s for s in self.STEPS if s not in self.told]


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
    while not stopping():
        for line in story.poll():
            print(line, flush=True)
        if stopping():  # Ctrl-C reaches the parts too: their exit is no failure
            break
        if story.failed or (why := demo.exited()):
            print(f"demo: FAILED: {story.failed or why}", flush=True)
            return 1
        if story.complete and stop_when_complete:
            print(f"demo: the story is complete ({time.monotonic() - story.started:.0f} s)", flush=True)
            return 0
        if timeout is not None and time.monotonic() - story.started > timeout:
            if story.complete:
                return 0
            print(
                f"demo: not complete after {timeout:.0f} s; missing: {', '.join(story.missing())}", flush=True
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
            f"GPU Steward demo{' (time / 10)' if args.fast else ''}: a fake cluster, the mock exporter, "
            "Prometheus, Alertmanager and the automator in enforce mode.\n"
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
