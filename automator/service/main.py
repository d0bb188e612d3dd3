"""`gpu-automator run`: the reclaim loop as a service, wired from the settings.

An apscheduler job runs one pass every --interval seconds (never two at once); a Flask app, served by
waitress (a bounded thread pool, backlog and timeouts), answers /healthz, /readyz, /metrics and /decisions
(which can be turned off or require a bearer token). With leader election (a Lease, kube.LeaderElector)
only the replica holding the lease runs passes and writes; the others stay ready as standbys.

Roles, one module each: loop.py (the Service: a pass when leading, readiness, the last pass), web.py (the
HTTP app and server), scheduling.py (jobs, signals, serving) and this module (the wiring: settings ->
adapters -> metrics, Service, app, jobs).

Extending it: a Blueprint goes into `create_app(service, blueprints=...)` (or `Wiring.app.register_blueprint`
in `build`), a periodic job into `Wiring.jobs` (`Job(id, func, seconds)`) in `build`; `serve` schedules
every job of the wiring.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from prometheus_client import CollectorRegistry

from automator.dra.job import DraCheckJob, DraCluster, SnapshotDraCluster
from automator.keda import wiring as keda
from automator.kube import DraKubernetesAdapter, KubernetesAdapter, LeaderElector, api_client
from automator.metrics import AutomatorMetrics
from automator.objects.cache import RecordCache
from automator.ports import KubeAdapter
from automator.prom import DraMemoryReader, PrometheusAdapter, PrometheusCredentials, read_credentials
from automator.service.cooldown import ActuatorState
from automator.service.fencing import lease_record, restore
from automator.service.kueue import KueueStep
from automator.service.loop import STALE_INTERVALS, Service, SnapshotKube
from automator.service.scheduling import Job, Wiring, serve
from automator.service.web import (
    HTTP_BACKLOG,
    HTTP_CHANNEL_TIMEOUT,
    HTTP_CONNECTION_LIMIT,
    DecisionsAccess,
    add_dra_route,
    create_app,
    http_server,
    usable_token,
)
from automator.settings import ServiceSettings, SettingError, service_settings
from steward_common.conventions import COMPONENT
from steward_common.printable import log_handler
from steward_common.settingspec import secret_file

# What callers and tests use from here, wherever it is implemented.
__all__ = [
    "HTTP_BACKLOG",
    "HTTP_CHANNEL_TIMEOUT",
    "HTTP_CONNECTION_LIMIT",
    "STALE_INTERVALS",
    "DecisionsAccess",
    "Job",
    "Service",
    "SnapshotKube",
    "Wiring",
    "add_dra_route",
    "build",
    "create_app",
    "http_server",
    "run",
]

log = logging.getLogger(__name__)

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


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


def _decisions_access(settings: ServiceSettings) -> DecisionsAccess:
    token: str | None = None
    if settings.decisions_token_file:
        flag = "--decisions-token-file"
        token = secret_file(flag, settings.decisions_token_file)
        if not usable_token(token):
            raise SettingError(
                f"{flag}: {settings.decisions_token_file}: a bearer token is one word of visible ASCII "
                "characters (no spaces or other characters a header cannot carry)"
            )
    return DecisionsAccess(settings.decisions_endpoint, token)


def prometheus_credentials(settings: ServiceSettings) -> PrometheusCredentials:
    """The credentials for Prometheus, read once at start from their files."""
    return read_credentials(
        settings.prometheus_bearer_token_file,
        settings.prometheus_basic_auth_file,
        settings.prometheus_ca_file,
    )


def _restore(state: ActuatorState, found: Mapping[str, str], cap: int) -> None:
    evictions, reclaims = restore(state, found, datetime.now(UTC), cap)
    if evictions:
        log.info("hourly eviction budget: %d evictions of the last hour read from the Lease", evictions)
    if reclaims:
        log.info("cooldown: %d recent reclaims read from the Lease", reclaims)


def _cluster(
    settings: ServiceSettings, metrics: AutomatorMetrics, state: ActuatorState
) -> tuple[KubeAdapter, LeaderElector | None]:
    """The cluster adapter (the snapshot file, or the API) and, when on, the leader elector."""
    gpu_resources = settings.planner.gpu_resources
    if settings.cluster_snapshot:
        return SnapshotKube(Path(settings.cluster_snapshot), gpu_resources, settings.kueue.on), None
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    api = api_client(settings.kubeconfig)
    if settings.leader_election is False:
        kube = KubernetesAdapter(
            api,
            identity=identity,
            request_timeout=settings.api_timeout,
            gpu_resources=gpu_resources,
            kueue=settings.kueue.on,
        )
        return kube, None
    elector = LeaderElector(
        api,
        settings.lease_name,
        _lease_namespace(settings),
        identity,
        on_change=metrics.set_leader,
        # The hourly eviction budget and the recent reclaims live on the Lease, so a restart or the next
        # leader keeps them (written at each renewal, and before each eviction: service/fencing.py).
        annotations=lambda: lease_record(state, datetime.now(UTC)),
        on_acquire=lambda found: _restore(state, found, settings.max_evictions_per_hour),
    )
    kube = KubernetesAdapter(
        api,
        identity=identity,
        request_timeout=settings.api_timeout,
        gpu_resources=gpu_resources,
        write_timeout=elector.write_timeout,
        kueue=settings.kueue.on,
    )
    return kube, elector


def _fence(elector: LeaderElector | None, state: ActuatorState) -> Callable[[], None] | None:
    """The Lease record written before each eviction (service/fencing.py); None without a Lease."""
    if elector is None:
        return None
    return lambda: elector.record(lease_record(state, datetime.now(UTC)))


def _add_dra_check(
    wiring: Wiring, settings: ServiceSettings, prom: PrometheusAdapter, access: DecisionsAccess
) -> None:
    """The DRA check job and /dra, unless --dra-check-interval 0 or no DRA source."""
    kube = wiring.service.kube
    dra_cluster: DraCluster | None = None
    if settings.cluster_snapshot:
        dra_cluster = SnapshotDraCluster(Path(settings.cluster_snapshot))
    elif isinstance(kube, KubernetesAdapter):
        dra_cluster = DraKubernetesAdapter(kube)
    if settings.dra_check_interval <= 0 or dra_cluster is None:
        return
    wiring.dra = DraCheckJob(
        dra_cluster,
        DraMemoryReader(prom),
        settings.dra_check_interval,
        wiring.service.metrics.registry,
        is_leader=wiring.service.is_leader,
        write_events=not settings.cluster_snapshot,
        instance=kube.identity if isinstance(kube, KubernetesAdapter) else COMPONENT,
        # API objects carry the server's resourceVersions: unchanged ones are not read again each pass
        record_cache=None if settings.cluster_snapshot else RecordCache(),
    )
    add_dra_route(wiring.app, wiring.dra, access)
    wiring.jobs.append(Job("dra-check", wiring.dra.run_once, wiring.dra.interval))


def build(settings: ServiceSettings, registry: CollectorRegistry | None = None) -> Wiring:
    """Adapters, metrics, service and app from the settings (no thread started)."""
    access = _decisions_access(settings)
    metrics = AutomatorMetrics(
        registry or CollectorRegistry(), version=_package_version(), mode=str(settings.mode)
    )
    metrics.interval.set(settings.interval)
    metrics.max_evictions_per_hour.set(settings.max_evictions_per_hour)
    prom = PrometheusAdapter(
        settings.prometheus_url,
        timeout=settings.prometheus_timeout,
        rule_interval=settings.rule_interval,
        observe_query=metrics.query_duration.observe,
        credentials=prometheus_credentials(settings),
    )
    state = ActuatorState()
    kube, elector = _cluster(settings, metrics, state)
    service = Service(
        state=state,
        kube=kube,
        prom=prom,
        config=settings.planner,
        mode=settings.mode,
        interval=settings.interval,
        metrics=metrics,
        is_leader=(lambda: elector.is_leader) if elector is not None else (lambda: True),
        leader_identity=(lambda: elector.holder) if elector is not None else (lambda: None),
        fence=_fence(elector, state),
        max_replans=settings.max_replans,
        max_evictions_per_hour=settings.max_evictions_per_hour,
    )
    if settings.kueue.on:  # docs/kueue.md; a snapshot file is written to by no one
        writer = kube if isinstance(kube, KubernetesAdapter) else None
        service.kueue = KueueStep(writer, settings.kueue, state, metrics, service.is_leader)
    app = create_app(service, access)
    keda.attach(app, settings, metrics.registry, prom.keda_query)  # docs/keda.md
    wiring = Wiring(service, app, elector, [Job("reclaim-pass", service.run_once, service.interval)])
    _add_dra_check(wiring, settings, prom, access)
    return wiring


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT. Exit 2 on a bad flag or variable (the message names it)."""
    if not logging.getLogger().handlers:
        # object names and messages reach the log: escaped, so that none can forge or split a line
        logging.basicConfig(level=logging.INFO, handlers=[log_handler(LOG_FORMAT)])
    # One line per probe and scrape would drown the decisions.
    logging.getLogger("waitress").setLevel(logging.WARNING)
    # apscheduler logs two INFO lines per pass; the pass logs its own outcome.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    try:
        settings = service_settings(args)
        if settings.cluster_snapshot and settings.leader_election:
            log.warning("--leader-election is ignored with --cluster-snapshot")
        wiring = build(settings)
    except SettingError as e:
        print(f"gpu-automator run: {e}", file=sys.stderr)
        return 2
    return serve(settings, wiring)
