"""Command-line flags and environment variables of `gpu-exporter`, each declared once (pure).

Every flag `--some-flag` has an environment variable `GPU_STEWARD_SOME_FLAG`; a flag wins over its
variable, the variable over the default. Parsing, ranges and the error format (`<flag or variable>:
expected ..., got '...'`, exit 2) are steward_common.settingspec's, shared with gpu-automator;
docs/exporter.md lists the same table (a test compares them).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import exporter
from exporter.ports import DEFAULT_PODRESOURCES_SOCKET
from steward_common import settingspec
from steward_common.settingspec import (
    Setting,
    SettingError,
    boolean,
    choice,
    csv,
    integer,
    non_empty,
    number,
    port,
)

DEFAULT_PORT = 31995
SOURCES = ("nvml", "mock")
COMPAT_MODES = ("dcgm",)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# Intervals and cache lifetimes: positive, and at most a day (a longer one is a typo, not a wish).
seconds = number(0, 86400, low_open=True)
# A collection interval under half a second would keep a core busy for readings NVML refreshes slower.
collection_interval = number(0.5, 86400)


def listen_address(text: str) -> str:
    """An IP address (or `localhost`): a typo fails at start naming the flag, not at bind time."""
    import ipaddress

    candidate = text.strip().removeprefix("[").removesuffix("]")
    if candidate != "localhost":
        try:
            ipaddress.ip_address(candidate)
        except ValueError:
            raise ValueError(f"expected an IP address such as 0.0.0.0 or ::, got {text!r}") from None
    return candidate


def _log_level(text: str) -> str:
    return choice(*LOG_LEVELS)(text.upper())


SETTINGS: tuple[Setting[Any], ...] = (
    Setting(
        "--source",
        choice(*SOURCES),
        "nvml",
        "where GPU readings come from: nvml (this node's GPUs) or mock (a scenario)",
        metavar="{" + ",".join(SOURCES) + "}",
    ),
    Setting(
        "--scenario",
        non_empty,
        None,
        "scenario file for --source mock; without it the built-in demo scenario plays",
    ),
    Setting(
        "--scenario-reload",
        boolean,
        "false",
        "read the --scenario file again whenever it changes, keeping the scenario's clock (the demo's "
        "fake cluster rewrites it)",
        action="switch",
    ),
    Setting("--port", port, str(DEFAULT_PORT), "TCP port serving /metrics and /healthz"),
    Setting("--listen-address", listen_address, "0.0.0.0", "address to listen on (IPv4 or IPv6)"),
    Setting(
        "--interval",
        collection_interval,
        "10",
        "seconds between background collections (a scrape serves the last one)",
    ),
    Setting(
        "--health-stale-intervals",
        number(1, 1000),
        "6",
        "/healthz fails when no collection completed for this many intervals",
    ),
    Setting(
        "--web.config.file",
        non_empty,
        None,
        "TLS and basic auth, in Prometheus exporter-toolkit's web config format",
        metavar="FILE",
    ),
    Setting("--http-workers", integer(1, 256), "8", "threads answering HTTP requests"),
    Setting(
        "--http-max-connections",
        integer(16, 1_000_000),
        "1024",
        "open HTTP connections at most (each can hold about 47 kB: raise it with the memory limit)",
    ),
    Setting(
        "--http-timeout",
        number(0.1, 600),
        "10",
        "seconds for a request to arrive and for a response to be written",
    ),
    Setting("--http-idle-timeout", number(1, 3600), "120", "seconds a keep-alive connection may stay idle"),
    Setting(
        "--compat",
        csv(choice(*COMPAT_MODES)),
        "",
        "also emit another exporter's metric names; `dcgm` (repeatable, or comma-separated)",
        metavar="MODE",
        action="append",
    ),
    Setting(
        "--node-name",
        non_empty,
        None,
        "value of the `node` label; default $NODE_NAME, else the scenario's node (mock) or the hostname",
    ),
    Setting("--proc-root", non_empty, "/proc", "the host's /proc (host PIDs, for process attribution)"),
    Setting(
        "--podresources-socket", non_empty, DEFAULT_PODRESOURCES_SOCKET, "the kubelet PodResources socket"
    ),
    Setting(
        "--no-kube-api",
        boolean,
        "false",
        "do not ask the Kubernetes API for pod names (cgroups + PodResources only)",
        action="switch",
    ),
    Setting(
        "--attribution-refresh", seconds, "30", "seconds the attributor caches PodResources and the pod list"
    ),
    Setting("--log-level", _log_level, "INFO", "DEBUG, INFO, WARNING or ERROR", metavar="LEVEL"),
)


@dataclass(frozen=True)
class Config:
    source: Literal["nvml", "mock"] = "nvml"
    scenario: Path | None = None
    scenario_reload: bool = False
    port: int = DEFAULT_PORT
    listen_address: str = "0.0.0.0"
    interval: float = 10.0
    health_stale_intervals: float = 6.0
    web_config_file: Path | None = None
    http_workers: int = 8
    http_max_connections: int = 1_024
    http_timeout: float = 10.0
    http_idle_timeout: float = 120.0
    compat: tuple[str, ...] = ()
    node_name: str | None = None  # None: resolved by the CLI (scenario node or hostname)
    proc_root: str = "/proc"
    podresources_socket: str = DEFAULT_PODRESOURCES_SOCKET
    kube_api: bool = True
    attribution_refresh: float = 30.0
    log_level: str = "INFO"


def build_parser() -> argparse.ArgumentParser:
    env = settingspec.ENV_PREFIX
    parser = argparse.ArgumentParser(
        prog="gpu-exporter",
        description="Prometheus exporter of GPU usage per Kubernetes container (GPU Steward).",
        epilog=f"Each flag also reads the environment variable {env}<FLAG> (e.g. {env}PORT).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {exporter.__version__}")
    settingspec.add_arguments(parser, SETTINGS)
    return parser


def _given(args: argparse.Namespace, flag: str) -> str:
    """Where a setting's value came from: its flag, else its variable (for errors that span settings)."""
    setting = next(s for s in SETTINGS if s.flag == flag)
    return flag if getattr(args, setting.dest) is not None else setting.env


def parse_config(argv: Sequence[str] | None, environ: Mapping[str, str]) -> Config:
    """Flags over environment over defaults; SettingError names the flag or variable at fault."""
    args = build_parser().parse_args(argv)
    values = settingspec.resolve(args, SETTINGS, environ)
    if args.compat is not None and not values["compat"]:  # an empty variable means "none"; a flag, a slip
        raise SettingError(f"--compat: expected one of {', '.join(COMPAT_MODES)}, got ''")
    source = cast(Literal["nvml", "mock"], values["source"])
    scenario = Path(values["scenario"]) if values["scenario"] is not None else None
    if scenario is not None and source != "mock":
        where = _given(args, "--scenario")
        raise SettingError(f"{where}: a scenario needs --source mock (source is {source!r})")
    if values["scenario_reload"] and scenario is None:
        raise SettingError(f"{_given(args, '--scenario-reload')}: needs --scenario FILE (a file to follow)")
    node_name = values["node_name"]
    if node_name is None and environ.get("NODE_NAME", "").strip():
        node_name = environ["NODE_NAME"].strip()
    return Config(
        source=source,
        scenario=scenario,
        scenario_reload=values["scenario_reload"],
        port=values["port"],
        listen_address=values["listen_address"],
        interval=values["interval"],
        health_stale_intervals=values["health_stale_intervals"],
        web_config_file=Path(values["web_config_file"]) if values["web_config_file"] else None,
        http_workers=values["http_workers"],
        http_max_connections=values["http_max_connections"],
        http_timeout=values["http_timeout"],
        http_idle_timeout=values["http_idle_timeout"],
        compat=values["compat"],
        node_name=node_name,
        proc_root=values["proc_root"],
        podresources_socket=values["podresources_socket"],
        kube_api=not values["no_kube_api"],
        attribution_refresh=values["attribution_refresh"],
        log_level=values["log_level"],
    )


def logging_level(config: Config) -> int:
    return int(getattr(logging, config.log_level))
