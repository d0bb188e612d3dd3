"""The main port under hostile clients: /decisions only with `Bearer <token>` (any bytes a 401, never an
error), and no body accepted where no route takes one."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from automator import settings
from automator.service import main as service
from automator.service.web import DecisionsAccess
from tests.automator.service.test_service import make_service, resolved
from tools.fakes.promserver import free_port

ACCESS = DecisionsAccess(token="s3cret")


@pytest.mark.parametrize("header", ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"])
def test_the_bearer_token_is_accepted(header: str) -> None:
    assert ACCESS.check(header) is None


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "s3cret",  # without the scheme
        "Bearer",
        "Bearer ",
        "Bearer  s3cret",
        "Bearer s3cret ",
        "Bearer s3cret x",
        "Bearer s3cret\n",
        "Basic s3cret",
        "Bearers3cret",
        "Bearer s3crét",  # latin-1, as HTTP carries it
        "Bearer s3cret\u20ac",  # not even latin-1
        "Bearer wrong",
    ],
)
def test_anything_else_is_401(header: str | None) -> None:
    assert ACCESS.check(header) == 401


def test_decisions_over_http_needs_the_scheme() -> None:
    svc, _, _ = make_service()
    http = service.create_app(svc, ACCESS).test_client()
    assert http.get("/decisions", headers={"Authorization": "s3cret"}).status_code == 401
    assert http.get("/decisions", headers={"Authorization": "Bearer s3crét"}).status_code == 401
    assert http.get("/decisions", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_a_body_is_refused_before_it_is_read() -> None:
    svc, _, _ = make_service()
    port = free_port()
    server = service.http_server(service.create_app(svc), "127.0.0.1", port, threads=2)
    assert server.adj.max_request_body_size == 0
    assert server.adj.channel_timeout == service.HTTP_CHANNEL_TIMEOUT
    assert server.adj.connection_limit == service.HTTP_CONNECTION_LIMIT
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            # a gigabyte announced, none sent: the answer comes at once, without waiting for it
            conn.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n")
            answer = conn.recv(4096)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(
                b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            assert conn.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        server.close()


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(("content", "problem"), [("two words\n", "one word"), (b"\xff\xfe", "cannot read")])
def test_an_unusable_token_file_is_refused_at_start(
    tmp_path: Path, content: str | bytes, problem: str
) -> None:
    path = tmp_path / "token"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(settings.SettingError, match=problem):
        service._decisions_access(resolved(["--decisions-token-file", str(path)]))
