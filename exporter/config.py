"""Command-line flags and environment variables of `gpu-exporter`.

Every flag `--some-flag` has an environment variable `GPU_STEWARD_SOME_FLAG`; a flag wins over its
variable, the variable over the default. Values are checked here, and an error names the flag or
variable it came from. docs/exporter.md lists the same table (`OPTIONS`).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar, cast

import exporter

ENV_PREFIX = "GPU_STEWARD_"
DEFAULT_PORT = 31995
DEFAULT_PODRESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
SOURCES = ("nvml", "mock")
COMPAT_MODES = ("dcgm",)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

T = TypeVar("T")


class ConfigError(ValueError):
    """A flag or environment variable has a bad value; the message names it."""


@dataclass(frozen=True)
class Option:
    flag: str
    default: str | None  # as text, the way the environment would give it
    help: str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.flag.removeprefix("--").replace("-", "_").upper()

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option("--source", "nvml", "where GPU readings come from: nvml (this node's GPUs) or mock (a scenario)"),
    Option(
        "--scenario", None, "scenario file for --source mock; without it the built-in demo scenario plays"
    ),
    Option("--port", str(DEFAULT_PORT), "TCP port serving /metrics and /healthz"),
    Option("--listen-address", "0.0.0.0", "address to listen on"),
    Option("--interval", "10", "seconds between background collections (a scrape serves the last one)"),
    Option(
        "--compat", "", "also emit another exporter's metric names; `dcgm` (repeatable, or comma-separated)"
    ),
    Option(
        "--node-name",
        None,
        "value of the `node` label; default $NODE_NAME, else the scenario's node (mock) or the hostname",
    ),
    Option("--proc-root", "/proc", "the host's /proc (host PIDs, for process attribution)"),
    Option("--podresources-socket", DEFAULT_PODRESOURCES_SOCKET, "the kubelet PodResources socket"),
    Option(
        "--no-kube-api", "false", "do not ask the Kubernetes API for pod names (cgroups + PodResources only)"
    ),
    Option("--attribution-refresh", "30", "seconds the attributor caches PodResources and the pod list"),
    Option("--log-level", "INFO", "DEBUG, INFO, WARNING or ERROR"),
)


@dataclass(frozen=True)
class Config:
    source: Literal["nvml", "mock"] = "nvml"
    scenario: Path | None = None
    port: int = DEFAULT_PORT
    listen_address: str = "0.0.0.0"
    interval: float = 10.0
    compat: tuple[str, ...] = ()
    node_name: str | None = None  # None: resolved by the CLI (scenario node or hostname)
    proc_root: str = "/proc"
    podresources_socket: str = DEFAULT_PODRESOURCES_SOCKET
    kube_api: bool = True
    attribution_refresh: float = 30.0
    log_level: str = "INFO"


# --- converters: text -> value, ValueError with a message that follows the name ---


def _choice(choices: Sequence[str]) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return convert


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 1 <= value <= 65535:
        raise ValueError(f"expected a port number 1-65535, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"expected a positive number of seconds, got {text!r}")
    return value


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _non_empty(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def _log_level(text: str) -> str:
    return _choice(LOG_LEVELS)(text.upper())


def _compat(values: Sequence[str]) -> tuple[str, ...]:
    modes = [m.strip() for v in values for m in v.split(",") if m.strip()]
    for m in modes:
        _choice(COMPAT_MODES)(m)
    return tuple(dict.fromkeys(modes))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-exporter",
        description="Prometheus exporter of GPU usage per Kubernetes container (GPU Steward).",
        epilog=f"Each flag also reads the environment variable {ENV_PREFIX}<FLAG> (e.g. {ENV_PREFIX}PORT).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {exporter.__version__}")
    for opt in OPTIONS:
        default = f"; default {opt.default!r}" if opt.default is not None else ""
        help_text = f"{opt.help} (env {opt.env}{default})"
        if opt.flag == "--no-kube-api":
            parser.add_argument(opt.flag, action="store_const", const="true", default=None, help=help_text)
        elif opt.flag == "--compat":
            parser.add_argument(opt.flag, action="append", default=None, metavar="MODE", help=help_text)
        else:
            metavar = {"--source": "{" + ",".join(SOURCES) + "}", "--log-level": "LEVEL"}.get(opt.flag)
            parser.add_argument(opt.flag, default=None, metavar=metavar or opt.dest.upper(), help=help_text)
    return parser


def parse_config(argv: Sequence[str] | None, environ: Mapping[str, str]) -> Config:
    """Flags over environment over defaults; ConfigError names the flag or variable at fault."""
    args = vars(build_parser().parse_args(argv))
    raw: dict[str, tuple[str, str | list[str] | None]] = {}  # dest -> (where from, text)
    for opt in OPTIONS:
        if args[opt.dest] is not None:
            raw[opt.dest] = (opt.flag, args[opt.dest])
        elif opt.env in environ:
            raw[opt.dest] = (opt.env, environ[opt.env])
        else:
            raw[opt.dest] = (f"{opt.flag} (default)", opt.default)

    def get(dest: str, convert: Callable[[str], T]) -> T:
        where, text = raw[dest]
        try:
            return convert(cast(str, text))
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None

    where, compat_raw = raw["compat"]
    try:
        compat = _compat([compat_raw] if isinstance(compat_raw, str) else compat_raw or [])
        if not compat and where == "--compat":  # an empty variable means "none"; an empty flag is a slip
            raise ValueError(f"expected one of {', '.join(COMPAT_MODES)}, got ''")
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
    source = cast(Literal["nvml", "mock"], get("source", _choice(SOURCES)))
    scenario_text = raw["scenario"][1]
    scenario = Path(get("scenario", _non_empty)) if scenario_text is not None else None
    if scenario is not None and source != "mock":
        raise ConfigError(f"{raw['scenario'][0]}: a scenario needs --source mock (source is {source!r})")
    node_name = None
    if raw["node_name"][1] is not None:
        node_name = get("node_name", _non_empty)
    elif environ.get("NODE_NAME", "").strip():
        node_name = environ["NODE_NAME"].strip()
    return Config(
        source=source,
        scenario=scenario,
        port=get("port", _port),
        listen_address=get("listen_address", _non_empty),
        interval=get("interval", _seconds),
        compat=compat,
        node_name=node_name,
        proc_root=get("proc_root", _non_empty),
        podresources_socket=get("podresources_socket", _non_empty),
        kube_api=not get("no_kube_api", _bool),
        attribution_refresh=get("attribution_refresh", _seconds),
        log_level=get("log_level", _log_level),
    )


def logging_level(config: Config) -> int:
    return int(getattr(logging, config.log_level))
