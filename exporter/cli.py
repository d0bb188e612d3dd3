"""`gpu-exporter` (also `python -m exporter`): wire config, source, attribution, collection, HTTP."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from types import FrameType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from exporter.collector import CollectionLoop, ExporterCollector, FamilyExtension
from exporter.config import Config, ConfigError, logging_level, parse_config
from exporter.model import ATTRIBUTION_SOURCES, Attribution, Attributor, ContainerRef, Source
from exporter.scenario import ScenarioError, load_scenario
from exporter.sources import SourceError

log = logging.getLogger("exporter")

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class DegradedAttributor:
    """Stands in when the real attributor cannot be built: everything unattributed, status 0."""

    def refresh(self) -> None:
        pass

    def attribute(
        self, pids: Sequence[int], devices: Mapping[int, Collection[str]] | None = None
    ) -> dict[int, Attribution]:
        return {pid: Attribution("unresolved") for pid in pids}

    def allocations(self) -> dict[str, list[ContainerRef]]:
        return {}

    def status(self) -> dict[str, bool]:
        return dict.fromkeys(ATTRIBUTION_SOURCES, False)


def build_source(config: Config) -> tuple[Source, Attributor, str]:
    """The source, its attributor and the node name. Raises ScenarioError / SourceError."""
    if config.source == "mock":
        from exporter.sources.mock import MockAttributor, MockSource

        scenario = load_scenario(config.scenario)
        return MockSource(scenario), MockAttributor(scenario), config.node_name or scenario.node
    from exporter.sources.nvml import NvmlSource

    source = NvmlSource()
    node = config.node_name or socket.gethostname()
    try:
        # Imported here: the mock source and the tests need neither gRPC nor the Kubernetes client.
        from exporter.attribution import KubeletAttributor

        attributor: Attributor = KubeletAttributor(
            node,
            proc_root=config.proc_root,
            podresources_socket=config.podresources_socket,
            use_kube_api=config.kube_api,
            refresh_seconds=config.attribution_refresh,
        )
    except Exception:
        log.exception("attribution unavailable; every GPU process is reported unattributed")
        attributor = DegradedAttributor()
    return source, attributor, node


def extensions(config: Config) -> list[FamilyExtension]:
    out: list[FamilyExtension] = []
    if "dcgm" in config.compat:
        from exporter.dcgm_compat import dcgm_families

        out.append(dcgm_families)
    return out


def make_app(registry: CollectorRegistry, loop: CollectionLoop) -> WsgiApp:
    """/metrics from the registry, /healthz from the collection loop's progress."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            ok = loop.healthy()
            start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"ok\n" if ok else b"collection stalled\n"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html")])
            return [
                b'<html><body><h1>gpu-steward exporter</h1><a href="/metrics">/metrics</a></body></html>\n'
            ]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not worth a log line
        pass


def serve(app: WsgiApp, address: str, port: int) -> WSGIServer:
    family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]

    class Server(ThreadingWSGIServer):
        address_family = family

    return make_server(address, port, app, server_class=Server, handler_class=_QuietHandler)


def run(config: Config, stop: threading.Event) -> int:
    try:
        source, attributor, node = build_source(config)
    except ScenarioError as e:
        print(f"gpu-exporter: error: {e}", file=sys.stderr)
        return 2
    except SourceError as e:
        print(f"gpu-exporter: error: {e}", file=sys.stderr)
        return 1
    loop = CollectionLoop(source, attributor, node, config.interval, extensions(config))
    registry = CollectorRegistry()
    registry.register(ExporterCollector(loop, source.name))
    ProcessCollector(registry=registry)  # the exporter's own CPU and memory
    try:
        server = serve(make_app(registry, loop), config.listen_address, config.port)
    except OSError as e:
        print(
            f"gpu-exporter: error: cannot listen on {config.listen_address}:{config.port}: {e}",
            file=sys.stderr,
        )
        source.close()
        return 1
    loop.start()
    http = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    http.start()
    log.info(
        "serving %s source for node %s on %s:%d every %gs%s",
        source.name,
        node,
        config.listen_address,
        config.port,
        config.interval,
        f" (compat: {', '.join(config.compat)})" if config.compat else "",
    )
    stop.wait()
    log.info("stopping")
    server.shutdown()
    server.server_close()
    loop.stop()
    source.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_config(argv, os.environ)
    except ConfigError as e:
        print(f"gpu-exporter: error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging_level(config), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return run(config, stop)
