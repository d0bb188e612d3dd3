"""The metrics-api endpoint KEDA polls: GET /keda/v1/metrics (docs/keda.md), a Flask Blueprint.

200 with the value at `value` (the trigger's valueLocation); 400 naming a bad parameter; 401 without valid
credentials; 404 for a Deployment or StatefulSet that does not exist; 503 with a JSON reason when data is
missing, stale, still being fetched ("warming_up") or Prometheus/the API is unreachable, so KEDA's fallback
applies; 413 for a request with a body (no route takes one). Bodies never echo credentials or upstream
responses, and no log line holds the query string.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from typing import Any

from flask import Blueprint, Response, jsonify, request

from automator.keda.answers import Answerer
from automator.keda.auth import AuthConfig, grant
from automator.keda.cache import Answer
from automator.keda.declared import NOT_QUESTION, SCALED_OBJECT_PARAM
from automator.keda.metrics import HTTP_STATUSES, KedaMetrics
from automator.keda.request import (
    METRICS_PATH,
    PROFILES_PATH,
    VALUE_LOCATION,
    ParamError,
    kubernetes_name,
    question,
)
from automator.keda.signals import AGGREGATIONS, PROFILES, SIGNALS
from automator.keda.table import NotDeclared
from automator.keda.values import NoValue
from automator.keda.workloads import UnknownWorkload

log = logging.getLogger(__name__)

# Reasons whose detail may hold upstream text (URLs, proxy pages): the body gets a fixed sentence instead.
_UPSTREAM = {
    "prometheus_unavailable": "Prometheus did not answer the refresh's query; see the automator's log",
    "kubernetes_unavailable": "the Kubernetes API did not list the workload's pods; see the automator's log",
}


def answer_json(a: Answer) -> dict[str, Any]:
    q, v = a.question, a.value
    body: dict[str, Any] = {
        "value": v.value,
        "pods": v.pods,
        "gpus": v.gpus,
        "age_seconds": round(v.age_seconds, 3),
        "signal": q.signal.name,
        "unit": q.signal.unit,
        "aggregation": q.aggregation,
        "window_seconds": q.window_seconds,
        "query": a.query,
        "namespace": q.workload.namespace,
        q.workload.kind: q.workload.name,
        "pods_pending": list(v.pods_pending),
    }
    if q.profile is not None:
        body["profile"] = q.profile
    recommended = {
        "targetValue": q.target,
        "activationTargetValue": q.activation,
        "metricType": q.metric_type,
    }
    body["recommended"] = {k: x for k, x in recommended.items() if x is not None}
    return body


def no_value_json(e: NoValue) -> dict[str, Any]:
    """The 503 body: `error` the code; `reason` and `message` (as in every error body) the sentence."""
    sentence = _UPSTREAM.get(e.reason, e.message)
    return {"error": e.reason, "reason": sentence, "message": sentence}


def blueprint(
    cache: Answerer,
    auth: AuthConfig,
    metrics: KedaMetrics | None = None,
    waiting: int | None = None,
    client_verified: bool = False,
) -> Blueprint:
    """The KEDA routes. `waiting`: how many of the listener's threads may wait on a first fetch at once
    (None: no bound); keep it below the listener's pool so that its other routes stay answered.
    `client_verified`: the listener admits only connections whose client certificate it verified."""
    bp = Blueprint("keda", __name__)
    waiters = threading.BoundedSemaphore(waiting) if waiting else None

    counters = {int(s): metrics.requests.labels("http", s) for s in HTTP_STATUSES} if metrics else {}

    def reply(status: int, body: dict[str, Any]) -> Response:
        if status in counters:
            counters[status].inc()
        return Response(
            json.dumps(body, separators=(",", ":"), allow_nan=False),
            status=status,
            mimetype="application/json",
            headers={"Cache-Control": "no-store"},
        )

    @bp.before_request
    def no_body() -> Response | None:
        # KEDA sends a plain GET: a body is never read, so it is refused before anything else runs.
        if (request.content_length or 0) > 0 or "Transfer-Encoding" in request.headers:
            return reply(413, {"error": "body_not_allowed", "message": "the KEDA routes take no body"})
        return None

    @bp.get(METRICS_PATH)
    def keda_metrics() -> Response:
        granted = grant(auth, request.headers.get, request.args, client_verified)
        if granted is None:
            response = reply(401, {"error": "unauthorized", "message": "missing or wrong credentials"})
            response.headers["WWW-Authenticate"] = 'Bearer realm="gpu-steward", Basic realm="gpu-steward"'
            return response
        try:
            # The API key and the asking ScaledObject's name never become part of a question's key.
            params = {k: v for k, v in request.args.items() if k not in NOT_QUESTION}
            q = question(params)
            if not granted.allows(q.workload.namespace):  # before anything is read about it
                return reply(
                    403, {"error": "forbidden", "message": "this credential may not read that namespace"}
                )
            asker = request.args.get(SCALED_OBJECT_PARAM)
            scaled_object = (
                (q.workload.namespace, kubernetes_name(asker, SCALED_OBJECT_PARAM)) if asker else None
            )
            a = cache.answer(q, waiters, scaled_object, request.remote_addr)
        except ParamError as e:
            return reply(400, {"error": "bad_parameter", "parameter": e.parameter, "message": e.message})
        except NotDeclared as e:
            return reply(404, {"error": "not_declared", "message": str(e)})
        except UnknownWorkload as e:
            return reply(404, {"error": "not_found", "message": str(e)})
        except NoValue as e:
            log.info("KEDA 503 (%s): %s", e.reason, e.message)
            return reply(503, no_value_json(e))
        if not math.isfinite(a.value.value):  # compute() never returns one; the JSON must stay a number
            return reply(503, {"error": "no_data", "message": "the value is not finite"})
        return reply(200, answer_json(a))

    @bp.get(PROFILES_PATH)
    def keda_profiles() -> Response:
        body = {
            "profiles": {
                p.name: {
                    "signal": p.signal,
                    "aggregation": p.aggregation,
                    "window_seconds": p.window_seconds,
                    "targetValue": p.target,
                    "activationTargetValue": p.activation,
                    "metricType": p.metric_type,
                    "description": p.help,
                }
                for p in PROFILES.values()
            },
            "signals": {s.name: {"unit": s.unit, "description": s.help} for s in SIGNALS.values()},
            "aggregations": list(AGGREGATIONS),
            "valueLocation": VALUE_LOCATION,
        }
        return jsonify(body)

    return bp
