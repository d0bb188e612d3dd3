"""The demo's KEDA stand-in (tools/fakes/kedasim.py): its replica count held to the HPA's formula on a table
of cases, and its polling held to KEDA's metrics-api scaler against a real HTTP endpoint and the fake API
server (GET with the bearer token, one retry, fallback only past failureThreshold failures)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from tools.fakes.fakekube import FakeApiServer
from tools.fakes.kedasim import Hpa, KedaStandIn, ScaledObject, ScaledObjectError, describe, raw_replicas
from tools.fakes.kubeapi import load_objects

REPO = Path(__file__).resolve().parents[3]
DEMO_KEDA = REPO / "deploy" / "demo" / "keda.yaml"


def hpa_value(value: float, target: float, ready: int) -> int:
    """replica_calculator.go GetExternalMetricReplicas, written out again: ceil(value / target x ready)."""
    return math.ceil(value / target * ready)


# (metricType, value, target, current replicas, ready pods, expected)
RAW_CASES = [
    # Value: desired = ceil(value / target x ready pods)
    ("Value", 86, 70, 2, 2, 3),  # the demo's example line: 0.86 over 0.70 -> 2 to 3
    ("Value", 140, 70, 3, 2, 4),  # the ready pods count, not the replicas asked for
    ("Value", 20, 70, 4, 4, 2),
    ("Value", 0, 70, 3, 3, 0),  # 0: the min replica count holds it later
    ("Value", 75, 70, 2, 2, 2),  # ratio 1.07: within the 0.1 tolerance, no change
    ("Value", 65, 70, 4, 4, 4),  # ratio 0.93: within the tolerance
    ("Value", 80, 70, 2, 2, 3),  # ratio 1.14: past it
    ("Value", 140, 70, 0, 0, 2),  # from 0 replicas: ceil(ratio)
    # AverageValue: ratio = value / (target x current), desired = ceil(value / target)
    ("AverageValue", 300, 70, 2, 2, 5),
    ("AverageValue", 145, 70, 2, 2, 2),  # ratio 1.04: within the tolerance
    ("AverageValue", 30, 70, 3, 3, 1),
    ("AverageValue", 100, 80, 1, 1, 2),  # a 0-100 signal with AverageValue: never more than 2
    ("AverageValue", 100, 80, 2, 2, 2),
    ("AverageValue", 280, 70, 4, 1, 4),  # ratio 1.0 exactly: the ready pods play no part
]


@pytest.mark.parametrize(("metric_type", "value", "target", "current", "ready", "expected"), RAW_CASES)
def test_the_replica_count_is_the_hpa_formula(
    metric_type: Any, value: float, target: float, current: int, ready: int, expected: int
) -> None:
    assert raw_replicas(metric_type, value, target, current, ready) == expected
    ratio = value / target / current if metric_type == "AverageValue" and current else value / target
    if metric_type == "Value" and current and abs(1 - ratio) > 0.1:
        assert expected == hpa_value(value, target, ready)


def test_the_tolerance_is_a_parameter() -> None:
    assert raw_replicas("Value", 75, 70, 2, 2, tolerance=0.0) == 3
    assert raw_replicas("Value", 90, 70, 2, 2, tolerance=0.5) == 2


# (min, max, scale-down window, scale-up window, [(t, current, recommendation or None, expected)])
HPA_CASES = {
    "max replicas": (1, 5, 0, 0, [(0, 3, 9, 5)]),
    "min replicas": (2, 5, 0, 0, [(0, 3, 0, 2)]),
    "above max before any metric": (1, 5, 0, 0, [(0, 7, 1, 5)]),
    "below min before any metric": (2, 5, 0, 0, [(0, 1, 9, 2)]),
    "no metric keeps the size": (1, 5, 60, 0, [(0, 3, None, 3)]),
    "scale-down waits for the window": (
        1, 10, 60, 0, [(0, 4, 4, 4), (30, 4, 2, 4), (59, 4, 1, 4), (61, 4, 1, 2), (90, 2, 1, 1)],
    ),
    "scale-up is not held by the scale-down window": (1, 10, 60, 0, [(0, 2, 2, 2), (10, 2, 5, 5)]),
    "scale-up window": (1, 10, 0, 30, [(0, 2, 2, 2), (10, 2, 4, 2), (31, 2, 4, 4)]),
    "stabilized, then the max": (1, 3, 60, 0, [(0, 3, 6, 3), (10, 3, 1, 3)]),
    "old recommendations forgotten": (1, 10, 60, 0, [(0, 5, 5, 5), (100, 5, 2, 2)]),
}  # fmt: skip


@pytest.mark.parametrize("name", HPA_CASES)
def test_the_recommendation_is_stabilized_and_limited_as_the_hpa_does(name: str) -> None:
    minimum, maximum, down, up, steps = HPA_CASES[name]
    hpa = Hpa(minimum, maximum, scale_down_window=down, scale_up_window=up)
    for at, current, desired, expected in steps:
        assert hpa.replicas(at, current, desired) == expected, (name, at)


def test_the_demo_scaled_object_is_read() -> None:
    so = ScaledObject.from_manifests(load_objects(DEMO_KEDA))
    assert (so.namespace, so.deployment, so.metric_type, so.target) == ("inference", "api", "Value", 70)
    assert (so.min_replicas, so.max_replicas, so.failure_threshold, so.fallback_replicas) == (1, 5, 3, 5)
    assert so.bearer_secret == ("gpu-steward-keda", "token") and so.profile == "triton-inference"
    assert (so.scale_down_window, so.scale_up_window) == (60, 30)


def test_a_scaled_object_the_stand_in_cannot_play_names_the_field() -> None:
    docs = load_objects(DEMO_KEDA)
    so = next(d for d in docs if d["kind"] == "ScaledObject")
    so["spec"]["triggers"][0]["metricType"] = "Utilization"
    with pytest.raises(ScaledObjectError, match=r"metricType"):
        ScaledObject.from_manifests(docs)


# --- polling, against a real endpoint and the fake API server ---------------------------------------------

TOKEN = "s3cret"


def cluster(replicas: int) -> list[dict[str, Any]]:
    uid = "dep-uid"
    pods = [
        {
            "kind": "Pod",
            "metadata": {"name": f"api-{i}", "namespace": "inference", "labels": {"app": "api"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(replicas)
    ]
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "inference", "uid": uid},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "api"}}},
    }
    return [deployment, *pods]


@pytest.fixture
def kube() -> Iterator[FakeApiServer]:
    with FakeApiServer(cluster(2)).start() as server:
        yield server


def stand_in(httpserver: HTTPServer, kube: FakeApiServer) -> KedaStandIn:
    so = ScaledObject.from_manifests(load_objects(DEMO_KEDA))
    return KedaStandIn(so, httpserver.url_for("/keda/v1/metrics"), kube.url, TOKEN)


def replicas(kube: FakeApiServer) -> int:
    (deployment,) = kube.objects_of("deployments")
    return int(deployment["spec"]["replicas"])


def test_a_poll_gets_the_value_with_the_token_and_scales_the_deployment(
    httpserver: HTTPServer, kube: FakeApiServer
) -> None:
    seen: list[Request] = []

    def answer(request: Request) -> Response:
        seen.append(request)
        return Response(json.dumps({"value": 86.0, "unit": "percent"}), content_type="application/json")

    httpserver.expect_request("/keda/v1/metrics", method="GET").respond_with_handler(answer)
    keda = stand_in(httpserver, kube)
    poll = keda.poll()
    assert (poll.current, poll.replicas, poll.value) == (2, 3, 86.0)
    assert replicas(kube) == 3
    assert [r.headers.get("Authorization") for r in seen] == [f"Bearer {TOKEN}"]
    assert describe(keda.scaled_object, poll) == (
        "KEDA (metrics-api, triton-inference): inference/api GPU utilization 0.86 over target 0.70 "
        "-> 2 to 3 replicas"
    )


def test_503_is_retried_once_and_the_fallback_applies_only_past_the_threshold(
    httpserver: HTTPServer, kube: FakeApiServer
) -> None:
    calls: list[int] = []

    def unavailable(request: Request) -> Response:
        calls.append(1)
        body = {"error": "prometheus_unavailable", "reason": "Prometheus cannot be read"}
        return Response(json.dumps(body), status=503, content_type="application/json")

    httpserver.expect_request("/keda/v1/metrics").respond_with_handler(unavailable)
    keda = stand_in(httpserver, kube)
    threshold = keda.scaled_object.failure_threshold
    assert threshold == 3
    for failure in range(1, threshold + 1):  # KEDA: NumberOfFailures > FailureThreshold
        poll = keda.poll()
        assert (poll.failures, poll.fallback, poll.replicas, replicas(kube)) == (failure, False, 2, 2)
        assert poll.error == "HTTP 503 prometheus_unavailable"
    assert len(calls) == 2 * threshold  # each poll: the GET and its one retry
    poll = keda.poll()
    assert (poll.fallback, poll.replicas, replicas(kube)) == (True, 5, 5)
    assert "fallback to 5 replicas" in describe(keda.scaled_object, poll)


def test_an_answer_between_failures_resets_the_count(httpserver: HTTPServer, kube: FakeApiServer) -> None:
    answers = iter([503, 503, 503, 503, 503, 503, 200, 503, 503])

    def answer(request: Request) -> Response:
        code = next(answers)
        return Response(json.dumps({"value": 70.0, "unit": "percent"}), status=code)

    httpserver.expect_request("/keda/v1/metrics").respond_with_handler(answer)
    keda = stand_in(httpserver, kube)
    assert [keda.poll().failures for _ in range(3)] == [1, 2, 3]
    assert keda.poll().failures == 0  # the first GET fails, its retry answers 200
    assert (keda.poll().failures, replicas(kube)) == (1, 2)
