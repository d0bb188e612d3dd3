"""The Prometheus adapter's HTTP (automator/prom.py): one GET of Prometheus' JSON API under a total deadline.

Connect, TLS handshake, request, headers and body together end by one deadline (`timeout` seconds from the
start): requests' timeout bounds each read, so a server or proxy trickling a byte at a time held a query
for minutes. The body is capped (decompressed size too: a gzip bomb is refused, not inflated), redirects
are refused (another host's answers would be taken as Prometheus' own), and the JSON is decoded with
nesting errors (RecursionError) reported as a bad answer. Standard library only; one connection per query,
so the pass, the KEDA cache and the DRA job may query at once. HTTP(S)_PROXY is not read: the automator
talks to Prometheus directly, as in-cluster clients do.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import selectors
import socket
import ssl
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from steward_common.urls import http_url, userinfo

# Name lookups run here, so that a hung resolver costs the query its deadline, not the thread; two
# workers: a lookup hung past every deadline holds at most these.
_RESOLVER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="prom-dns")
READ_BLOCK = 65_536
# What an error text quotes of a body Prometheus (or something in front of it) answered.
ERROR_EXCERPT = 200


class HttpFailure(Exception):
    """The query failed; the text names why (never the URL's userinfo nor a credential). timed_out: the
    deadline passed."""

    def __init__(self, reason: str, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise HttpFailure("deadline passed", timed_out=True)
        return left


class _DeadlineSocket:
    """A connected socket each of whose operations waits at most until the deadline: http.client calls
    sendall, makefile and close, and reads through the file this makefile gives. http.client closes the
    connection as soon as it has the headers of a `Connection: close` answer, before the body is read: the
    socket itself is closed by get_result, once done."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self.sock = sock
        self.deadline = deadline

    def arm(self) -> socket.socket:
        self.sock.settimeout(self.deadline.left())
        return self.sock

    def sendall(self, data: bytes) -> None:
        self.arm().sendall(data)

    def makefile(self, mode: str, *_args: Any, **_kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self))

    def close(self) -> None:
        pass


class _DeadlineReader(io.RawIOBase):
    def __init__(self, sock: _DeadlineSocket) -> None:
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._sock.arm().recv_into(buffer)


def _connect(host: str, port: int, deadline: _Deadline) -> socket.socket:
    lookup = _RESOLVER.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        addresses = lookup.result(timeout=deadline.left())
    except FutureTimeout:
        raise HttpFailure(f"looking up {host}: deadline passed", timed_out=True) from None
    except OSError as e:
        raise HttpFailure(f"looking up {host}: {e}") from None
    error: OSError | None = None
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(deadline.left())
            sock.connect(address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as e:
            sock.close()
            error = e
            if isinstance(e, TimeoutError):
                break
    if isinstance(error, TimeoutError):
        raise HttpFailure("connect: deadline passed", timed_out=True)
    raise HttpFailure(f"connect: {error}")


def _handshake(sock: ssl.SSLSocket, deadline: _Deadline) -> None:
    """The TLS handshake, non-blocking, so that a peer sending its records slowly still meets the deadline
    (a selector, not select(): a process with many connections has descriptors past FD_SETSIZE)."""
    sock.setblocking(False)
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        while True:
            try:
                sock.do_handshake()
                return
            except ssl.SSLWantReadError:
                selector.modify(sock, selectors.EVENT_READ)
            except ssl.SSLWantWriteError:
                selector.modify(sock, selectors.EVENT_WRITE)
            if not selector.select(deadline.left()):
                deadline.left()  # raises once the deadline passed
                raise HttpFailure("TLS handshake: deadline passed", timed_out=True)


class _Connection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, deadline: _Deadline, tls: ssl.SSLContext | None) -> None:
        super().__init__(host, port)
        self._deadline = deadline
        self._tls = tls
        self.raw: socket.socket | None = None

    def connect(self) -> None:
        sock = _connect(self.host, self.port, self._deadline)
        if self._tls is not None:
            try:
                tls = self._tls.wrap_socket(sock, server_hostname=self.host, do_handshake_on_connect=False)
                _handshake(tls, self._deadline)
            except (ssl.SSLError, OSError) as e:
                sock.close()
                raise HttpFailure(f"TLS: {e}") from None
            sock = tls
        self.raw = sock
        self.sock = _DeadlineSocket(sock, self._deadline)


@dataclass(frozen=True)
class Endpoint:
    """Where and how to ask: a checked http(s) base URL and the headers every query sends."""

    host: str
    port: int
    base_path: str
    headers: tuple[tuple[str, str], ...]
    tls: ssl.SSLContext | None

    @classmethod
    def of(
        cls,
        url: str,
        bearer_token: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        ca_file: str | None = None,
    ) -> Endpoint:
        """ValueError (showing no userinfo) for a URL that is not http(s) with a host."""
        parts = urlsplit(http_url(url))
        https = parts.scheme.lower() == "https"
        basic = basic_auth or userinfo(url)
        headers = [("Accept", "application/json"), ("Accept-Encoding", "gzip"), ("User-Agent", "gpu-steward")]
        if bearer_token:
            headers.append(("Authorization", f"Bearer {bearer_token}"))
        elif basic:
            token = base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
            headers.append(("Authorization", f"Basic {token}"))
        tls = ssl.create_default_context(cafile=ca_file) if https else None
        return cls(
            str(parts.hostname),
            parts.port or (443 if https else 80),
            parts.path.rstrip("/"),
            tuple(headers),
            tls,
        )


def _body(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    """The body, decompressed; HttpFailure past max_bytes (read or decompressed)."""
    length = response.getheader("Content-Length")
    if length and length.strip().isdigit() and int(length) > max_bytes:
        raise HttpFailure(f"answer of {int(length)} bytes, over the {max_bytes} bytes allowed")
    gzipped = (response.getheader("Content-Encoding") or "").strip().lower() == "gzip"
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
    parts: list[bytes] = []
    size = read = 0
    while block := response.read(READ_BLOCK):
        read += len(block)
        if inflate is not None:
            block = inflate.decompress(block, max_bytes - size + 1)
            if inflate.unconsumed_tail:
                size = max_bytes + 1
        size += len(block)
        if size > max_bytes or read > max_bytes:
            raise HttpFailure(f"answer over the {max_bytes} bytes allowed")
        parts.append(block)
    if inflate is not None and not inflate.eof:
        raise HttpFailure("truncated gzip answer")
    return b"".join(parts)


def _excerpt(body: bytes) -> str:
    """What an error answer says: Prometheus' own `error` field, else the body's start."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, RecursionError, AttributeError):
        error = None
    text = error if isinstance(error, str) else body.decode("utf-8", "replace")
    return text if len(text) <= ERROR_EXCERPT else text[:ERROR_EXCERPT] + "..."


def get_body(endpoint: Endpoint, path: str, params: dict[str, str], timeout: float, max_bytes: int) -> bytes:
    """The body (decompressed) of a 200 answer of Prometheus' API at `path`; HttpFailure for anything else."""
    deadline = _Deadline(timeout)
    connection = _Connection(endpoint.host, endpoint.port, deadline, endpoint.tls)
    try:
        try:
            connection.request(
                "GET", f"{endpoint.base_path}{path}?{urlencode(params)}", headers=dict(endpoint.headers)
            )
            response = connection.getresponse()
            if 300 <= response.status < 400:
                raise HttpFailure(f"answered {response.status}: a redirect, not followed")
            body = _body(response, max_bytes)
        except TimeoutError:
            raise HttpFailure("deadline passed", timed_out=True) from None
        except (OSError, http.client.HTTPException) as e:
            raise HttpFailure(f"{type(e).__name__}: {e}") from None
    finally:
        connection.close()
        if connection.raw is not None:
            connection.raw.close()
    if response.status != 200:
        raise HttpFailure(f"answered {response.status}: {_excerpt(body)}")
    return body


def result_of(body: bytes) -> Any:
    """`data.result` of a successful answer's body; HttpFailure for anything else."""
    try:
        answer = json.loads(body)
    except RecursionError:
        raise HttpFailure("answer nested too deeply") from None
    except ValueError:
        raise HttpFailure(f"answer is not JSON: {_excerpt(body)}") from None
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(answer, dict) or answer.get("status") != "success" or not isinstance(data, dict):
        raise HttpFailure(f"not a successful answer: {_excerpt(body)}")
    if "result" not in data:
        raise HttpFailure("answer without data.result")
    return data["result"]
