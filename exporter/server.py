"""The HTTP server: /metrics from the registry, /healthz from the collection loop's progress."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from exporter.loop import CollectionLoop

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


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
