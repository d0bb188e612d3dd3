"""`gpu-automator run`: the reclaim loop as a service.

An apscheduler job runs one pass every --interval seconds (never two at once); a Flask app, served by
waitress (a bounded thread pool, backlog and timeouts), answers /healthz, /readyz, /metrics and /decisions
(which can be turned off or require a bearer token). With leader election (a Lease, kube.LeaderElector)
only the replica holding the lease runs passes and writes; the others stay ready as standbys.

Extending it: a Blueprint goes into `create_app(service, blueprints=...)` (or `Wiring.app.register_blueprint`
in `build`), a periodic job into `Wiring.jobs` (`Job(id, func, seconds)`) in `build`; `_serve` schedules
every job of the wiring.
"""

from __future__ import annotations

import argparse
import hmac
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from flask import Blueprint, Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from waitress.server import create_server

from automator.actuator import ActuatorState, PassResult, run_pass
from automator.conventions import COMPONENT
from automator.dra.job import DraCheckJob, DraCluster, SnapshotDraCluster
from automator.keda import wiring as keda
from automator.kube import DraKubernetesAdapter, KubernetesAdapter, LeaderElector, api_client
from automator.metrics import AutomatorMetrics
from automator.model import ClusterState, JsonObj, Mode, PlannerConfig, PodKey
from automator.ports import EvictionResult, KubeAdapter, KubernetesUnavailable, UsageSource
from automator.prom import DraMemoryReader, PrometheusAdapter
from automator.settings import ServiceSettings, SettingError, service_settings
from automator.snapshot import InputError, load_cluster

log = logging.getLogger(__name__)

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# A pass older than this many intervals makes a leader unready.
STALE_INTERVALS = 3
# waitress: pending connections and seconds an idle or slow connection is kept.
HTTP_BACKLOG = 64
HTTP_CHANNEL_TIMEOUT = 30
HTTP_CONNECTION_LIMIT = 100


class SnapshotKube:
    """The cluster from a file, re-read every pass; writing is impossible (dry-run only)."""

    def __init__(self, path: Path, gpu_resources: tuple[str, ...]) -> None:
        self.path, self.gpu_resources = path, gpu_resources

    def snapshot(self) -> ClusterState:
        try:
            return load_cluster(self.path, self.gpu_resources)
        except (InputError, OSError) as e:
            raise KubernetesUnavailable(f"snapshot {self.path}: {e}") from e

    def get_pod(self, pod: PodKey) -> JsonObj | None:
        return next((p for p in self.snapshot().pods if PodKey.of(p) == pod), None)

    def evict(self, pod: PodKey, uid: str | None = None, dry_run: bool = False) -> EvictionResult:
        raise RuntimeError(f"snapshot mode is dry-run only: refusing to evict {pod}")

    def annotate_preemptor(self, pod: PodKey, annotations: Mapping[str, str], uid: str | None = None) -> None:
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
    max_evictions_per_hour: int | None = None
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
            max_evictions_per_hour=self.max_evictions_per_hour,
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


@dataclass(frozen=True)
class Job:
    """A periodic job of the service (the reclaim pass is one; other features add theirs)."""

    id: str
    func: Callable[[], object]
    seconds: float


@dataclass(frozen=True)
class DecisionsAccess:
    """/decisions: served or not, and the bearer token it then requires (None: none)."""

    enabled: bool = True
    token: str | None = None

    def check(self, header: str | None) -> int | None:
        """None when allowed, else the HTTP status to answer."""
        if not self.enabled:
            return 404
        if self.token is None:
            return None
        given = (header or "").removeprefix("Bearer ").strip()
        return None if given and hmac.compare_digest(given, self.token) else 401


def create_app(
    service: Service, access: DecisionsAccess | None = None, blueprints: Iterable[Blueprint] = ()
) -> Flask:
    app = Flask("gpu-steward-automator")
    access = access or DecisionsAccess()
    for blueprint in blueprints:
        app.register_blueprint(blueprint)

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
        denied = access.check(request.headers.get("Authorization"))
        if denied is not None:
            return _refusal(denied)
        return jsonify(service.decisions())

    return app


def _refusal(status: int) -> Response:
    text = "not found\n" if status == 404 else "a bearer token is required\n"
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    return Response(text, status=status, mimetype="text/plain", headers=headers)


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
    jobs: list[Job] = field(default_factory=list)  # scheduled by _serve, the reclaim pass first
    dra: DraCheckJob | None = None  # the DRA check, unless --dra-check-interval 0


def _decisions_access(settings: ServiceSettings) -> DecisionsAccess:
    token: str | None = None
    if settings.decisions_token_file:
        try:
            token = Path(settings.decisions_token_file).read_text().strip()
        except OSError as e:
            raise SettingError(
                f"--decisions-token-file: cannot read {settings.decisions_token_file}: {e}"
            ) from e
        if not token:
            raise SettingError(f"--decisions-token-file: {settings.decisions_token_file} is empty")
    return DecisionsAccess(settings.decisions_endpoint, token)


def add_dra_route(app: Flask, job: DraCheckJob, access: DecisionsAccess | None = None) -> None:
    """/dra: the last DRA check as `gpu-automator dra-check --output json` shows it, with its status. It
    names every tenant's claims: with --decisions-token-file it asks for the same bearer token."""
    token_only = DecisionsAccess(True, access.token if access is not None else None)

    @app.get("/dra")
    def dra() -> Response:
        denied = token_only.check(request.headers.get("Authorization"))
        if denied is not None:
            return _refusal(denied)
        status, body = job.report_json()
        response = jsonify(body)
        response.status_code = status
        return response


def build(settings: ServiceSettings, registry: CollectorRegistry | None = None) -> Wiring:
    """Adapters, metrics, service and app from the settings (no thread started)."""
    config = settings.planner
    mode = settings.mode
    access = _decisions_access(settings)
    metrics = AutomatorMetrics(registry or CollectorRegistry(), version=_package_version(), mode=str(mode))
    metrics.interval.set(settings.interval)
    metrics.max_evictions_per_hour.set(settings.max_evictions_per_hour)
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
        kube = KubernetesAdapter(
            api, identity=identity, request_timeout=settings.api_timeout, gpu_resources=config.gpu_resources
        )
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
        max_evictions_per_hour=settings.max_evictions_per_hour,
    )
    app = create_app(service, access)
    keda.attach(app, settings, metrics.registry, prom.keda_query)  # docs/keda.md
    jobs = [Job("reclaim-pass", service.run_once, service.interval)]
    wiring = Wiring(service, app, elector, jobs)
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
        add_dra_route(wiring.app, wiring.dra, access)
        wiring.jobs.append(Job("dra-check", wiring.dra.run_once, wiring.dra.interval))
    return wiring


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT. Exit 2 on a bad flag or variable (the message names it)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per probe and scrape would drown the decisions.
    logging.getLogger("waitress").setLevel(logging.WARNING)
    # apscheduler logs two INFO lines per pass; the pass logs its own outcome.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    try:
        settings = service_settings(args)
    except SettingError as e:
        print(f"gpu-automator run: {e}", file=sys.stderr)
        return 2
    if settings.cluster_snapshot and settings.leader_election:
        log.warning("--leader-election is ignored with --cluster-snapshot")
    try:
        wiring = build(settings)
    except SettingError as e:
        print(f"gpu-automator run: {e}", file=sys.stderr)
        return 2
    return _serve(settings, wiring)


def http_server(app: Flask, host: str, port: int, threads: int) -> Any:
    """waitress with a bounded pool: `threads` workers, a listen backlog, connection limit and timeouts."""
    return create_server(
        app,
        host=host,
        port=port,
        threads=threads,
        backlog=HTTP_BACKLOG,
        connection_limit=HTTP_CONNECTION_LIMIT,
        channel_timeout=HTTP_CHANNEL_TIMEOUT,
        cleanup_interval=HTTP_CHANNEL_TIMEOUT,
        ident="gpu-steward-automator",
    )


def _serve(settings: ServiceSettings, wiring: Wiring) -> int:
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
    for job in wiring.jobs:
        scheduler.add_job(
            job.func,
            "interval",
            seconds=job.seconds,
            next_run_time=datetime.now(UTC),
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(job.seconds)),
            id=job.id,
        )
    scheduler.start()
    wiring.app.extensions[keda.EXTENSION].start()
    server = http_server(wiring.app, settings.listen_address, settings.port, settings.http_threads)

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        # close() ends run()'s loop, which runs in this (the main) thread: call it from another.
        threading.Thread(target=server.close, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.run()
    except OSError:
        pass  # the socket closed under run() by stop()
    finally:
        if wiring.elector is not None:
            wiring.elector.stop(timeout=5)
        scheduler.shutdown(wait=True)
        wiring.app.extensions[keda.EXTENSION].stop()
    return 0
