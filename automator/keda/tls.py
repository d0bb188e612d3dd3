"""The KEDA endpoint over HTTPS when a certificate and key are given: its own listener serving only the
KEDA routes (one request at a time, so bounded; each answer comes from memory in about a millisecond)."""

from __future__ import annotations

import ssl
import threading

from flask import Flask
from werkzeug.serving import BaseWSGIServer, make_server

# A client that sends nothing for this long is dropped (a slow client cannot hold the listener).
SOCKET_TIMEOUT_SECONDS = 10.0


def serve_tls(app: Flask, address: str, port: int, cert_file: str, key_file: str) -> BaseWSGIServer:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    server = make_server(address, port, app, threaded=False, ssl_context=context)
    server.timeout = SOCKET_TIMEOUT_SECONDS
    server.socket.settimeout(None)
    threading.Thread(target=server.serve_forever, name="keda-https", daemon=True).start()
    return server
