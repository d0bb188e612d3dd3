"""The exporter's basic auth under hostile clients: names not told apart by timing (counted in bcrypt
checks), any bytes in the header a 401 and never a 500, a malformed hash refused at start."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from exporter.exposition import Exposition
from exporter.server import HttpServer, make_handler
from exporter.webconfig import WebConfig, WebConfigError, load_web_config
from tests.exporter.test_server import make_loop

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4))


def basic(raw: bytes) -> str:
    return "Basic " + base64.b64encode(raw).decode()


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The hashes bcrypt.checkpw was called with."""
    seen: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        seen.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    return seen


def test_an_unknown_user_costs_a_bcrypt_check_as_a_wrong_password_does(checks: list[bytes]) -> None:
    web = WebConfig(users={"prom": HASH}, dummy_hash=bcrypt.hashpw(b"", bcrypt.gensalt(rounds=4)))
    assert not web.check_basic(basic(b"prom:wrong"))
    assert len(checks) == 1
    assert not web.check_basic(basic(b"nobody:wrong"))
    assert len(checks) == 2 and checks[1] != HASH
    assert web.check_basic(basic(b"prom:s3cret"))
    assert not web.check_basic(basic(b"nobody:s3cret"))  # the dummy hash matches no password given


@pytest.mark.parametrize(
    "header",
    [
        basic("jürgen:s3cret".encode()),
        basic(b"\xff\xfe:\x80"),
        "Basic jürgen",
        "Basic \u20ac",
        "basic",
        "Basic " + base64.b64encode(b"prom:s3cret").decode() + " trailing",
        "Bearer x",
    ],
)
def test_any_header_is_a_refusal_never_an_error(header: str) -> None:
    web = WebConfig(users={"prom": HASH}, dummy_hash=HASH)
    assert web.check_basic(header) is False


@pytest.fixture
def server() -> Iterator[HttpServer]:
    loop = make_loop()
    loop.collect_once()
    web = WebConfig(users={"prom": HASH}, dummy_hash=HASH)
    srv = HttpServer(make_handler(Exposition(loop, "mock"), loop, web), "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(5)


@pytest.mark.parametrize("auth", [basic("jürgen:x".encode()).encode(), "Basic jürgen".encode("latin-1")])
def test_non_ascii_credentials_get_401(server: HttpServer, auth: bytes) -> None:
    with socket.create_connection(server.server_address[:2], timeout=5) as conn:
        conn.sendall(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " + auth + b"\r\nConnection: close\r\n\r\n"
        )
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401"), answer[:100]


@pytest.mark.parametrize(
    "hashed",
    [
        "$2y$10$tooshort",
        "$2y$99$" + "a" * 53,
        HASH.decode()[:-1] + "!",
        HASH.decode() + "x",
        # well-formed, but bcrypt refuses the salt (its last character may only be . O e u): every request
        # of the user raised
        HASH.decode()[:28] + "P" + HASH.decode()[29:],
    ],
    ids=["too-short", "bad-cost", "bad-character", "too-long", "salt-bcrypt-refuses"],  # HASH is random
)
def test_a_malformed_hash_is_refused_at_start_naming_the_field(tmp_path: Path, hashed: str) -> None:
    path = tmp_path / "web.yaml"
    path.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n")
    with pytest.raises(WebConfigError, match=r"basic_auth_users\.prom"):
        load_web_config(path)
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "--source", "mock", "--web.config.file", str(path), "--port", "9"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2 and "basic_auth_users.prom" in result.stderr, result.stderr


def test_a_well_formed_hash_loads(tmp_path: Path) -> None:
    path = tmp_path / "web.yaml"
    path.write_text(f"basic_auth_users:\n  prom: '{HASH.decode()}'\n")
    web = load_web_config(path)
    assert web.check_basic(basic(b"prom:s3cret")) and not web.check_basic(basic(b"prom:nope"))
