"""The Prometheus adapter against hostile servers: one deadline per query (connect, headers and body
together), a capped body, no redirect, a URL that must be http(s) with a host, userinfo never shown.

Each hostile server is a real socket server in a thread; every entry point that queries Prometheus (the
pass's usage, the KEDA cache's query, the DRA job's reader, the backtest's range query) goes through it.
"""

from __future__ import annotations

import gzip
import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from automator.objects.keys import ObjectKey
from automator.ports import PrometheusUnavailable
from automator.prom import DraMemoryReader, PrometheusAdapter, read_credentials
from automator.reclaim.model import UsageWindow
from tests.automator.cli_run import run_cli

ANSWER = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
AT = datetime(2026, 1, 1, tzinfo=UTC)

# Each entry point that reads Prometheus, as a call on an adapter.
ENTRY_POINTS: dict[str, Callable[[PrometheusAdapter], object]] = {
    "usage": lambda p: p.usage({ObjectKey("a", "b"): UsageWindow(60, 0)}, at=AT),
    "keda": lambda p: p.keda_query("vector(1)"),
    "dra": lambda p: DraMemoryReader(p).container_memory(),
    "range": lambda p: p.query_range("up", 0, 600, 60, "kube_pod_info"),
}


class Trickler:
    """Answers every connection with `head` then `body`; what follows `at_once` bytes comes one byte every
    0.05 s (a client without a deadline then gets the whole, valid answer, late)."""

    def __init__(self, head: bytes, body: bytes, at_once: int = 0) -> None:
        self.data, self.at_once = head + body, at_once
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                try:
                    conn.sendall(self.data[: self.at_once])
                    for i in range(self.at_once, len(self.data)):
                        if self.stop.wait(0.05):
                            return
                        conn.sendall(self.data[i : i + 1])
                except OSError:
                    continue  # the client gave up: what is being tested

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.listener.close()


def _head(body: bytes, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}"
        "Connection: close\r\n\r\n"
    ).encode()


@pytest.fixture
def trickling_head() -> Iterator[Trickler]:
    """Headers padded to ~160 bytes sent a byte at a time: 8 s of headers, then a valid answer."""
    server = Trickler(_head(ANSWER, "X-Pad: " + "x" * 80 + "\r\n"), ANSWER)
    yield server
    server.close()


@pytest.fixture
def trickling_body() -> Iterator[Trickler]:
    """Headers at once, then a valid ~160-byte body a byte at a time (8 s)."""
    body = ANSWER[:-1] + b" " * 80 + b"}"
    server = Trickler(_head(body), body, at_once=len(_head(body)))
    yield server
    server.close()


def _elapsed_failure(adapter: PrometheusAdapter, call: Callable[[PrometheusAdapter], object]) -> float:
    start = time.monotonic()
    with pytest.raises(PrometheusUnavailable, match="timed out after 1s"):
        call(adapter)
    return time.monotonic() - start


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_a_trickled_head_fails_the_query_at_its_deadline(trickling_head: Trickler, entry: str) -> None:
    adapter = PrometheusAdapter(trickling_head.url, timeout=1)
    # per-read timeouts never fire (a byte comes every 0.05 s); the deadline does, long before the 8 s
    assert _elapsed_failure(adapter, ENTRY_POINTS[entry]) < 4


def test_a_trickled_body_fails_the_query_at_its_deadline(trickling_body: Trickler) -> None:
    adapter = PrometheusAdapter(trickling_body.url, timeout=1)
    assert _elapsed_failure(adapter, ENTRY_POINTS["keda"]) < 4


def test_a_silent_tls_peer_fails_the_handshake_at_the_deadline() -> None:
    """An https URL whose server accepts and says nothing: the handshake is inside the deadline too."""
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        adapter = PrometheusAdapter(f"https://127.0.0.1:{listener.getsockname()[1]}", timeout=1)
        start = time.monotonic()
        with pytest.raises(PrometheusUnavailable, match="timed out"):
            adapter.keda_query("vector(1)")
        assert time.monotonic() - start < 4
    finally:
        listener.close()


def test_a_redirect_is_not_followed(httpserver: HTTPServer) -> None:
    other = HTTPServer(host="127.0.0.1", port=0)
    other.start()
    try:
        other.expect_request("/api/v1/query").respond_with_data(ANSWER, content_type="application/json")
        httpserver.expect_request("/api/v1/query").respond_with_response(
            Response("moved", status=302, headers={"Location": other.url_for("/api/v1/query")})
        )
        adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"))
        with pytest.raises(PrometheusUnavailable, match="302: a redirect, not followed") as e:
            adapter.keda_query("vector(1)")
        assert not other.log, "the other host was asked"
        assert "moved" not in str(e.value)  # the redirecting answer's body is not shown either
    finally:
        other.stop()


def test_an_answer_over_the_cap_is_refused(httpserver: HTTPServer) -> None:
    result = [{"metric": {"i": str(i)}, "value": [0, "0"]} for i in range(40_000)]
    big = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
    assert len(big) > 2**20
    httpserver.expect_request("/api/v1/query").respond_with_data(big, content_type="application/json")
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"), max_answer_bytes=2**20)
    with pytest.raises(PrometheusUnavailable, match="over the 1048576 bytes allowed"):
        adapter.keda_query("vector(1)")
    assert PrometheusAdapter(httpserver.url_for("").rstrip("/")).keda_query("vector(1)")  # under the default


def test_a_gzip_bomb_is_refused_without_inflating_it(httpserver: HTTPServer) -> None:
    bomb = gzip.compress(ANSWER[:-1] + b" " * (64 * 2**20) + b"}", compresslevel=9)
    assert len(bomb) < 2**20
    httpserver.expect_request("/api/v1/query").respond_with_response(
        Response(bomb, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    )
    adapter = PrometheusAdapter(httpserver.url_for("").rstrip("/"), max_answer_bytes=2**20)
    with pytest.raises(PrometheusUnavailable, match="over the 1048576 bytes allowed"):
        adapter.keda_query("vector(1)")


def test_a_gzipped_answer_is_read(httpserver: HTTPServer) -> None:
    vector = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "2"]}]},
    }
    httpserver.expect_request("/api/v1/query", headers={"Accept-Encoding": "gzip"}).respond_with_response(
        Response(gzip.compress(json.dumps(vector).encode()), headers={"Content-Encoding": "gzip"})
    )
    assert PrometheusAdapter(httpserver.url_for("").rstrip("/")).keda_query("vector(2)") == [
        {"metric": {}, "value": [1, "2"]}
    ]


def test_deeply_nested_json_is_an_unreadable_answer(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/v1/query").respond_with_data("[" * 200_000 + "]" * 200_000)
    with pytest.raises(PrometheusUnavailable, match="nested too deeply"):
        PrometheusAdapter(httpserver.url_for("").rstrip("/")).keda_query("vector(1)")


def test_a_base_path_is_kept(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/prometheus/api/v1/query").respond_with_data(ANSWER)
    assert PrometheusAdapter(httpserver.url_for("/prometheus/")).keda_query("vector(1)") == []


def test_an_error_answer_says_prometheus_error_and_no_secret(httpserver: HTTPServer) -> None:
    def answer(request: Request) -> Response:
        # a proxy echoing the Authorization header in its error page
        return Response(f"bad gateway for {request.headers.get('Authorization')}", status=502)

    httpserver.expect_request("/api/v1/query").respond_with_handler(answer)
    url = f"http://admin:hunter2@{httpserver.host}:{httpserver.port}"
    with pytest.raises(PrometheusUnavailable, match="answered 502: bad gateway") as e:
        PrometheusAdapter(url).keda_query("vector(1)")
    assert "hunter2" not in str(e.value) and "***@" in str(e.value)


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    "url",
    ["admin:hunter2@host:9090", "ftp://admin:hunter2@host", "http://admin:hunter2@", "http:///x", "host"],
)
def test_run_refuses_a_url_that_is_not_http_with_a_host(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, _, err = run_cli(capsys, "run", "--prometheus-url", url, "--cluster-snapshot", "/nonexistent")
    assert code == 2
    assert err.startswith("gpu-automator run: --prometheus-url: expected an http:// or https:// URL")
    assert "hunter2" not in err


@pytest.mark.usefixtures("clean_env")
def test_run_refuses_the_variable_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPU_STEWARD_PROMETHEUS_URL", "admin:hunter2@host:9090")
    code, _, err = run_cli(capsys, "run", "--cluster-snapshot", "/nonexistent")
    assert code == 2 and "GPU_STEWARD_PROMETHEUS_URL: expected an http" in err and "hunter2" not in err
    assert "***@host:9090" in err


@pytest.mark.parametrize("url", ["admin:hunter2@host:9090", "file:///etc/passwd", "https://"])
def test_backtest_refuses_a_url_that_is_not_http_with_a_host(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    code, _, err = run_cli(capsys, "backtest", "--prometheus", url, "--from", "now-1h", "--to", "now")
    assert code == 2 and "--prometheus: expected an http:// or https:// URL" in err
    assert "hunter2" not in err


def test_the_adapter_refuses_such_a_url_too() -> None:
    with pytest.raises(ValueError, match=r"got '\*\*\*@host:9090'"):
        PrometheusAdapter("admin:hunter2@host:9090")


def test_https_with_the_ca_file_is_read_and_an_unknown_ca_refused(tmp_path: Path) -> None:
    key, crt = str(tmp_path / "key"), str(tmp_path / "crt")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", crt],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(crt, key)
    server = HTTPServer(host="127.0.0.1", port=0, ssl_context=context)
    server.start()
    try:
        server.expect_request("/api/v1/query").respond_with_data(ANSWER, content_type="application/json")
        url = f"https://127.0.0.1:{server.port}"
        trusted = PrometheusAdapter(url, credentials=read_credentials(None, None, crt))
        assert trusted.keda_query("vector(1)") == []
        with pytest.raises(PrometheusUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            PrometheusAdapter(url).keda_query("vector(1)")  # the system's CAs do not know it
    finally:
        server.stop()
