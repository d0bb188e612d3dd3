"""The KEDA endpoints joined to the service: cache, blueprint, external scaler, HTTPS listener.

`attach` registers the /keda/v1/ routes on the service's app (no thread starts); `start` starts the
refresh (declared questions, or the on-demand cache when the cluster has no ScaledObject API) and opens the
gRPC and HTTPS listeners when configured.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flask import Flask
from prometheus_client import CollectorRegistry

from automator.keda import auth
from automator.keda.answers import KedaAnswers
from automator.keda.cache import CacheConfig, KedaCache
from automator.keda.certs import ReloadingTLS, TlsFiles
from automator.keda.http import blueprint
from automator.keda.metrics import KedaMetrics
from automator.keda.settings import KedaSettings, auth_config
from automator.keda.snapshot import SnapshotNamespaces
from automator.keda.table import DeclaredSource, DeclaredTable, TableConfig
from automator.keda.workloads import Namespace

log = logging.getLogger(__name__)
EXTENSION = "gpu_steward_keda"


@dataclass
class KedaRuntime:
    cache: KedaAnswers
    settings: KedaSettings
    listen_address: str
    auth: auth.AuthConfig
    tls: ReloadingTLS | None = None  # the listeners' certificates, loaded when the service is built
    stoppers: list[Callable[[], None]] = field(default_factory=list)
    grpc_port: int | None = None
    https_port: int | None = None

    def start(self) -> None:
        """Open the external scaler and the HTTPS listener when their settings ask for them."""
        s = self.settings
        tls = self.tls
        self.cache.start()
        self.stoppers.append(lambda: self.cache.stop(timeout=5))
        if s.keda_grpc_port:
            from automator.keda.scaler import ExternalScaler, serve

            ca = s.keda_tls_client_ca_file
            scaler = ExternalScaler(
                self.cache,
                self.cache.metrics,
                max_streams=s.keda_grpc_max_streams,
                auth=self.auth,
                client_verified=bool(ca),
            )
            server, self.grpc_port = serve(
                scaler,
                self.listen_address,
                s.keda_grpc_port,
                s.keda_grpc_workers,
                tls=tls if ca else None,  # credentials configured: mutual TLS (the settings require a CA)
            )
            self.stoppers.append(scaler.stop)
            self.stoppers.append(lambda: server.stop(grace=5).wait(6))
            log.info("KEDA external scaler on %s:%d", self.listen_address, self.grpc_port)
        if tls is not None:
            from automator.keda.tls import THREADS, serve_tls

            app = Flask("gpu-steward-keda")
            ca = s.keda_tls_client_ca_file
            app.register_blueprint(
                blueprint(self.cache, self.auth, self.cache.metrics, THREADS // 2, client_verified=bool(ca))
            )
            https = serve_tls(
                app,
                self.listen_address,
                s.keda_tls_port,
                tls,
                per_source=s.keda_tls_max_connections_per_source,
            )
            self.https_port = https.bind_addr[1]
            self.stoppers.append(https.stop)
            log.info("KEDA HTTPS endpoint on %s:%d", self.listen_address, s.keda_tls_port)

    def stop(self) -> None:
        for stop in reversed(self.stoppers):
            stop()
        self.stoppers.clear()


def attach(
    app: Flask,
    settings: Any,  # automator.settings.ServiceSettings (not imported: the service imports this module)
    registry: CollectorRegistry,
    run_query: Callable[[str], Sequence[Mapping[str, Any]]],
) -> KedaRuntime:
    """Register the KEDA routes on `app`; the runtime is also kept in app.extensions[EXTENSION]."""
    s: KedaSettings = settings.keda
    list_namespace: Callable[[str], Namespace]
    source: DeclaredSource
    if settings.cluster_snapshot:
        snapshot = SnapshotNamespaces(Path(settings.cluster_snapshot))
        list_namespace, source = snapshot.namespace, snapshot
    else:
        from automator.keda.kube import ClusterLister, NamespaceLister
        from automator.kube import api_client

        api = api_client(settings.kubeconfig)
        list_namespace = NamespaceLister(api, settings.api_timeout).namespace
        source = ClusterLister(api, s.keda_namespaces or (), settings.api_timeout)
    metrics = KedaMetrics(registry)
    ondemand = KedaCache(
        run_query,
        list_namespace,
        CacheConfig(
            refresh_seconds=s.keda_refresh_seconds,
            max_age_seconds=s.keda_max_age_seconds,
            pod_grace_seconds=s.keda_pod_grace_seconds,
            forget_seconds=s.keda_forget_seconds,
            max_queries=s.keda_max_queries,
            max_namespaces=s.keda_max_namespaces,
            first_wait_seconds=s.keda_first_wait_seconds,
            client_new_keys=s.keda_client_new_questions,
        ),
        metrics,
    )
    table = DeclaredTable(
        run_query,
        TableConfig(
            max_age_seconds=s.keda_max_age_seconds,
            pod_grace_seconds=s.keda_pod_grace_seconds,
            refresh_seconds=s.keda_refresh_seconds,
            advertised_hosts=s.keda_advertised_hosts,
        ),
        metrics,
    )
    cache = KedaAnswers(table, ondemand, source, metrics)
    config = auth_config(s)
    if not s.keda_tls_only:  # else the KEDA routes are served on the HTTPS listener only
        # At most half the service's threads wait on a first fetch: the others keep the probes answered.
        app.register_blueprint(blueprint(cache, config, metrics, max(1, settings.http_threads // 2)))
    tls = None
    if s.keda_tls_cert_file and s.keda_tls_key_file:  # loaded now: a bad file is a SettingError (exit 2)
        tls = ReloadingTLS(TlsFiles(s.keda_tls_cert_file, s.keda_tls_key_file, s.keda_tls_client_ca_file))
    runtime = KedaRuntime(cache, s, settings.listen_address, config, tls)
    app.extensions[EXTENSION] = runtime
    return runtime
