"""Every setting of `gpu-automator`, declared once: flag, `GPU_STEWARD_*` variable, range, default, help.

`plan` and `explain` take the planner settings; `run` takes those and the service settings. A flag wins over
its variable, the variable over the default; a bad value is a SettingError naming the flag or variable
(exit 2). Pure: argparse and the standard library only, so `gpu-automator plan --help` loads no web or API
client.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from automator.keda import settings as keda
from automator.kueue.model import DEFAULT_BOOST, MIN_BOOST, KueueMode, KueueSettings
from automator.objects.resources import CPU_AND_MEMORY
from automator.ports import Mode
from automator.reclaim.model import PlannerConfig
from steward_common import settingspec as spec
from steward_common.conventions import DEFAULT_LEASE_NAME
from steward_common.series import RULE_INTERVAL_SECONDS
from steward_common.settingspec import Setting, SettingError
from steward_common.urls import http_url

__all__ = ["SettingError"]

_PLANNER = PlannerConfig()
DAY = 86_400
WEEK = 7 * DAY  # the longest window or cooldown: Prometheus retention rarely reaches further
DRA_MIN_INTERVAL = 10.0


def _gpu_resource(text: str) -> str:
    if text in CPU_AND_MEMORY:
        raise ValueError(
            f"{text!r} is not counted in devices: name an extended resource such as nvidia.com/gpu"
        )
    return spec.non_empty(text)


def _gpu_resources(text: str) -> tuple[str, ...]:
    # An empty list would make every pod GPU-less: an empty variable means the default, as it always did.
    return spec.csv(_gpu_resource)(text) or _PLANNER.gpu_resources


def _auto_boolean(text: str) -> bool | None:
    """true/false, or empty for "decide at run time"."""
    return spec.boolean(text) if text.strip() else None


def _dra_interval(text: str) -> float:
    """0 (off), or a finite number of seconds in [10, 86400]: listing every claim and pod more often than
    every 10 s would load the API server for nothing."""
    value = spec.number(0, DAY)(text)
    if 0 < value < DRA_MIN_INTERVAL:
        raise ValueError(
            f"expected 0 (off) or a number of seconds in [{DRA_MIN_INTERVAL:g}, {DAY}], got {text!r}"
        )
    return value


PLANNER_SETTINGS: tuple[Setting[Any], ...] = (
    Setting(
        "--gpu-resource",
        _gpu_resources,
        ",".join(_PLANNER.gpu_resources),
        "extended resource counted as GPUs (not cpu or memory), repeatable (comma-separated in the variable)",
        metavar="NAME",
        action="append",
        env_var=spec.ENV_PREFIX + "GPU_RESOURCES",
    ),
    Setting(
        "--default-gpu-idle-seconds",
        spec.integer(1, WEEK),
        str(_PLANNER.default_gpu_idle_seconds),
        "GPU window for pods whose class sets none",
    ),
    Setting(
        "--default-gpu-idle-threshold",
        spec.ratio,
        str(_PLANNER.default_gpu_idle_threshold),
        "GPU activity (a 0-1 ratio: 0.05, not 5) at or below which a pod is idle",
    ),
    Setting(
        "--default-toleration-seconds",
        spec.integer(-WEEK, WEEK),
        str(_PLANNER.default_toleration_seconds),
        "guaranteed run time after scheduling",
    ),
    Setting(
        "--min-coverage",
        spec.ratio,
        str(_PLANNER.min_coverage),
        "fraction of the window that must have samples",
    ),
    Setting(
        "--cooldown-seconds",
        spec.integer(0, WEEK),
        str(_PLANNER.cooldown_seconds),
        "skip a preemptor this long after a reclaim",
    ),
    Setting(
        "--recent-window",
        spec.integer(1, 3600),
        str(_PLANNER.recent_window_seconds),
        "seconds of recent GPU activity whose maximum must be at or below the threshold",
    ),
    Setting(
        "--max-reclaims-per-preemptor",
        spec.integer(1, 1000),
        str(_PLANNER.max_reclaims_per_preemptor),
        "rounds of victims for one preemptor before giving up on it",
    ),
    Setting(
        "--max-evictions-per-pass",
        spec.integer(0, 10_000),
        str(_PLANNER.max_evictions_per_pass),
        "victims evicted in one pass at most",
    ),
    Setting(
        "--exclude-namespaces",
        spec.csv(),
        ",".join(_PLANNER.exclude_namespaces),
        "comma-separated namespaces whose pods are never victims (an empty value excludes none)",
        metavar="NS,...",
    ),
    Setting(
        "--victim-namespaces",
        spec.csv(),
        None,
        "comma-separated namespaces whose pods may be victims (default: all)",
        metavar="NS,...",
    ),
    Setting(
        "--notice-seconds",
        spec.integer(0, WEEK),
        str(_PLANNER.notice_seconds),
        "seconds of notice a victim gets before it is evicted (0: no notice; 600 recommended for enforce)",
    ),
    Setting(
        "--max-defer-seconds",
        spec.integer(0, WEEK),
        str(_PLANNER.max_defer_seconds),
        "furthest from now an owner's gpu-steward.io/reclaim-defer-until may protect a pod",
    ),
    Setting(
        "--max-notices",
        spec.integer(0, 100_000),
        None,
        "pods under notice at once at most (default: 4 x --max-evictions-per-pass)",
    ),
)

SERVICE_SETTINGS: tuple[Setting[Any], ...] = (
    Setting(
        "--mode",
        spec.choice(*(m.value for m in Mode)),
        Mode.DRY_RUN.value,
        "dry-run logs and exposes decisions; enforce evicts",
    ),
    Setting(
        "--prometheus-url",
        http_url,
        "http://prometheus-operated.monitoring.svc:9090",
        "Prometheus base URL (http or https, with a host)",
    ),
    Setting(
        "--prometheus-bearer-token-file",
        str,
        None,
        "file holding a bearer token sent to Prometheus (Authorization: Bearer ...); never logged",
    ),
    Setting(
        "--prometheus-basic-auth-file",
        str,
        None,
        "file holding 'user:password' for Prometheus' basic auth; never logged",
    ),
    Setting(
        "--prometheus-ca-file",
        str,
        None,
        "PEM file of the CA that signs Prometheus' TLS certificate (default: the system's CAs)",
    ),
    Setting(
        "--prometheus-timeout", spec.number(0, 3600, low_open=True), "10", "seconds per Prometheus query"
    ),
    Setting("--interval", spec.number(1, DAY), "30", "seconds between passes"),
    Setting("--listen-address", str, "0.0.0.0", "address of the HTTP endpoints"),
    Setting("--port", spec.port, "8080", "port of the HTTP endpoints"),
    Setting("--http-threads", spec.integer(1, 64), "4", "threads serving HTTP (a bounded pool)"),
    Setting(
        "--probe-port",
        spec.integer(0, 65535),
        "8081",
        "port of /healthz and /readyz alone, a listener of their own outside the main port's connection "
        "limits (0: off; the main port serves them too)",
    ),
    Setting(
        "--max-connections-per-source",
        spec.integer(1, 1000),
        "20",
        "connections one source address may hold at once on the main port (more are closed at once)",
    ),
    Setting(
        "--decisions-endpoint",
        spec.boolean,
        "true",
        "serve /decisions (every candidate pod's name and usage); --no-decisions-endpoint turns it off",
        action="toggle",
    ),
    Setting(
        "--decisions-token-file",
        str,
        None,
        "file holding a bearer token that /decisions then requires (Authorization: Bearer ...)",
    ),
    Setting(
        "--api-timeout",
        spec.number(1, 300),
        "30",
        "seconds per Kubernetes API call (lists, evictions, patches, Events)",
    ),
    Setting(
        "--max-evictions-per-hour",
        spec.integer(0, 100_000),
        "60",
        "evictions in any sliding hour at most, across passes",
    ),
    Setting(
        "--single-replica",
        spec.boolean,
        "false",
        "state that only one replica runs: required for --mode enforce without leader election",
        action="switch",
    ),
    Setting(
        "--rule-interval",
        spec.number(1, 120),
        str(RULE_INTERVAL_SECONDS),
        "evaluation interval (s) of the recorded series, for coverage (at most 120: beyond, samples go "
        "stale between evaluations and coverage would be overstated)",
    ),
    Setting(
        "--leader-election",
        _auto_boolean,
        None,
        "run passes only while holding a Lease (default: on, off with --cluster-snapshot)",
        action="toggle",
    ),
    Setting("--lease-name", spec.non_empty, DEFAULT_LEASE_NAME, "name of the Lease"),
    Setting("--lease-namespace", str, None, "namespace of the Lease (default: the pod's namespace)"),
    Setting("--kubeconfig", str, None, "kubeconfig file (default: the in-cluster service account)"),
    Setting(
        "--cluster-snapshot",
        str,
        None,
        "read the cluster from this file (kubectl get -o yaml List) on every pass instead of the API; "
        "dry-run only, for demos",
    ),
    Setting("--max-replans", spec.integer(0, 1000), "5", "re-plans per pass after refused evictions"),
    Setting(
        "--dra-check-interval",
        _dra_interval,
        "60",
        "seconds between DRA capacity checks (docs/dra.md); 0 turns them off. Off by itself when the "
        "cluster does not serve resource.k8s.io/v1",
    ),
)

# Kueue (docs/kueue.md): on run, plan and explain.
KUEUE_SETTINGS: tuple[Setting[Any], ...] = (
    Setting(
        "--kueue",
        spec.choice(*(m.value for m in KueueMode)),
        KueueMode.OFF.value,
        "Kueue Workloads: off reads none; boost writes Kueue's priority-boost on idle admitted Workloads "
        "that waiting ones could preempt; deactivate sets spec.active: false on them (docs/kueue.md)",
    ),
    Setting(
        "--kueue-boost",
        spec.integer(MIN_BOOST, -1),
        str(DEFAULT_BOOST),
        "the kueue.x-k8s.io/priority-boost value boost writes (a negative 32-bit integer)",
    ),
)

ALL_SETTINGS: tuple[Setting[Any], ...] = (
    SERVICE_SETTINGS + PLANNER_SETTINGS + KUEUE_SETTINGS + keda.KEDA_SETTINGS
)
PLANNER_GROUP = "planner settings (flag, else environment variable, else default)"
KUEUE_GROUP = "Kueue settings (docs/kueue.md)"


def add_planner_arguments(parser: argparse.ArgumentParser) -> None:
    spec.add_arguments(parser.add_argument_group(PLANNER_GROUP), PLANNER_SETTINGS)


def add_kueue_arguments(parser: argparse.ArgumentParser) -> None:
    """Kueue's flags (plan, explain and run; the backtest does not replay Kueue)."""
    spec.add_arguments(parser.add_argument_group(KUEUE_GROUP), KUEUE_SETTINGS)


def add_service_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `gpu-automator run`: the service's own, then the planner's."""
    spec.add_arguments(parser, SERVICE_SETTINGS)
    add_planner_arguments(parser)
    add_kueue_arguments(parser)
    keda.add_arguments(parser)


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def planner_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> PlannerConfig:
    """PlannerConfig from flags, then GPU_STEWARD_* variables, then defaults; SettingError names it."""
    values = spec.resolve(args, PLANNER_SETTINGS, _environ(environ))
    values["gpu_resources"] = values.pop("gpu_resource")
    values["recent_window_seconds"] = values.pop("recent_window")
    values["victim_namespaces"] = values["victim_namespaces"] or ()  # unset: every namespace
    return PlannerConfig(**values)


def kueue_settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> KueueSettings:
    """KueueSettings from flags, then GPU_STEWARD_* variables, then defaults; SettingError names it."""
    values = spec.resolve(args, KUEUE_SETTINGS, _environ(environ))
    return KueueSettings(KueueMode(values["kueue"]), values["kueue_boost"])


@dataclass(frozen=True)
class ServiceSettings:
    mode: Mode
    prometheus_url: str
    prometheus_timeout: float
    interval: float
    listen_address: str
    port: int
    http_threads: int
    decisions_endpoint: bool
    decisions_token_file: str | None
    api_timeout: float
    max_evictions_per_hour: int
    single_replica: bool
    rule_interval: float
    leader_election: bool | None  # None: on, unless the cluster comes from a snapshot file
    lease_name: str
    lease_namespace: str | None
    kubeconfig: str | None
    cluster_snapshot: str | None
    max_replans: int
    planner: PlannerConfig
    keda: keda.KedaSettings = field(default_factory=keda.KedaSettings)
    probe_port: int = 8081  # 0: off
    max_connections_per_source: int = 20
    dra_check_interval: float = 60.0  # 0: the DRA check is off
    prometheus_bearer_token_file: str | None = None
    prometheus_basic_auth_file: str | None = None
    prometheus_ca_file: str | None = None
    kueue: KueueSettings = field(default_factory=KueueSettings)


def service_settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ServiceSettings:
    """The settings of `run`; SettingError names the flag or variable at fault."""
    values = spec.resolve(args, SERVICE_SETTINGS, _environ(environ))
    values["mode"] = Mode(values["mode"])
    settings = ServiceSettings(
        **values,
        planner=planner_config(args, environ),
        keda=keda.keda_settings(args, _environ(environ)),
        kueue=kueue_settings(args, environ),
    )
    if settings.cluster_snapshot and settings.mode is Mode.ENFORCE:
        raise SettingError(
            "--mode enforce cannot be used with --cluster-snapshot (a file cannot be evicted from)"
        )
    if settings.mode is Mode.ENFORCE and settings.leader_election is False and not settings.single_replica:
        raise SettingError(
            "--no-leader-election: --mode enforce without leader election needs --single-replica "
            "(two replicas would both evict)"
        )
    return settings
