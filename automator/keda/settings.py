"""Settings of the KEDA endpoints of `gpu-automator run`, declared once (flag, GPU_STEWARD_* variable, range).

Pure: argparse and the standard library only. The service reads them through automator/settings.py.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from automator.keda import auth, certs
from automator.keda.declared import DEFAULT_HOSTS
from steward_common import settingspec as spec
from steward_common.settingspec import Setting, SettingError

DAY = 86_400


def _namespaces(text: str) -> tuple[str, ...]:
    names = spec.csv()(text)
    bad = [n for n in names if not _DNS1123_LABEL.fullmatch(n) or len(n) > 63]
    if bad:
        raise ValueError(f"expected namespace names, got {spec.shown(bad[0])}")
    return names


def _hosts(text: str) -> tuple[str, ...]:
    hosts = spec.csv()(text)
    if not hosts:
        raise ValueError("expected at least one host name")
    bad = [h for h in hosts if len(h) > 253 or not _HOST.fullmatch(h)]
    if bad:
        raise ValueError(f"expected host names (no port), got {spec.shown(bad[0])}")
    return tuple(h.lower() for h in hosts)


_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_HOST = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$")

KEDA_SETTINGS: tuple[Setting[Any], ...] = (
    Setting(
        "--keda-refresh-seconds",
        spec.number(1, 3600),
        "15",
        "seconds between refreshes of the KEDA answers (one ScaledObject list, one query per signal and "
        "window declared)",
    ),
    Setting(
        "--keda-namespaces",
        _namespaces,
        None,
        "comma-separated namespaces whose ScaledObjects declare questions (default: the whole cluster)",
        metavar="NS,...",
    ),
    Setting(
        "--keda-advertised-hosts",
        _hosts,
        ",".join(DEFAULT_HOSTS),
        "comma-separated host names of this automator: an external trigger whose scalerAddress names one "
        "declares a question",
        metavar="HOST,...",
    ),
    Setting(
        "--keda-max-age-seconds",
        spec.number(1, DAY),
        "120",
        "KEDA answers 503 when a pod's newest recorded sample is older than this",
    ),
    Setting(
        "--keda-pod-grace-seconds",
        spec.number(0, DAY),
        "120",
        "a pod started this recently may lack data without failing its workload's answer",
    ),
    Setting(
        "--keda-forget-seconds",
        spec.number(1, 30 * DAY),
        "600",
        "stop refreshing a signal/window or namespace nobody asked about for this long",
    ),
    Setting(
        "--keda-max-queries",
        spec.integer(1, 1000),
        "32",
        "distinct signal/window pairs kept fresh (each costs one query per refresh)",
    ),
    Setting(
        "--keda-max-namespaces",
        spec.integer(1, 10_000),
        "100",
        "namespaces whose pods are kept fresh (each costs four list calls per refresh)",
    ),
    Setting(
        "--keda-client-new-questions",
        spec.integer(1, 1000),
        "8",
        "on-demand mode: new signal/window or namespace entries one client address may add per refresh "
        "(past it: 503 warming_up, nothing stored)",
    ),
    Setting(
        "--keda-first-wait-seconds",
        spec.number(0.1, 60),
        "2",
        "a new question waits this long for its first query, then answers 503 warming_up "
        "(keep it under the trigger's timeout, 3 s by default)",
    ),
    Setting("--keda-bearer-token-file", str, None, "file of accepted bearer tokens, one per line"),
    Setting(
        "--keda-api-key-file", str, None, "file of accepted API keys (X-API-KEY or api_key), one per line"
    ),
    Setting("--keda-basic-auth-file", str, None, "file of accepted USER:PASSWORD lines (basic auth)"),
    Setting("--keda-tls-cert-file", str, None, "certificate (PEM) of the KEDA HTTPS listener"),
    Setting("--keda-tls-key-file", str, None, "private key (PEM) of the KEDA HTTPS listener"),
    Setting(
        "--keda-tls-client-ca-file",
        str,
        None,
        "CA (PEM) whose client certificates the HTTPS listener and the external scaler require (mutual TLS)",
    ),
    Setting("--keda-tls-port", spec.port, "8443", "port of the KEDA HTTPS listener (with a certificate)"),
    Setting(
        "--keda-tls-only",
        spec.boolean,
        "false",
        "serve the KEDA routes on the HTTPS listener only, not on the plain main port (needs a certificate)",
        action="switch",
    ),
    Setting(
        "--keda-tls-max-connections-per-source",
        spec.integer(1, 64),
        "8",
        "connections one source address may hold at once on the KEDA HTTPS listener (of its 16 workers)",
    ),
    Setting("--keda-grpc-port", spec.integer(0, 65535), "0", "port of the KEDA external scaler (0: off)"),
    Setting("--keda-grpc-workers", spec.integer(1, 256), "8", "threads answering external scaler calls"),
    Setting(
        "--keda-grpc-max-streams",
        spec.integer(0, 256),
        "4",
        "StreamIsActive streams at once (each holds a worker thread; must be below the workers)",
    ),
)
KEDA_GROUP = "KEDA endpoints (docs/keda.md)"


# Each default once, in the table above: resolved as if no flag or variable were given.
_DEFAULTS: dict[str, Any] = spec.resolve(argparse.Namespace(), KEDA_SETTINGS, {})


@dataclass(frozen=True)
class KedaSettings:
    keda_refresh_seconds: float = _DEFAULTS["keda_refresh_seconds"]
    keda_namespaces: tuple[str, ...] | None = _DEFAULTS["keda_namespaces"]
    keda_advertised_hosts: tuple[str, ...] = _DEFAULTS["keda_advertised_hosts"]
    keda_max_age_seconds: float = _DEFAULTS["keda_max_age_seconds"]
    keda_pod_grace_seconds: float = _DEFAULTS["keda_pod_grace_seconds"]
    keda_forget_seconds: float = _DEFAULTS["keda_forget_seconds"]
    keda_max_queries: int = _DEFAULTS["keda_max_queries"]
    keda_max_namespaces: int = _DEFAULTS["keda_max_namespaces"]
    keda_client_new_questions: int = _DEFAULTS["keda_client_new_questions"]
    keda_first_wait_seconds: float = _DEFAULTS["keda_first_wait_seconds"]
    keda_bearer_token_file: str | None = _DEFAULTS["keda_bearer_token_file"]
    keda_api_key_file: str | None = _DEFAULTS["keda_api_key_file"]
    keda_basic_auth_file: str | None = _DEFAULTS["keda_basic_auth_file"]
    keda_tls_cert_file: str | None = _DEFAULTS["keda_tls_cert_file"]
    keda_tls_key_file: str | None = _DEFAULTS["keda_tls_key_file"]
    keda_tls_client_ca_file: str | None = _DEFAULTS["keda_tls_client_ca_file"]
    keda_tls_port: int = _DEFAULTS["keda_tls_port"]
    keda_tls_only: bool = _DEFAULTS["keda_tls_only"]
    keda_tls_max_connections_per_source: int = _DEFAULTS["keda_tls_max_connections_per_source"]
    keda_grpc_port: int = _DEFAULTS["keda_grpc_port"]
    keda_grpc_workers: int = _DEFAULTS["keda_grpc_workers"]
    keda_grpc_max_streams: int = _DEFAULTS["keda_grpc_max_streams"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    spec.add_arguments(parser.add_argument_group(KEDA_GROUP), KEDA_SETTINGS)


def keda_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> KedaSettings:
    settings = KedaSettings(**spec.resolve(args, KEDA_SETTINGS, environ))
    if bool(settings.keda_tls_cert_file) != bool(settings.keda_tls_key_file):
        raise SettingError("--keda-tls-cert-file and --keda-tls-key-file: give both or neither")
    if settings.keda_grpc_port and settings.keda_grpc_max_streams >= settings.keda_grpc_workers:
        raise SettingError(
            "--keda-grpc-max-streams: must be below --keda-grpc-workers (streams would starve the calls)"
        )
    if settings.keda_tls_only and not settings.keda_tls_cert_file:
        raise SettingError("--keda-tls-only: needs --keda-tls-cert-file and --keda-tls-key-file")
    if settings.keda_tls_client_ca_file and not settings.keda_tls_cert_file:
        raise SettingError("--keda-tls-client-ca-file: needs --keda-tls-cert-file and --keda-tls-key-file")
    config = auth_config(settings)
    if settings.keda_tls_cert_file and settings.keda_tls_key_file:  # usable now, not at the first client
        certs.load(
            certs.TlsFiles(
                settings.keda_tls_cert_file, settings.keda_tls_key_file, settings.keda_tls_client_ca_file
            )
        )
    if settings.keda_grpc_port and config.enabled and not settings.keda_tls_client_ca_file:
        raise SettingError(
            "--keda-grpc-port: with credentials configured the external scaler requires mutual TLS: set "
            "--keda-tls-client-ca-file (KEDA sends no tokens to external scalers, only client certificates)"
        )
    return settings


def auth_config(settings: KedaSettings) -> auth.AuthConfig:
    """The accepted credentials (SettingError naming the flag of an unreadable or empty file)."""
    ca = settings.keda_tls_client_ca_file
    if ca:
        try:
            with open(ca, "rb") as f:
                if b"-----BEGIN CERTIFICATE-----" not in f.read():
                    raise SettingError(f"--keda-tls-client-ca-file: {ca} holds no PEM certificate")
        except OSError as e:
            raise SettingError(f"--keda-tls-client-ca-file: cannot read {ca}: {e.strerror or e}") from None
    return auth.load(
        settings.keda_bearer_token_file, settings.keda_api_key_file, settings.keda_basic_auth_file, ca
    )
