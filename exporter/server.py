"""The HTTP server: scrapes never queue behind each other, and idle connections cost no thread.

One selector thread accepts connections (a real listen backlog) and reads requests without blocking,
so a slow or silent client holds only a file descriptor, until its timeout. A complete request goes to a
bounded pool of workers, which only pick the ready-made bytes (exporter/exposition.py) and write them
(with a write timeout). Keep-alive connections go back to the selector. TLS and basic auth come from
the web config file (exporter/webconfig.py).

Routes: /metrics (GET, HEAD; gzip, OpenMetrics, `name[]`), /healthz, /readyz, /.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from exporter.exposition import OPENMETRICS_TYPE, TEXT_TYPE, Exposition, parse_names
from exporter.loop import CollectionLoop
from exporter.webconfig import AuthBusy, WebConfig

log = logging.getLogger(__name__)


# Requests waiting for a worker, per worker: beyond, a request is answered 503 at once (the queue, and
# with it the wait of a scrape behind it, is bounded).
QUEUE_PER_WORKER = 4


@dataclass(frozen=True)
class Limits:
    workers: int = 8  # threads answering requests
    backlog: int = 1024  # the kernel's accept queue (capped by net.core.somaxconn)
    # Open connections; more are closed at once. 1,024 half-done TLS handshakes (about 47 kB each) hold
    # under 50 MiB, within the DaemonSet's 256 Mi memory limit beside the snapshot.
    max_connections: int = 1_024
    timeout: float = 10.0  # seconds for a request's headers to arrive, and for a response to be written
    idle_timeout: float = 120.0  # seconds a keep-alive connection may wait for its next request
    max_header_bytes: int = 16_384


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    version: str


@dataclass(frozen=True)
class Response:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    close: bool = False


Handler = Callable[[Request], Response]
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
INDEX = b'<html><body><h1>gpu-steward exporter</h1><a href="/metrics">/metrics</a></body></html>\n'


def _text(status: int, body: str, *headers: tuple[str, str]) -> Response:
    return Response(status, (("Content-Type", "text/plain; charset=utf-8"), *headers), body.encode())


def make_handler(exposition: Exposition, loop: CollectionLoop, web: WebConfig | None = None) -> Handler:
    """Routes; basic auth (when configured) guards every path but the probes'."""
    web = web or WebConfig()

    def handle(request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return _text(405, "method not allowed\n", ("Allow", "GET, HEAD"))
        path = request.path
        if path == "/healthz":
            ok = loop.healthy()
            return _text(200 if ok else 503, "ok\n" if ok else "no collection completed recently\n")
        if path == "/readyz":
            ready = loop.ready()
            return _text(200 if ready else 503, "ready\n" if ready else "no snapshot yet\n")
        try:
            allowed = web.check_basic(request.headers.get("authorization"))
        except AuthBusy:  # every bcrypt slot taken (a flood of new passwords): no wait for one
            return _text(503, "too many credential checks at once, retry\n", ("Retry-After", "1"))
        if not allowed:
            return _text(401, "unauthorized\n", ("WWW-Authenticate", 'Basic realm="gpu-steward"'))
        if path == "/metrics":
            accept = request.headers.get("accept", "")
            openmetrics = "application/openmetrics-text" in accept
            compress = "gzip" in request.headers.get("accept-encoding", "")
            body = exposition.body(
                openmetrics=openmetrics, compress=compress, names=parse_names(request.query.get("name[]", []))
            )
            headers = [("Content-Type", OPENMETRICS_TYPE if openmetrics else TEXT_TYPE)]
            if compress:
                headers.append(("Content-Encoding", "gzip"))
            return Response(200, tuple(headers), body)
        if path == "/":
            return Response(200, (("Content-Type", "text/html"),), INDEX)
        return _text(404, "not found\n")

    return handle


def parse_request(head: bytes) -> Request | None:
    """The request line and headers (without the blank line); None when malformed."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        return None
    if not version.startswith("HTTP/1."):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        headers[name.lower()] = value.strip()
    url = urlsplit(target)
    return Request(method, url.path or "/", parse_qs(url.query, keep_blank_values=True), headers, version)


def _keep_alive(request: Request) -> bool:
    connection = request.headers.get("connection", "").lower()
    if request.version == "HTTP/1.0":
        return "keep-alive" in connection
    return "close" not in connection


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    deadline: float
    buffer: bytearray = field(default_factory=bytearray)
    handshaking: bool = False


class HttpServer:
    """serve_forever() in a thread; shutdown() from another, then server_close()."""

    def __init__(
        self,
        handler: Handler,
        address: str,
        port: int,
        limits: Limits = Limits(),
        ssl_context: ssl.SSLContext | None = None,
        extra_headers: tuple[tuple[str, str], ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._handler = handler
        self._limits = limits
        self._ssl = ssl_context
        self._extra_headers = extra_headers
        self._clock = clock
        family, kind, proto, _, sockaddr = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0]
        self._listener = socket.socket(family, kind, proto)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(sockaddr)
            self._listener.listen(limits.backlog)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self.server_address = self._listener.getsockname()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._returned: queue.SimpleQueue[_Conn] = queue.SimpleQueue()
        self._conns: set[_Conn] = set()
        self._conns_lock = threading.Lock()  # the selector adds and sweeps, workers remove
        self._pool = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="http")
        # requests given to the pool and not yet done: at most workers * (1 + QUEUE_PER_WORKER)
        self._pending = 0
        self._pending_lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = threading.Event()

    # --- the selector thread ---------------------------------------------------------------------------

    def serve_forever(self) -> None:
        sel = self._selector
        sel.register(self._listener, selectors.EVENT_READ, "listen")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        next_sweep = self._clock() + 1.0
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=1.0):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        self._read(key.data)
                now = self._clock()
                if now >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + 1.0
        finally:
            self._stopped.set()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # EMFILE and the like: the connection stays in the backlog
                log.warning("accept failed: %s", e)
                return
            with self._conns_lock:
                full = len(self._conns) >= self._limits.max_connections
            if full:
                sock.close()
                continue
            sock.setblocking(False)
            handshaking = False
            wait = self._limits.idle_timeout
            if self._ssl is not None:
                sock = self._ssl.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                # A handshake is part of the request: it gets the request's timeout, not the idle one (a
                # half-sent handshake holds tens of kB of TLS state).
                handshaking, wait = True, self._limits.timeout
            conn = _Conn(sock, self._clock() + wait, handshaking=handshaking)
            with self._conns_lock:
                self._conns.add(conn)
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while True:
            try:
                conn = self._returned.get_nowait()
            except queue.Empty:
                return
            with self._conns_lock:
                alive = conn in self._conns
            if alive:
                self._selector.register(conn.sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Conn) -> None:
        sock = conn.sock
        try:
            if conn.handshaking:
                assert isinstance(sock, ssl.SSLSocket)
                sock.do_handshake()
                conn.handshaking = False
                conn.deadline = self._clock() + self._limits.idle_timeout  # now waiting for a request
            while True:
                data = sock.recv(65536)
                if not data:
                    self._close(conn)
                    return
                if not conn.buffer:
                    conn.deadline = self._clock() + self._limits.timeout  # a request has begun
                conn.buffer += data
                if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                    break
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        end = conn.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.buffer) > self._limits.max_header_bytes:
                self._dispatch(conn, None, _text(431, "request headers too large\n"))
            return
        head = bytes(conn.buffer[:end])
        del conn.buffer[: end + 4]
        self._dispatch(conn, head)

    def _dispatch(self, conn: _Conn, head: bytes | None, response: Response | None = None) -> None:
        self._selector.unregister(conn.sock)
        with self._pending_lock:
            full = self._pending >= self._limits.workers * (1 + QUEUE_PER_WORKER)
            if not full:
                self._pending += 1
        if full:
            self._refuse(conn)
            return
        self._pool.submit(self._serve, conn, head, response)

    def _refuse(self, conn: _Conn) -> None:
        """A 503 written without waiting (what the socket takes now), then the connection closed."""
        with contextlib.suppress(OSError):
            conn.sock.send(
                b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n"
                b"Connection: close\r\n\r\n"
            )
        self._close(conn)

    def pending(self) -> int:
        """Requests with the workers, running or queued."""
        with self._pending_lock:
            return self._pending

    def _sweep(self, now: float) -> None:
        """Close connections past their deadline (a request not sent in time, or idle too long)."""
        registered = self._selector.get_map()
        with self._conns_lock:
            expired = [c for c in self._conns if c.deadline < now and c.sock in registered]
        for conn in expired:
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        with self._conns_lock:
            self._conns.discard(conn)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    # --- the workers ----------------------------------------------------------------------------------

    def _serve(self, conn: _Conn, head: bytes | None, response: Response | None) -> None:
        try:
            self._serve_connection(conn, head, response)
        finally:
            with self._pending_lock:
                self._pending -= 1

    def _serve_connection(self, conn: _Conn, head: bytes | None, response: Response | None) -> None:
        try:
            while True:
                request = parse_request(head) if head is not None else None
                if response is None:
                    if request is None:
                        response = _text(400, "bad request\n")
                    elif "content-length" in request.headers or "transfer-encoding" in request.headers:
                        response = _text(405, "requests with a body are not served\n", ("Allow", "GET, HEAD"))
                    else:
                        try:
                            response = self._handler(request)
                        except Exception:
                            log.exception("handling %s %s failed", request.method, request.path)
                            response = _text(500, "internal error\n")
                keep = (
                    request is not None
                    and response.status < 400
                    and not response.close
                    and _keep_alive(request)
                )
                if response.status in (400, 405, 431):
                    keep = False
                self._write(conn, request, response, keep)
                if not keep:
                    self._finish(conn)
                    return
                end = conn.buffer.find(b"\r\n\r\n")
                if end < 0:  # no pipelined request waiting: back to the selector
                    conn.deadline = self._clock() + (
                        self._limits.timeout if conn.buffer else self._limits.idle_timeout
                    )
                    conn.sock.setblocking(False)
                    self._returned.put(conn)
                    self._wake_w.send(b"\0")
                    return
                head, response = bytes(conn.buffer[:end]), None
                del conn.buffer[: end + 4]
        except Exception as e:  # a client gone mid-write, a timeout: only this connection ends
            log.debug("connection closed: %s", e)
            self._finish(conn)

    def _write(self, conn: _Conn, request: Request | None, response: Response, keep: bool) -> None:
        status = f"HTTP/1.1 {response.status} {REASONS.get(response.status, 'Unknown')}\r\n"
        headers = [*response.headers, *self._extra_headers, ("Content-Length", str(len(response.body)))]
        headers.append(("Connection", "keep-alive" if keep else "close"))
        head = (status + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode("latin-1")
        body = b"" if request is not None and request.method == "HEAD" else response.body
        conn.sock.settimeout(self._limits.timeout)
        conn.sock.sendall(head + body)

    def _finish(self, conn: _Conn) -> None:
        with self._conns_lock:
            self._conns.discard(conn)
        with contextlib.suppress(OSError):
            conn.sock.close()

    # --- lifecycle ------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")
        self._stopped.wait(5.0)

    def server_close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            self._close(conn)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    def connection_count(self) -> int:
        with self._conns_lock:
            return len(self._conns)
