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

from automator import cli
from automator.actuator import ActuatorState, KubeAdapter, Mode, PassResult, UsageSource, run_pass
from automator.cli import env_name, planner_config  # the offline commands' own: one reading of the knobs
from automator.kube import EvictionResult, KubernetesAdapter, KubernetesUnavailable, LeaderElector, api_client
from automator.metrics import AutomatorMetrics
from automator.model import ClusterState, PlannerConfig, PodKey
from automator.prom import PrometheusAdapter
from automator.snapshot import InputError, load_cluster

log = logging.getLogger(__name__)

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# A pass older than this many intervals makes a leader unready.
STALE_INTERVALS = 3


def _env(flag: str, default: str | None) -> str | None:
    return os.environ.get(env_name(flag), default)


def _env_bool(flag: str, problems: list[str]) -> bool | None:
    raw = os.environ.get(env_name(flag))
    if raw is None or raw == "":
        return None
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    problems.append(f"{env_name(flag)}: {raw!r} is not a boolean (true/false)")
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `gpu-automator run`; each also reads GPU_STEWARD_<FLAG> (the flag wins)."""
    # A bad environment value is reported by validate() under the variable's name; building the
    # parser must not fail, or every subcommand would.
    env_problems: list[str] = []
    parser.set_defaults(env_problems=env_problems)

    def add(flag: str, default: str | None, help_: str, **kw: Any) -> None:
        shown = f"; default {default}" if default is not None else ""
        value = _env(flag, default)
        if value is not default and value is not None:
            convert = kw.get("type", str)
            try:
                convert(value)
            except ValueError:
                env_problems.append(f"{env_name(flag)}: {value!r} is not a valid {convert.__name__}")
                value = default
            if "choices" in kw and value not in kw["choices"]:
                env_problems.append(f"{env_name(flag)}: {value!r} is not one of {', '.join(kw['choices'])}")
                value = default
        parser.add_argument(flag, default=value, help=f"{help_} (env {env_name(flag)}{shown})", **kw)

    add(
        "--mode",
        "dry-run",
        "dry-run logs and exposes decisions; enforce evicts",
        choices=[m.value for m in Mode],
    )
    add("--prometheus-url", "http://prometheus-operated.monitoring.svc:9090", "Prometheus base URL")
    add("--prometheus-timeout", "10", "seconds per Prometheus query", type=float)
    add("--interval", "30", "seconds between passes", type=float)
    add("--listen-address", "0.0.0.0", "address of the HTTP endpoints")
    add("--port", "8080", "port of the HTTP endpoints", type=int)
    add("--rule-interval", "30", "evaluation interval (s) of the recorded series, for coverage", type=float)
    parser.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=_env_bool("--leader-election", env_problems),
        help="run passes only while holding a Lease (default: on, off with --cluster-snapshot) "
        f"(env {env_name('--leader-election')})",
    )
    add("--lease-name", "gpu-steward-automator", "name of the Lease")
    add("--lease-namespace", None, "namespace of the Lease (default: the pod's namespace)")
    add("--kubeconfig", None, "kubeconfig file (default: the in-cluster service account)")
    add(
        "--cluster-snapshot",
        None,
        "read the cluster from this file (kubectl get -o yaml List) on every pass instead of the API; "
        "dry-run only, for demos",
    )
    add("--max-replans", "5", "re-plans per pass after refused evictions", type=int)
    # The planner knobs are the offline commands' own (same names, env vars, defaults and checks).
    cli.add_planner_arguments(parser)


def validate(args: argparse.Namespace) -> list[str]:
    """Problems with the service's own flags, each naming the flag (planner flags: planner_config)."""
    problems = list(getattr(args, "env_problems", []))
    if args.cluster_snapshot and args.mode == Mode.ENFORCE:
        problems.append(
            "--mode enforce cannot be used with --cluster-snapshot (a file cannot be evicted from)"
        )
    for flag in ("interval", "prometheus_timeout", "rule_interval"):
        if getattr(args, flag) <= 0:
            problems.append(f"--{flag.replace('_', '-')} must be > 0, got {getattr(args, flag)}")
    if not 0 < args.port < 65536:
        problems.append(f"--port must be 1-65535, got {args.port}")
    if args.max_replans < 0:
        problems.append(f"--max-replans must be >= 0, got {args.max_replans}")
    return problems


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


def _lease_namespace(args: argparse.Namespace) -> str:
    if args.lease_namespace:
        return str(args.lease_namespace)
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


def build(args: argparse.Namespace, registry: CollectorRegistry | None = None) -> Wiring:
    """Adapters, metrics, service and app from the parsed flags (no thread started)."""
    config = planner_config(args)
    mode = Mode(args.mode)
    metrics = AutomatorMetrics(registry or CollectorRegistry(), version=_package_version(), mode=str(mode))
    prom = PrometheusAdapter(
        args.prometheus_url,
        timeout=args.prometheus_timeout,
        rule_interval=args.rule_interval,
        observe_query=metrics.query_duration.observe,
    )
    elector: LeaderElector | None = None
    kube: KubeAdapter
    if args.cluster_snapshot:
        kube = SnapshotKube(Path(args.cluster_snapshot), config.gpu_resources)
    else:
        identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        api = api_client(args.kubeconfig)
        kube = KubernetesAdapter(api, identity=identity, request_timeout=max(30.0, args.prometheus_timeout))
        if args.leader_election is not False:
            elector = LeaderElector(
                api,
                args.lease_name,
                _lease_namespace(args),
                identity,
                on_change=lambda leading: metrics.is_leader.set(1 if leading else 0),
            )
    service = Service(
        kube=kube,
        prom=prom,
        config=config,
        mode=mode,
        interval=args.interval,
        metrics=metrics,
        is_leader=(lambda: elector.is_leader) if elector is not None else (lambda: True),
        max_replans=args.max_replans,
    )
    return Wiring(service, create_app(service), elector)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT. Exit 2 on bad flags."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per probe and scrape would drown the decisions.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    # apscheduler logs two INFO lines per pass; the pass logs its own outcome.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    problems = validate(args)
    try:
        planner_config(args)
    except InputError as e:
        problems.append(str(e))
    if problems:
        for p in problems:
            print(f"gpu-automator run: {p}", file=sys.stderr)
        return 2
    if args.cluster_snapshot and args.leader_election:
        log.warning("--leader-election is ignored with --cluster-snapshot")
    wiring = build(args)
    service = wiring.service
    log.info(
        "starting: mode=%s interval=%gs prometheus=%s leader_election=%s",
        service.mode,
        service.interval,
        args.prometheus_url,
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
    scheduler.start()
    server = make_server(args.listen_address, args.port, wiring.app, threaded=True)

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
