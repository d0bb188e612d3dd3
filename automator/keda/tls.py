"""The KEDA endpoint over HTTPS when a certificate and key are given: its own listener serving only the
KEDA routes, with at most MAX_CONNECTIONS connections at once (more are closed at once), and every
connection's TLS handshake, reads and writes bounded by SOCKET_TIMEOUT_SECONDS in its own thread, so a
slow or silent client cannot hold the listener."""

from __future__ import annotations

import ssl
import threading
from typing import Any

from flask import Flask
from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

SOCKET_TIMEOUT_SECONDS = 10.0
MAX_CONNECTIONS = 16


class _Handler(WSGIRequestHandler):
    timeout = SOCKET_TIMEOUT_SECONDS  # per connection, the handshake included


class _BoundedTLSServer(ThreadedWSGIServer):
    daemon_threads = True

    def __init__(self, address: str, port: int, app: Flask, context: ssl.SSLContext, limit: int) -> None:
        super().__init__(address, port, app, handler=_Handler)  # plain listener: TLS per connection below
        self._tls = context
        self._slots = threading.BoundedSemaphore(limit)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        sock.settimeout(SOCKET_TIMEOUT_SECONDS)
        # The handshake runs on the first read, in the connection's thread, under the timeout.
        return self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # over the limit: closed, never queued without bound
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a failed handshake or a client timeout: nothing to report per connection


def serve_tls(
    app: Flask, address: str, port: int, cert_file: str, key_file: str, limit: int = MAX_CONNECTIONS
) -> ThreadedWSGIServer:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    server = _BoundedTLSServer(address, port, app, context, limit)
    threading.Thread(target=server.serve_forever, name="keda-https", daemon=True).start()
    return server
