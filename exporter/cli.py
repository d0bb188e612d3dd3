"""`gpu-exporter` (also `python -m exporter`): wire settings, source, attribution, collection, HTTP.

The composition root: the one module that picks the adapters (imported late, so that the mock source
needs neither NVML, gRPC nor the Kubernetes client).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from exporter.attribution.degraded import DegradedAttributor
from exporter.exposition import Exposition
from exporter.loop import CollectionLoop, FamilyExtension
from exporter.ports import Attributor, Source, SourceError
from exporter.server import HttpServer, Limits, make_handler
from exporter.settings import Config, logging_level, parse_config
from exporter.sources.scenario import ScenarioError, load_scenario
from exporter.webconfig import WebConfig, WebConfigError, load_web_config
from steward_common.printable import log_handler, printable
from steward_common.settingspec import SettingError

log = logging.getLogger("exporter")


def build_source(config: Config) -> tuple[Source, Attributor, str]:
    """The source, its attributor and the node name. Raises ScenarioError / SourceError."""
    if config.source == "mock":
        from exporter.sources.mock import MockAttributor, MockSource, ScenarioFile

        if config.scenario is not None and config.scenario_reload:
            feed = ScenarioFile(config.scenario)
            scenario = feed.current()
            return (
                MockSource(scenario, follow=feed.current),
                MockAttributor(scenario, follow=feed.current),
                config.node_name or scenario.node,
            )
        scenario = load_scenario(config.scenario)
        return MockSource(scenario), MockAttributor(scenario), config.node_name or scenario.node
    from exporter.sources.nvml import NvmlSource

    source = NvmlSource()
    node = config.node_name or socket.gethostname()
    try:
        # Imported here: the mock source and the tests need neither gRPC nor the Kubernetes client.
        from exporter.attribution.kubelet import KubeletAttributor

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


def _http_server(config: Config, exposition: Exposition, loop: CollectionLoop, web: WebConfig) -> HttpServer:
    """The server with the configured bounds (raises OSError when it cannot listen)."""
    limits = Limits(
        workers=config.http_workers,
        max_connections=config.http_max_connections,
        timeout=config.http_timeout,
        idle_timeout=config.http_idle_timeout,
    )
    return HttpServer(
        make_handler(exposition, loop, web),
        config.listen_address,
        config.port,
        limits,
        ssl_context=web.ssl_context,
        extra_headers=web.headers,
    )


def run(config: Config, stop: threading.Event) -> int:
    try:
        web = load_web_config(config.web_config_file) if config.web_config_file else WebConfig()
    except WebConfigError as e:
        print(f"gpu-exporter: error: --web.config.file: {printable(str(e))}", file=sys.stderr)
        return 2
    try:
        source, attributor, node = build_source(config)
    except ScenarioError as e:
        print(f"gpu-exporter: error: {printable(str(e))}", file=sys.stderr)
        return 2
    except SourceError as e:
        print(f"gpu-exporter: error: {printable(str(e))}", file=sys.stderr)
        return 1
    loop = CollectionLoop(
        source, attributor, node, config.interval, extensions(config), config.health_stale_intervals
    )
    exposition = Exposition(loop, source.name)
    loop.on_snapshot = exposition.prepare  # render once per collection, in the collection thread
    try:
        server = _http_server(config, exposition, loop, web)
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
        "serving %s source for node %s on %s://%s:%d every %gs%s",
        source.name,
        node,
        "https" if web.ssl_context else "http",
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
    except SettingError as e:
        print(f"gpu-exporter: error: {printable(str(e))}", file=sys.stderr)
        return 2
    # pod names and messages reach the log: escaped, so that none can forge or split a line
    logging.basicConfig(
        level=logging_level(config), handlers=[log_handler("%(asctime)s %(levelname)s %(name)s: %(message)s")]
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return run(config, stop)
