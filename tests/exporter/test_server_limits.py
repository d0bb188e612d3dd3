"""The exporter's HTTP server under load it did not ask for: a hash bcrypt refuses stops the start, naming
the user; a flood of new passwords holds at most the bcrypt slots (a scrape with cached credentials still
finds a worker); the workers' queue is bounded (beyond, 503 at once); a TLS handshake must end within
--http-timeout. Every wait is on an event (a thread's answer, the server's pending count), never a sleep."""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest

from exporter.exposition import Exposition
from exporter.server import QUEUE_PER_WORKER, HttpServer, Limits, Request, Response, make_handler
from exporter.webconfig import MAX_CONCURRENT_CHECKS, WebConfig, WebConfigError, load_web_config
from tests.exporter.test_server import certs, make_loop, web_config

__all__ = ["certs"]  # the fixture, used by name

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4))
# The format's check passes (22 salt characters of bcrypt's alphabet), bcrypt refuses the salt: its last
# character may only be one of . O e u.
BAD_SALT = HASH[:28] + b"P" + HASH[29:]


def _basic(raw: str) -> str:
    return "Basic " + base64.b64encode(raw.encode()).decode()


Start = Callable[[HttpServer], HttpServer]


@pytest.fixture
def serve() -> Iterator[Start]:
    """Starts a server in a thread; every one started is stopped after the test."""
    started: list[tuple[HttpServer, threading.Thread]] = []

    def start(server: HttpServer) -> HttpServer:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _get(server: HttpServer, auth: str | None = None) -> tuple[int, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": auth} if auth else {})
        r = conn.getresponse()
        r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}
    finally:
        conn.close()


def test_a_hash_bcrypt_refuses_stops_the_start_naming_the_user(tmp_path: Path) -> None:
    """(The exit status 2 of the exporter itself: tests/exporter/test_basic_auth.py.)"""
    with pytest.raises(ValueError, match="Invalid salt"):
        bcrypt.checkpw(b"s3cret", BAD_SALT)  # what every request of the user raised
    path = tmp_path / "web.yaml"
    path.write_text(f"basic_auth_users:\n  prom: '{BAD_SALT.decode()}'\n")
    with pytest.raises(WebConfigError, match=r"basic_auth_users\.prom: bcrypt refuses the hash's salt"):
        load_web_config(path)


def test_a_refused_hash_given_in_code_is_a_refusal_not_an_error() -> None:
    web = WebConfig(users={"prom": BAD_SALT}, dummy_hash=HASH)
    assert web.check_basic(_basic("prom:s3cret")) is False


def test_new_passwords_beyond_the_bcrypt_slots_get_503_and_cached_ones_are_served(
    serve: Start,
) -> None:
    loop = make_loop()
    loop.collect_once()
    web = WebConfig(users={"prom": HASH}, dummy_hash=HASH)
    assert web.authorized("prom", "s3cret")  # Prometheus' credentials, checked once and cached
    server = serve(HttpServer(make_handler(Exposition(loop, "mock"), loop, web), "127.0.0.1", 0))
    for _ in range(MAX_CONCURRENT_CHECKS):  # a flood of wrong passwords holding every slot
        assert web._slots.acquire(blocking=False)
    try:
        status, headers = _get(server, _basic("prom:guess-1"))
        assert status == 503 and headers["retry-after"] == "1"
        assert _get(server, _basic("prom:s3cret"))[0] == 200
    finally:
        for _ in range(MAX_CONCURRENT_CHECKS):
            web._slots.release()
    assert _get(server, _basic("prom:guess-1"))[0] == 401  # a slot free: checked, refused


def test_the_workers_queue_is_bounded(serve: Start) -> None:
    release = threading.Event()

    def blocking(_request: Request) -> Response:
        release.wait(30)
        return Response(200, (), b"ok")

    server = serve(HttpServer(blocking, "127.0.0.1", 0, Limits(workers=1, timeout=30)))
    capacity = 1 + QUEUE_PER_WORKER
    answers: list[int] = []
    threads = [threading.Thread(target=lambda: answers.append(_get(server)[0])) for _ in range(capacity)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while server.pending() < capacity and time.monotonic() < deadline:
        time.sleep(0.01)  # polling the server's own count: the event waited for
    assert server.pending() == capacity
    assert _get(server)[0] == 503  # at once: the worker is still blocked
    release.set()
    for thread in threads:
        thread.join(30)
    assert answers == [200] * capacity


def test_a_tls_handshake_must_end_within_the_timeout(certs: Path, serve: Start) -> None:
    web = load_web_config(web_config(certs, users=False))
    loop = make_loop()
    server = serve(
        HttpServer(
            make_handler(Exposition(loop, "mock"), loop, web),
            "127.0.0.1",
            0,
            Limits(timeout=0.5, idle_timeout=60),
            ssl_context=web.ssl_context,
        ),
    )
    with socket.create_connection(server.server_address[:2], timeout=20) as silent:
        start = time.monotonic()
        with contextlib.suppress(ConnectionResetError):  # closed by the server, no handshake started
            assert silent.recv(1024) == b""
        assert time.monotonic() - start < 10  # the timeout and a sweep, not the 60 s idle timeout
    context = ssl.create_default_context(cafile=str(certs / "server.crt"))
    conn = http.client.HTTPSConnection("127.0.0.1", server.server_address[1], timeout=10, context=context)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().status in (200, 503)  # a handshake in time is served
    finally:
        conn.close()


def test_the_documented_limits_are_the_codes() -> None:
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "exporter.md").read_text().split())
    assert f"At most {MAX_CONCURRENT_CHECKS} bcrypt checks run at once" in text
    assert f"At most {QUEUE_PER_WORKER} requests per worker wait for one" in text
