"""The HTTP server over real sockets: routes, HEAD, gzip, OpenMetrics, name[], probes, timeouts, bounded
threads with many idle connections, and the web config file (TLS, basic auth)."""

from __future__ import annotations

import base64
import contextlib
import gzip
import http.client
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from exporter.exposition import Exposition
from exporter.loop import CollectionLoop
from exporter.server import HttpServer, Limits, make_handler, parse_request
from exporter.sources.mock import MockAttributor, MockSource
from exporter.sources.scenario import load_scenario
from exporter.webconfig import WebConfig, WebConfigError, load_web_config


def make_loop() -> CollectionLoop:
    scenario = load_scenario(None)
    return CollectionLoop(MockSource(scenario), MockAttributor(scenario), "n", 10.0)


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[HttpServer, CollectionLoop]]:
    web: WebConfig = getattr(request, "param", None) or WebConfig()
    loop = make_loop()
    exposition = Exposition(loop, "mock")
    loop.on_snapshot = exposition.prepare
    server = HttpServer(
        make_handler(exposition, loop, web),
        "127.0.0.1",
        0,
        Limits(workers=2, timeout=1.0, idle_timeout=2.0),
        ssl_context=web.ssl_context,
        extra_headers=web.headers,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, loop
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def call(server: HttpServer, method: str, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
    try:
        conn.request(method, path, headers=headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_probes_follow_the_loop(served: tuple[HttpServer, CollectionLoop]) -> None:
    server, loop = served
    assert call(server, "GET", "/readyz")[0] == 503  # no snapshot yet
    assert call(server, "GET", "/healthz")[0] == 200  # within the first intervals
    loop.collect_once()
    assert call(server, "GET", "/readyz")[0] == 200
    loop.started = loop.clock() - 1000  # pretend nothing completed for a long time
    assert loop.snapshot is not None
    object.__setattr__(loop.snapshot, "monotonic", loop.clock() - 61)
    assert call(server, "GET", "/healthz")[0] == 503


def test_metrics_plain_gzip_openmetrics_head_and_filter(served: tuple[HttpServer, CollectionLoop]) -> None:
    server, loop = served
    loop.collect_once()
    status, headers, plain = call(server, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert (
        b"gpu_steward_gpu_utilization_ratio{" in plain
        and b"gpu_steward_exporter_snapshot_age_seconds" in plain
    )
    _, headers, zipped = call(server, "GET", "/metrics", **{"Accept-Encoding": "gzip"})
    assert headers["content-encoding"] == "gzip"
    unzipped = gzip.decompress(zipped)  # two members: the snapshot, then the per-scrape tail
    assert (
        unzipped.split(b"# HELP gpu_steward_exporter_build_info")[0]
        == plain.split(b"# HELP gpu_steward_exporter_build_info")[0]
    )
    _, headers, om = call(server, "GET", "/metrics", Accept="application/openmetrics-text; version=1.0.0")
    assert headers["content-type"].startswith("application/openmetrics-text")
    assert om.endswith(b"# EOF\n") and b"# TYPE gpu_steward_gpu_energy_joules counter" in om
    status, headers, body = call(server, "HEAD", "/metrics")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0
    _, _, only = call(server, "GET", "/metrics?name[]=gpu_steward_gpu_lost&name[]=process_max_fds")
    names = {line.split()[2] for line in only.decode().splitlines() if line.startswith("# TYPE")}
    assert names == {"gpu_steward_gpu_lost", "process_max_fds"}
    assert call(server, "GET", "/metrics?name[]=")[2].count(b"# TYPE") == plain.count(b"# TYPE")
    assert call(server, "POST", "/metrics")[0] == 405
    assert call(server, "GET", "/nothing")[0] == 404


def test_a_silent_connection_is_closed_after_its_timeout(served: tuple[HttpServer, CollectionLoop]) -> None:
    server, _ = served
    with socket.create_connection(server.server_address[:2], timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # never finishes its headers
        started = time.monotonic()
        assert sock.recv(1024) == b""  # closed by the server
        assert time.monotonic() - started < 8


def test_idle_connections_hold_no_thread(served: tuple[HttpServer, CollectionLoop]) -> None:
    server, loop = served
    loop.collect_once()
    before = threading.active_count()
    idle = [socket.create_connection(server.server_address[:2]) for _ in range(200)]
    try:
        assert call(server, "GET", "/metrics")[0] == 200  # served while 200 connections sit idle
        assert threading.active_count() <= before + 2  # at most the pool's 2 workers
    finally:
        for sock in idle:
            sock.close()


def test_keep_alive_serves_several_requests_on_one_connection(
    served: tuple[HttpServer, CollectionLoop],
) -> None:
    server, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
    try:
        for _ in range(3):
            conn.request("GET", "/healthz")
            assert conn.getresponse().read() == b"ok\n"
    finally:
        conn.close()


def test_parse_request_rejects_garbage() -> None:
    assert parse_request(b"GARBAGE") is None
    assert parse_request(b"GET / SPDY/3") is None
    req = parse_request(b"GET /metrics?name[]=a HTTP/1.1\r\nHost: x")
    assert req is not None and req.query == {"name[]": ["a"]} and req.headers == {"host": "x"}


# --- the web config file ---


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("certs")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(tmp / "server.key"),
            "-out",
            str(tmp / "server.crt"),
        ],
        check=True,
        capture_output=True,
    )
    return tmp


def web_config(certs: Path, users: bool = True) -> Path:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    text = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
    if users:
        text += f"basic_auth_users:\n  prom: '{hashed}'\n"
    text += "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
    path = certs / "web.yaml"
    path.write_text(text)
    return path


def test_tls_and_basic_auth(certs: Path) -> None:
    web = load_web_config(web_config(certs))
    loop = make_loop()
    loop.collect_once()
    server = HttpServer(
        make_handler(Exposition(loop, "mock"), loop, web),
        "127.0.0.1",
        0,
        ssl_context=web.ssl_context,
        extra_headers=web.headers,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    context = ssl.create_default_context(cafile=str(certs / "server.crt"))
    try:

        def get(path: str, auth: str | None = None) -> tuple[int, dict[str, str]]:
            conn = http.client.HTTPSConnection(
                "127.0.0.1", server.server_address[1], timeout=5, context=context
            )
            headers = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {}
            try:
                conn.request("GET", path, headers=headers)
                r = conn.getresponse()
                r.read()
                return r.status, {k.lower(): v for k, v in r.getheaders()}
            finally:
                conn.close()

        assert get("/metrics")[0] == 401
        assert get("/metrics", "prom:wrong")[0] == 401
        status, headers = get("/metrics", "prom:s3cret")
        assert status == 200 and headers["x-content-type-options"] == "nosniff"
        assert get("/healthz")[0] == 200  # probes carry no credentials
        with socket.create_connection(server.server_address[:2], timeout=5) as plain:  # no TLS: refused
            plain.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            try:
                answer = plain.recv(1024)
            except ConnectionResetError:
                answer = b""
            assert not answer.startswith(b"HTTP/1.1 200")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_half_sent_tls_handshake_is_closed_after_the_request_timeout(certs: Path) -> None:
    # The handshake counts against --http-timeout (1 s here), not the keep-alive idle timeout (60 s here).
    web = load_web_config(web_config(certs, users=False))
    loop = make_loop()
    server = HttpServer(
        make_handler(Exposition(loop, "mock"), loop, web),
        "127.0.0.1",
        0,
        Limits(workers=2, timeout=1.0, idle_timeout=60.0),
        ssl_context=web.ssl_context,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(server.server_address[:2], timeout=30) as sock:
            sock.sendall(b"\x16\x03\x01\x02\x00\x01")  # a ClientHello's first bytes, never the rest
            started = time.monotonic()
            with contextlib.suppress(ConnectionResetError):  # closed by the server, either way
                assert sock.recv(1024) == b""
            assert time.monotonic() - started < 10
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("tls_server_config: {cert_file: server.crt}\n", "tls_server_config.key_file"),
        ("basic_auth_users: {prom: plaintext}\n", "basic_auth_users.prom"),
        (
            "tls_server_config: {cert_file: server.crt, key_file: server.key, min_version: SSL3}\n",
            "min_version",
        ),
        ("unknown: 1\n", "(document).unknown"),
        ("basic_auth_users: {a: '$2y$x'}\nbasic_auth_users: {}\n", "duplicate key"),
        ("tls_server_config: {cert_file: nope.crt, key_file: server.key}\n", "no such file"),
    ],
)
def test_bad_web_config_names_the_field(certs: Path, text: str, named: str) -> None:
    path = certs / "bad.yaml"
    path.write_text(text)
    with pytest.raises(
        WebConfigError, match=named.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")
    ):
        load_web_config(path)
