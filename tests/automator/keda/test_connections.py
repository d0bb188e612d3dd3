"""Probes and connections: /healthz and /readyz on a port of their own, a per-source-address cap on the main
port and on the KEDA HTTPS listener, --keda-tls-only."""

from __future__ import annotations

import shutil
import socket
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

from automator.keda.auth import AuthConfig
from automator.keda.certs import ReloadingTLS, TlsFiles
from automator.keda.http import blueprint
from automator.keda.tls import serve_tls
from automator.keda.wiring import EXTENSION, KedaRuntime
from automator.service.main import build
from automator.service.web import http_server, probe_app
from steward_common.settingspec import SettingError
from tests.automator.keda.certs import Certs, make_certs
from tests.automator.keda.test_hostile import _cache
from tests.automator.keda.test_wiring import QUERY, settings
from tools.fakes.promserver import free_port


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl for certificates")
    return make_certs(tmp_path_factory.mktemp("certs"))


def _closed_at_once(sock: socket.socket) -> bool:
    """Whether the server closed the connection (a read returns nothing) within a few seconds."""
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except (TimeoutError, ConnectionResetError):
        return False


@pytest.fixture
def main_port(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """The service's main port (cap 2 per source) and its probe port, from the real wiring."""
    wiring = build(settings(tmp_path))
    port, probe_port = free_port(), free_port()
    main = http_server(wiring.app, "127.0.0.1", port, 2, per_source=2)
    probes = http_server(probe_app(wiring.service), "127.0.0.1", probe_port, 2)
    for server in (main, probes):
        threading.Thread(target=server.run, daemon=True).start()
    yield port, probe_port
    main.close()
    probes.close()


def test_one_source_holds_at_most_its_cap_on_the_main_port_and_probes_answer(
    main_port: tuple[int, int],
) -> None:
    port, probe_port = main_port
    held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
    try:
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)
        assert _closed_at_once(extra)  # the third from the same address
        extra.close()
        for sock in held:  # the two it holds still work
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(64).startswith(b"HTTP/1.1 200")
        with urllib.request.urlopen(f"http://127.0.0.1:{probe_port}/healthz", timeout=5) as r:
            assert r.status == 200
        with pytest.raises(urllib.error.HTTPError) as e:  # readiness: no pass yet, from the probe port
            urllib.request.urlopen(f"http://127.0.0.1:{probe_port}/readyz", timeout=5)
        assert e.value.code == 503
        with pytest.raises(urllib.error.HTTPError) as e:  # the probe port serves nothing else
            urllib.request.urlopen(f"http://127.0.0.1:{probe_port}/metrics", timeout=5)
        assert e.value.code == 404
    finally:
        for sock in held:
            sock.close()
    # Closed connections give their places back (once the server has seen them close).
    for _ in range(100):
        again = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
        answered = []
        for sock in again:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                answered.append(sock.recv(64).startswith(b"HTTP/1.1 200"))
            except ConnectionResetError:
                answered.append(False)
            sock.close()
        if all(answered):
            break
    else:
        pytest.fail("the source never got its places back")


def test_one_source_holds_at_most_its_cap_on_the_keda_https_listener(certs: Certs) -> None:
    cache = _cache()
    app = Flask("t")
    app.register_blueprint(blueprint(cache, AuthConfig(), cache.metrics))
    tls = ReloadingTLS(TlsFiles(str(certs.server_cert), str(certs.server_key)))
    server = serve_tls(app, "127.0.0.1", 0, tls, per_source=3)
    port = server.bind_addr[1]
    context = ssl.create_default_context(cafile=str(certs.ca))
    try:
        slow = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]  # silent clients
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)
        assert _closed_at_once(extra)
        extra.close()
        for sock in slow:
            sock.close()
        # Their places are given back as they close: a KEDA poll gets through.
        for _ in range(50):
            try:
                url = f"https://127.0.0.1:{port}/keda/v1/profiles"
                with urllib.request.urlopen(url, context=context, timeout=5) as r:
                    assert r.status == 200
                break
            except (urllib.error.URLError, ConnectionError):
                continue
        else:
            pytest.fail("the listener never admitted the source again")
    finally:
        server.stop()
        cache.stop()


def test_keda_tls_only_keeps_the_keda_routes_off_the_plain_port(tmp_path: Path, certs: Certs) -> None:
    with pytest.raises(SettingError, match="--keda-tls-only"):
        settings(tmp_path, "--keda-tls-only")
    port = free_port()
    s = settings(
        tmp_path,
        "--listen-address", "127.0.0.1", "--keda-tls-only", "--keda-tls-port", str(port),
        "--keda-tls-cert-file", str(certs.server_cert), "--keda-tls-key-file", str(certs.server_key),
    )  # fmt: skip
    wiring = build(s)
    assert wiring.app.test_client().get(f"/keda/v1/metrics?{QUERY}").status_code == 404
    assert wiring.app.test_client().get("/healthz").status_code == 200
    runtime: KedaRuntime = wiring.app.extensions[EXTENSION]
    runtime.cache.refresh()
    runtime.start()
    try:
        context = ssl.create_default_context(cafile=str(certs.ca))
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(
                f"https://127.0.0.1:{port}/keda/v1/metrics?{QUERY}", context=context, timeout=10
            )
        assert e.value.code == 503  # served there (Prometheus is down in these settings)
    finally:
        runtime.stop()


def _slow_client(port: int, ca: Path, stop: threading.Event) -> None:
    """A client from another address that reconnects and trickles a request head, again and again."""
    context = ssl.create_default_context(cafile=str(ca))
    while not stop.is_set():
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"GET /keda/v1/profiles HTTP/1.1\r\nHost: x\r\n")
                while not stop.wait(0.2):
                    tls.sendall(b"X-Slow: 1\r\n")  # never the blank line that ends the head
        except OSError:
            continue  # cut (head deadline, per-source cap): reconnect at once


def test_reconnecting_slow_clients_leave_keda_polls_answered_within_its_timeout(certs: Certs) -> None:
    cache = _cache()
    app = Flask("t")
    app.register_blueprint(blueprint(cache, AuthConfig(), cache.metrics))
    tls = ReloadingTLS(TlsFiles(str(certs.server_cert), str(certs.server_key)))
    server = serve_tls(app, "127.0.0.1", 0, tls, per_source=8)  # the default of --keda-tls-max-...
    port = server.bind_addr[1]
    stop = threading.Event()
    slow = [
        threading.Thread(target=_slow_client, args=(port, certs.ca, stop), daemon=True) for _ in range(30)
    ]
    context = ssl.create_default_context(cafile=str(certs.ca))
    try:
        for t in slow:
            t.start()
        for _ in range(8):  # KEDA's poll from its own address, with KEDA's 3 s timeout, eight times
            url = f"https://127.0.0.1:{port}/keda/v1/profiles"
            with urllib.request.urlopen(url, context=context, timeout=3) as r:
                assert r.status == 200
    finally:
        stop.set()
        for t in slow:
            t.join(10)
        server.stop()
        cache.stop()
