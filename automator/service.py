"""`gpu-automator run`: the reclaim loop as a service.

An apscheduler job runs one pass every --interval seconds (never two at once); a Flask app serves
/healthz, /readyz, /metrics and /decisions. With leader election (the client's LeaseLock) only the replica
holding the lease runs passes; the others stay ready as standbys.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from flask import Flask, Response, jsonify
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from werkzeug.serving import make_server

from automator.actuator import ActuatorState, PassResult, run_pass
from automator.conventions import COMPONENT
from automator.dra.job import DraCheckJob, DraCluster, SnapshotDraCluster
from automator.kube import DraKubernetesAdapter, KubernetesAdapter, LeaderElector, api_client
from automator.metrics import AutomatorMetrics
from automator.model import ClusterState, Mode, PlannerConfig, PodKey
from automator.ports import EvictionResult, KubeAdapter, KubernetesUnavailable, UsageSource
from automator.prom import DraMemoryReader, PrometheusAdapter
from automator.settings import ServiceSettings, SettingError, service_settings
from automator.snapshot import InputError, load_cluster

log = logging.getLogger(__name__)

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# A pass older than this many intervals makes a leader unready.
STALE_INTERVALS = 3


class SnapshotKube:
    """The cluster from a file, re-read every pass; writing is impossible (dry-run only)."""

    def __init__(self, path: Path, gpu_resources: tuple[str, ...]) -> None:
        self.path, self.gpu_resources = path, gpu_resources

    def snapshot(self) -> ClusterState:
        try:
            return load_cluster(self.path, self.gpu_resources)
        except (InputError, OSError) as e:
            raise KubernetesUnavailable(f"snapshot {self.path}: {e}") from e

    def evict(self, pod: PodKey) -> EvictionResult:
        raise RuntimeError(f"snapshot mode is dry-run only: refusing to evict {pod}")

    def annotate_preemptor(self, pod: PodKey, when: datetime) -> None:
        raise RuntimeError(f"snapshot mode is dry-run only: refusing to patch {pod}")

    def event(self, pod: PodKey, type_: str, reason: str, message: str, uid: str | None = None) -> None:
        raise RuntimeError(f"snapshot mode is dry-run only: refusing to write an Event on {pod}")


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Service:
    kube: KubeAdapter
    prom: UsageSource
    config: PlannerConfig
    mode: Mode
    interval: float
    metrics: AutomatorMetrics
    is_leader: Callable[[], bool] = lambda: True
    max_replans: int = 5
    clock: Callable[[], datetime] = _now
    state: ActuatorState = field(default_factory=ActuatorState)
    last: PassResult | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run_once(self) -> PassResult | None:
        """One pass if this replica leads; None otherwise (a standby runs nothing)."""
        leader = self.is_leader()
        self.metrics.is_leader.set(1 if leader else 0)
        if not leader:
            return None
        result = run_pass(
            self.kube,
            self.prom,
            self.config,
            self.mode,
            self.clock(),
            state=self.state,
            metrics=self.metrics,
            should_continue=self.is_leader,
            max_replans=self.max_replans,
        )
        with self._lock:
            self.last = result
        return result

    def readiness(self) -> tuple[bool, str]:
        if not self.is_leader():
            return True, "standby: not the leader, running no passes"
        with self._lock:
            last = self.last
        if last is None:
            return False, "no pass yet"
        if not last.ok:
            return False, f"last pass failed ({last.result}): {last.reason}"
        age = (self.clock() - last.at).total_seconds()
        if age > STALE_INTERVALS * self.interval:
            return False, f"last pass is {age:.0f} s old (interval {self.interval:g} s)"
        return True, f"ok: last pass {age:.0f} s ago"

    def decisions(self) -> dict[str, Any]:
        with self._lock:
            last = self.last
        if last is None:
            body: dict[str, Any] = {
                "decisions": [],
                "unresolved": [],
                "mode": str(self.mode),
                "timestamp": None,
                "result": "no pass yet",
                "acted": False,
            }
        else:
            body = last.to_json()
        body["leader"] = self.is_leader()
        return body


def create_app(service: Service) -> Flask:
    app = Flask("gpu-steward-automator")

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        ready, why = service.readiness()
        return Response(why + "\n", status=200 if ready else 503, mimetype="text/plain")

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(
            generate_latest(service.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    @app.get("/decisions")
    def decisions() -> Response:
        return jsonify(service.decisions())

    return app


def _package_version() -> str:
    try:
        return version("gpu-steward")
    except PackageNotFoundError:
        return "unknown"


def _lease_namespace(settings: ServiceSettings) -> str:
    if settings.lease_namespace:
        return settings.lease_namespace
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return NAMESPACE_FILE.read_text().strip()
    except OSError:
        return "default"


@dataclass
class Wiring:
    service: Service
    app: Flask
    elector: LeaderElector | None = None  # when leader election is on
    dra: DraCheckJob | None = None  # the DRA check, unless --dra-check-interval 0


def add_dra_route(app: Flask, job: DraCheckJob) -> None:
    """/dra: the last DRA check as `gpu-automator dra-check --output json` shows it, with its status."""

    @app.get("/dra")
    def dra() -> Response:
        status, body = job.report_json()
        response = jsonify(body)
        response.status_code = status
        return response


def build(settings: ServiceSettings, registry: CollectorRegistry | None = None) -> Wiring:
    """Adapters, metrics, service and app from the settings (no thread started)."""
    config = settings.planner
    mode = settings.mode
    metrics = AutomatorMetrics(registry or CollectorRegistry(), version=_package_version(), mode=str(mode))
    prom = PrometheusAdapter(
        settings.prometheus_url,
        timeout=settings.prometheus_timeout,
        rule_interval=settings.rule_interval,
        observe_query=metrics.query_duration.observe,
    )
    elector: LeaderElector | None = None
    kube: KubeAdapter
    if settings.cluster_snapshot:
        kube = SnapshotKube(Path(settings.cluster_snapshot), config.gpu_resources)
    else:
        identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        api = api_client(settings.kubeconfig)
        timeout = max(30.0, settings.prometheus_timeout)
        kube = KubernetesAdapter(api, identity=identity, request_timeout=timeout)
        if settings.leader_election is not False:
            elector = LeaderElector(
                api,
                settings.lease_name,
                _lease_namespace(settings),
                identity,
                on_change=lambda leading: metrics.is_leader.set(1 if leading else 0),
            )
    dra_cluster: DraCluster | None = None
    if settings.cluster_snapshot:
        dra_cluster = SnapshotDraCluster(Path(settings.cluster_snapshot))
    elif isinstance(kube, KubernetesAdapter):
        dra_cluster = DraKubernetesAdapter(kube)
    service = Service(
        kube=kube,
        prom=prom,
        config=config,
        mode=mode,
        interval=settings.interval,
        metrics=metrics,
        is_leader=(lambda: elector.is_leader) if elector is not None else (lambda: True),
        max_replans=settings.max_replans,
    )
    wiring = Wiring(service, create_app(service), elector)
    if settings.dra_check_interval > 0 and dra_cluster is not None:
        wiring.dra = DraCheckJob(
            dra_cluster,
            DraMemoryReader(prom),
            settings.dra_check_interval,
            metrics.registry,
            is_leader=service.is_leader,
            write_events=not settings.cluster_snapshot,
            instance=kube.identity if isinstance(kube, KubernetesAdapter) else COMPONENT,
        )
        add_dra_route(wiring.app, wiring.dra)
    return wiring


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT. Exit 2 on a bad flag or variable (the message names it)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per probe and scrape would drown the decisions.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    # apscheduler logs two INFO lines per pass; the pass logs its own outcome.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    try:
        settings = service_settings(args)
    except SettingError as e:
        print(f"gpu-automator run: {e}", file=sys.stderr)
        return 2
    if settings.cluster_snapshot and settings.leader_election:
        log.warning("--leader-election is ignored with --cluster-snapshot")
    return _serve(settings)


def _serve(settings: ServiceSettings) -> int:
    wiring = build(settings)
    service = wiring.service
    log.info(
        "starting: mode=%s interval=%gs prometheus=%s leader_election=%s",
        service.mode,
        service.interval,
        settings.prometheus_url,
        wiring.elector is not None,
    )
    if wiring.elector is not None:
        wiring.elector.start()
    scheduler = BackgroundScheduler(timezone=UTC)
    scheduler.add_job(
        service.run_once,
        "interval",
        seconds=service.interval,
        next_run_time=datetime.now(UTC),
        max_instances=1,
        coalesce=True,
        misfire_grace_time=max(1, int(service.interval)),
        id="reclaim-pass",
    )
    if wiring.dra is not None:
        scheduler.add_job(
            wiring.dra.run_once,
            "interval",
            seconds=wiring.dra.interval,
            next_run_time=datetime.now(UTC),
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(wiring.dra.interval)),
            id="dra-check",
        )
    scheduler.start()
    server = make_server(settings.listen_address, settings.port, wiring.app, threaded=True)

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        # shutdown() waits for serve_forever(), which runs in this (the main) thread: call it from another.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever()
    finally:
        if wiring.elector is not None:
            wiring.elector.stop(timeout=5)
        scheduler.shutdown(wait=True)
    return 0
