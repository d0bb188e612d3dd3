"""The service's HTTP app: /healthz, /readyz, /metrics, /decisions (off, or behind a bearer token) and
/dra, served by waitress with a bounded thread pool, backlog, connection limit and timeouts."""

from __future__ import annotations

import functools
import hmac
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from flask import Blueprint, Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer, create_server

from automator.connlimit import SourceLimits
from automator.dra.job import DraCheckJob
from automator.service.loop import Service

# waitress: pending connections and seconds an idle or slow connection is kept.
HTTP_BACKLOG = 64
HTTP_CHANNEL_TIMEOUT = 30
HTTP_CONNECTION_LIMIT = 100
# Seconds a request head (request line and headers) may take from its first byte: waitress' own
# channel_timeout counts inactivity only, which a client sending a byte now and then never reaches.
HTTP_HEAD_DEADLINE = 10.0


# `Bearer`, one space, one token of visible ASCII characters, nothing after it.
_BEARER: Final = re.compile(rb"[Bb][Ee][Aa][Rr][Ee][Rr] ([!-~]+)")


def usable_token(token: str) -> bool:
    """Whether a client can send `token` as `Authorization: Bearer <token>` (what check accepts)."""
    return _BEARER.fullmatch(b"Bearer " + token.encode("utf-8", "replace")) is not None


@dataclass(frozen=True)
class DecisionsAccess:
    """/decisions: served or not, and the bearer token it then requires (None: none)."""

    enabled: bool = True
    token: str | None = None

    def check(self, header: str | None) -> int | None:
        """None when allowed, else the HTTP status to answer. Only `Bearer <token>` (RFC 6750, the scheme
        in any case), read on the header's bytes as HTTP carries them, compared in constant time."""
        if not self.enabled:
            return 404
        if self.token is None:
            return None
        try:
            match = _BEARER.fullmatch((header or "").encode("latin-1"))
        except UnicodeEncodeError:
            return 401
        if match is None:
            return 401
        return None if hmac.compare_digest(match.group(1), self.token.encode()) else 401


def add_probes(app: Flask, service: Service) -> Flask:
    """/healthz and /readyz on `app` (the main app, and the probe port's own)."""

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        ready, why = service.readiness()
        return Response(why + "\n", status=200 if ready else 503, mimetype="text/plain")

    return app


def probe_app(service: Service) -> Flask:
    """The probe port's app: /healthz and /readyz only, on a listener of their own (--probe-port), never
    behind the connection limits of the main or KEDA listeners."""
    return add_probes(Flask("gpu-steward-probes"), service)


def create_app(
    service: Service, access: DecisionsAccess | None = None, blueprints: Iterable[Blueprint] = ()
) -> Flask:
    app = Flask("gpu-steward-automator")
    access = access or DecisionsAccess()
    for blueprint in blueprints:
        app.register_blueprint(blueprint)
    add_probes(app, service)

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(
            generate_latest(service.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    @app.get("/decisions")
    def decisions() -> Response:
        denied = access.check(request.headers.get("Authorization"))
        if denied is not None:
            return _refusal(denied)
        return jsonify(service.decisions())

    return app


def _refusal(status: int) -> Response:
    text = "not found\n" if status == 404 else "a bearer token is required\n"
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    return Response(text, status=status, mimetype="text/plain", headers=headers)


def add_dra_route(app: Flask, job: DraCheckJob, access: DecisionsAccess | None = None) -> None:
    """/dra: the last DRA check as `gpu-automator dra-check --output json` shows it, with its status. It
    names every tenant's claims: with --decisions-token-file it asks for the same bearer token."""
    token_only = DecisionsAccess(True, access.token if access is not None else None)

    @app.get("/dra")
    def dra() -> Response:
        denied = token_only.check(request.headers.get("Authorization"))
        if denied is not None:
            return _refusal(denied)
        status, body = job.report_json()
        response = jsonify(body)
        response.status_code = status
        return response


# What bounds every connection (the pool size is --http-threads).
_SERVER_BOUNDS: Final[dict[str, Any]] = {
    "backlog": HTTP_BACKLOG,
    "connection_limit": HTTP_CONNECTION_LIMIT,
    "channel_timeout": HTTP_CHANNEL_TIMEOUT,
    "cleanup_interval": 1,  # the sweep that enforces both timeouts
    "max_request_body_size": 0,  # no route takes a body: one is refused (413) unread
    "ident": "gpu-steward-automator",
}


class _HeadDeadlineChannel(HTTPChannel):
    """A waitress connection that remembers when the head of its current request began, and holds one of
    its source address's connections (closed at once past the server's per-source cap)."""

    head_started: float | None = None
    _source: str | None = None

    def __init__(self, server: Any, sock: Any, addr: Any, adj: Any, map: Any = None) -> None:
        super().__init__(server, sock, addr, adj, map)
        limits: SourceLimits | None = getattr(server, "source_limits", None)
        source = str(addr[0]) if isinstance(addr, tuple) and addr else str(addr)
        if limits is not None:
            if not limits.acquire(source):
                self.close()  # one source may not hold every connection slot
                return
            self._source = source

    def del_channel(self, map: Any = None) -> None:
        super().del_channel(map)
        limits: SourceLimits | None = getattr(self.server, "source_limits", None)
        if limits is not None and self._source is not None:
            limits.release(self._source)
            self._source = None

    def received(self, data: bytes) -> bool:
        if data and self.request is None and self.head_started is None:
            self.head_started = time.monotonic()
        done: bool = super().received(data)
        if self.request is None or self.request.headers_finished:
            self.head_started = None
        return done


def _sweep(server: Any, inactivity: Callable[[Any], None], head_deadline: float, now: float) -> None:
    """waitress' inactivity sweep, then: close every connection whose request head is overdue."""
    inactivity(now)
    overdue = time.monotonic() - head_deadline
    for channel in list(server.active_channels.values()):
        started = getattr(channel, "head_started", None)
        if started is not None and started < overdue:
            channel.will_close = True


def http_server(
    app: Flask,
    host: str,
    port: int,
    threads: int,
    head_deadline: float = HTTP_HEAD_DEADLINE,
    per_source: int | None = None,
) -> Any:
    """waitress with a bounded pool: `threads` workers, a listen backlog, connection limit, timeouts, a
    deadline on each request head (so trickling clients cannot hold every connection slot) and, with
    `per_source`, a cap on the connections one source address holds at once."""
    server = create_server(app, host=host, port=port, threads=threads, **_SERVER_BOUNDS)
    if not isinstance(server, BaseWSGIServer):  # one host and port: always a single listener
        raise TypeError(f"unexpected waitress server {type(server).__name__}")
    server.source_limits = SourceLimits(per_source) if per_source else None  # type: ignore[attr-defined]
    # waitress has no setting for a head deadline: its connection class and sweep are extended here.
    server.channel_class = _HeadDeadlineChannel
    sweep = functools.partial(_sweep, server, server.maintenance, head_deadline)
    server.maintenance = sweep  # type: ignore[method-assign]
    return server
