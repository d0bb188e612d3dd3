"""The KEDA endpoint over HTTPS when a certificate and key are given: its own listener serving only the
KEDA routes, on cheroot (a production WSGI server that does TLS itself; it writes no access log).

Bounds: THREADS workers; the TLS handshake runs in a worker, not in the accepting thread, so a silent
client holds nothing but its socket, closed after SOCKET_TIMEOUT_SECONDS idle; the whole request head
(handshake, request line and headers) must arrive within HEAD_DEADLINE_SECONDS of its first byte, so a
client trickling a header line now and then cannot hold a worker; heads over MAX_HEADER_BYTES get 413.
With a client CA, every connection must present a certificate it signed (KEDA's `authModes: tls`). The
certificates are reloaded when their files change (automator/keda/certs.py): each new connection gets the
current context, connections in flight keep theirs.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from cheroot import errors, wsgi
from cheroot import server as cheroot_server
from cheroot.ssl.builtin import BuiltinSSLAdapter

from automator.connlimit import SourceLimits
from automator.keda.certs import ReloadingTLS

log = logging.getLogger(__name__)

SOCKET_TIMEOUT_SECONDS = 10.0
HEAD_DEADLINE_SECONDS = 10.0
THREADS = 16
MAX_HEADER_BYTES = 16 * 1024
BACKLOG = 64


class HeadDeadlines:
    """Closes the socket of every request whose head is not complete by its deadline (one thread for all)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._armed: dict[int, tuple[float, socket.socket]] = {}
        self._lock = threading.Condition()
        self._stopped = False
        threading.Thread(target=self._loop, name="keda-https-head-deadline", daemon=True).start()

    @contextmanager
    def armed(self, sock: socket.socket) -> Iterator[None]:
        token = id(sock)
        with self._lock:
            self._armed[token] = (time.monotonic() + self.seconds, sock)
            self._lock.notify()
        try:
            yield
        finally:
            with self._lock:
                self._armed.pop(token, None)

    def _loop(self) -> None:
        with self._lock:
            while not self._stopped:
                now = time.monotonic()
                for token, (deadline, sock) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[token]
                        _cut(sock)
                soonest = min((d for d, _ in self._armed.values()), default=now + self.seconds)
                self._lock.wait(max(0.05, soonest - now))

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify()


def _cut(sock: socket.socket) -> None:
    """Shut the connection down under the worker blocked reading it: its read ends at once. The plain
    socket's shutdown, not SSLSocket's, which would tear the TLS state out from under the reader."""
    with suppress(OSError):  # already closed
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _DeferredHandshake(BuiltinSSLAdapter):
    """cheroot's adapter runs the handshake in the accepting thread; here it runs on the first read, in
    the worker, under the head deadline. A source address past its connection cap is closed here, before
    it reaches a worker."""

    def __init__(self, tls: ReloadingTLS, limits: SourceLimits | None) -> None:
        super().__init__(tls.files.cert, tls.files.key)
        self.tls = tls
        self.limits = limits

    def wrap(self, sock: socket.socket) -> tuple[ssl.SSLSocket, dict[str, str]]:
        source = None
        if self.limits is not None:
            try:
                source = str(sock.getpeername()[0])
            except OSError:
                source = "?"
            if not self.limits.acquire(source):
                _cut(sock)
                sock.close()
                raise errors.FatalSSLAlert(f"more than {self.limits.per_source} connections from one source")
        context = self.tls.current().context  # the files' current certificates, reloaded on change
        tls = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        tls.keda_source = source  # type: ignore[attr-defined]  # released when the connection closes
        return tls, {"wsgi.url_scheme": "https", "HTTPS": "on"}


class _Request(cheroot_server.HTTPRequest):
    def parse_request(self) -> None:
        deadlines: HeadDeadlines = self.server.head_deadlines
        with deadlines.armed(self.conn.socket):
            super().parse_request()


class _Connection(cheroot_server.HTTPConnection):
    RequestHandlerClass = _Request
    _released = False

    def close(self) -> None:
        limits: SourceLimits | None = self.server.ssl_adapter.limits
        source = getattr(self.socket, "keda_source", None)
        if limits is not None and source is not None and not self._released:
            self._released = True
            limits.release(source)
        super().close()


class KedaTLSServer(wsgi.Server):
    ConnectionClass = _Connection

    def __init__(
        self,
        app: Callable[..., Any],
        address: str,
        port: int,
        tls: ReloadingTLS,
        threads: int,
        head_seconds: float,
        per_source: int | None = None,
    ) -> None:
        super().__init__(
            (address, port),
            app,
            numthreads=threads,
            max=threads,
            request_queue_size=BACKLOG,
            timeout=int(SOCKET_TIMEOUT_SECONDS),
            accepted_queue_size=threads * 4,
            server_name="gpu-steward-keda",
        )
        self.max_request_header_size = MAX_HEADER_BYTES
        self.ssl_adapter = _DeferredHandshake(tls, SourceLimits(per_source) if per_source else None)
        self.head_deadlines = HeadDeadlines(head_seconds)

    def error_log(self, msg: str = "", level: int = logging.INFO, traceback: bool = False) -> None:
        # Per-connection failures (handshakes, timeouts, resets) are expected from any client: one line at
        # debug, never a traceback or request text.
        log.debug("KEDA HTTPS: %s", msg.splitlines()[0][:200] if msg else "")

    def stop(self) -> None:
        self.head_deadlines.stop()
        super().stop()


def serve_tls(
    app: Callable[..., Any],
    address: str,
    port: int,
    tls: ReloadingTLS,
    threads: int = THREADS,
    head_seconds: float = HEAD_DEADLINE_SECONDS,
    per_source: int | None = None,
) -> KedaTLSServer:
    """Bind and serve in a daemon thread; returns the server (`stop()` ends it, `bind_addr` its port).
    `per_source`: connections one source address may hold at once (more are closed on accept)."""
    server = KedaTLSServer(app, address, port, tls, threads, head_seconds, per_source)
    server.prepare()  # binds now: a port in use fails the start, not a thread
    threading.Thread(target=server.serve, name="keda-https", daemon=True).start()
    return server
