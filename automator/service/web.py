"""The service's HTTP app: /healthz, /readyz, /metrics, /decisions (off, or behind a bearer token) and
/dra, served by waitress with a bounded thread pool, backlog, connection limit and timeouts."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from flask import Blueprint, Flask, Response, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from waitress.server import create_server

from automator.dra.job import DraCheckJob
from automator.service.loop import Service

# waitress: pending connections and seconds an idle or slow connection is kept.
HTTP_BACKLOG = 64
HTTP_CHANNEL_TIMEOUT = 30
HTTP_CONNECTION_LIMIT = 100


@dataclass(frozen=True)
class DecisionsAccess:
    """/decisions: served or not, and the bearer token it then requires (None: none)."""

    enabled: bool = True
    token: str | None = None

    def check(self, header: str | None) -> int | None:
        """None when allowed, else the HTTP status to answer."""
        if not self.enabled:
            return 404
        if self.token is None:
            return None
        given = (header or "").removeprefix("Bearer ").strip()
        return None if given and hmac.compare_digest(given, self.token) else 401


def create_app(
    service: Service, access: DecisionsAccess | None = None, blueprints: Iterable[Blueprint] = ()
) -> Flask:
    app = Flask("gpu-steward-automator")
    access = access or DecisionsAccess()
    for blueprint in blueprints:
        app.register_blueprint(blueprint)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        ready, why = service.readiness()
        return Response(why + "\n", status=200 if ready else 503, mimetype="text/plain")

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
    "cleanup_interval": HTTP_CHANNEL_TIMEOUT,
    "ident": "gpu-steward-automator",
}


def http_server(app: Flask, host: str, port: int, threads: int) -> Any:
    """waitress with a bounded pool: `threads` workers, a listen backlog, connection limit and timeouts."""
    return create_server(app, host=host, port=port, threads=threads, **_SERVER_BOUNDS)
