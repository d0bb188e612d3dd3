"""The metrics-api endpoint of the real service wiring against a real Prometheus that evaluates rules/
on the mock exporter, and the external scaler over a real gRPC channel on the same answers: the questions
are those the snapshot's ScaledObjects declare (declared mode with --cluster-snapshot).

Node it-node: GPU-0 held by inference/api-a (60 %, 20 GiB of 80 GiB); GPU-1 time-sliced between
inference/api-b (20 %, 8 GiB) and inference/other-x (50 %, 30 GiB). Deployment api owns api-a and api-b
through a ReplicaSet, Deployment other owns other-x; Deployment ghost has a running pod with no GPU data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gjson
import grpc
import pytest
import yaml
from flask.testing import FlaskClient

from automator.cli import build_parser
from automator.keda.externalscaler import externalscaler_pb2 as pb
from automator.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from automator.keda.request import METRICS_PATH, VALUE_LOCATION
from automator.keda.scaler import ExternalScaler, serve
from automator.keda.signals import GATES
from automator.keda.wiring import EXTENSION, KedaRuntime
from automator.service.main import build
from automator.settings import service_settings
from tools.fakes.promserver import Prometheus, free_port, rules_on_mock_exporter

pytestmark = pytest.mark.integration

GIB = 2**30


def _owner(pod: str) -> dict[str, str]:
    return {"namespace": "inference", "pod": pod, "container": "server"}


def _process(pid: int, pod: str, util: float, memory: str) -> dict[str, Any]:
    return {"pid": pid, "owner": _owner(pod), "phases": [{"from": 0, "utilization": util, "memory": memory}]}


SCENARIO = {
    "node": "it-node",
    "gpus": [
        {
            "index": 0,
            "uuid": "GPU-0",
            "model": "NVIDIA H100 80GB HBM3",
            "memory_total": "80Gi",
            "allocations": [_owner("api-a")],
            "processes": [_process(100, "api-a", 0.6, "20Gi")],
        },
        {
            "index": 1,
            "uuid": "GPU-1",
            "model": "NVIDIA H100 80GB HBM3",
            "memory_total": "80Gi",
            "allocations": [_owner("api-b"), _owner("other-x")],
            "processes": [_process(200, "api-b", 0.2, "8Gi"), _process(300, "other-x", 0.5, "30Gi")],
        },
    ],
}


def _pod(name: str, rs: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "inference",
            "uid": f"uid-{name}",
            "labels": {"app": rs.rsplit("-", 1)[0]},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs}],
        },
        "spec": {"nodeName": "it-node", "containers": [{"name": "server"}]},
        "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"},
    }


def _deployment(name: str) -> list[dict[str, Any]]:
    meta = {"name": name, "namespace": "inference"}
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name}-5d8",
            "namespace": "inference",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name}],
        },
    }
    return [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta}, rs]


# Every question the tests ask, each declared by a metrics-api ScaledObject of its own.
ASKED = (
    *(
        f"deployment=api&signal=gpu_utilization&aggregation={a}&window=1m"
        for a in ("avg", "max", "min", "sum")
    ),
    "deployment=api&profile=triton-inference",
    "deployment=other&signal=gpu_utilization&aggregation=max&window=1m",
    "deployment=other&signal=memory_used_bytes&aggregation=sum&window=1m",
    "deployment=api&signal=memory_used_bytes&aggregation=sum&window=1m",
    "deployment=api&profile=vllm-inference&aggregation=max",
    "deployment=api&signal=memory_used_ratio&aggregation=min&window=1m",
    "deployment=other&signal=power_watts&aggregation=sum&window=1m",
    "deployment=api&signal=power_watts&aggregation=max&window=1m",
    "deployment=api&signal=temperature_celsius&aggregation=max&window=1m",
    "deployment=api&signal=idle_ratio&aggregation=max&window=1m",
    "selector=app%3Dapi&signal=gpu_utilization&aggregation=sum&window=1m",
    "deployment=empty&profile=training",
    "deployment=ghost&profile=training",
)
URL = "http://gpu-steward-automator.gpu-steward.svc:8080/keda/v1/metrics?namespace=inference&"
SCALER = "gpu-steward-automator.gpu-steward.svc:9000"


def _scaled_object(name: str, target: str, trigger: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": "inference"},
        "spec": {"scaleTargetRef": {"name": target}, "triggers": [trigger]},
    }


def _metrics_api(query: str) -> dict[str, Any]:
    return {"type": "metrics-api", "metadata": {"url": URL + query, "valueLocation": "value"}}


SCALED_OBJECTS = [
    *(_scaled_object(f"asked-{i}", "api", _metrics_api(q)) for i, q in enumerate(ASKED)),
    # External triggers: the workload is the scale target when the metadata names none.
    _scaled_object(
        "api",
        "api",
        {"type": "external", "metadata": {"scalerAddress": SCALER, "profile": "triton-inference"}},
    ),
    _scaled_object(
        "g",
        "ghost",
        {
            "type": "external",
            "metadata": {"scalerAddress": SCALER, "deployment": "ghost", "profile": "training"},
        },
    ),
]

CLUSTER = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        *SCALED_OBJECTS,
        *_deployment("api"),
        *_deployment("other"),
        *_deployment("ghost"),
        *_deployment("empty"),
        _pod("api-a", "api-5d8"),
        _pod("api-b", "api-5d8"),
        _pod("other-x", "other-5d8"),
        _pod("ghost-q", "ghost-5d8"),
    ],
}


def _client(prom_url: str, snapshot: Path, *extra: str) -> tuple[FlaskClient, KedaRuntime]:
    args = build_parser().parse_args(
        [
            "run",
            "--cluster-snapshot",
            str(snapshot),
            "--prometheus-url",
            prom_url,
            "--prometheus-timeout",
            "5",
            *extra,
        ]
    )
    wiring = build(service_settings(args, environ={}))
    runtime: KedaRuntime = wiring.app.extensions[EXTENSION]
    runtime.cache.refresh()  # what the refresh thread does every --keda-refresh-seconds (not started here)
    return wiring.app.test_client(), runtime


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Path]]:
    tmp = tmp_path_factory.mktemp("keda-it")
    scenario = tmp / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    snapshot = tmp / "cluster.yaml"
    snapshot.write_text(yaml.safe_dump(CLUSTER))
    with rules_on_mock_exporter(tmp, scenario) as prom:
        # Every gate for all three pods, and a second evaluation so that 1-minute windows hold samples.
        for gate in set(GATES.values()):
            prom.wait_for(f'count({gate}{{namespace="inference"}}) == 3', timeout=150)
        prom.wait_for(
            f'count(count_over_time({GATES[next(iter(GATES))]}{{pod="api-a"}}[5m]) >= 2)', timeout=90
        )
        yield prom, snapshot


@pytest.fixture(scope="module")
def client(stack: tuple[Prometheus, Path]) -> FlaskClient:
    return _client(stack[0].url, stack[1])[0]


def get(client: FlaskClient, query: str) -> tuple[int, dict[str, Any]]:
    r = client.get(f"{METRICS_PATH}?namespace=inference&{query}")
    return r.status_code, json.loads(r.data)


@pytest.mark.parametrize(
    ("aggregation", "expected"), [("avg", 40.0), ("max", 60.0), ("min", 20.0), ("sum", 80.0)]
)
def test_utilization_of_the_deployments_pods(client: FlaskClient, aggregation: str, expected: float) -> None:
    status, body = get(client, f"deployment=api&signal=gpu_utilization&aggregation={aggregation}&window=1m")
    assert status == 200, body
    assert body["value"] == pytest.approx(expected, abs=0.5)
    assert (body["pods"], body["gpus"], body["unit"]) == (2, 2, "percent")
    assert 0 <= body["age_seconds"] <= 120
    assert "namespace_pod:gpu_steward_container_gpu_utilization_ratio:max" in body["query"]


def test_gjson_value_location(client: FlaskClient) -> None:
    r = client.get(f"{METRICS_PATH}?namespace=inference&deployment=api&profile=triton-inference")
    assert r.status_code == 200
    assert gjson.get(json.loads(r.data), VALUE_LOCATION) == pytest.approx(40.0, abs=0.5)


def test_a_workload_sharing_a_gpu_gets_only_its_own_usage(client: FlaskClient) -> None:
    status, body = get(client, "deployment=other&signal=gpu_utilization&aggregation=max&window=1m")
    assert status == 200 and body["value"] == pytest.approx(50.0, abs=0.5) and body["gpus"] == 1
    status, body = get(client, "deployment=other&signal=memory_used_bytes&aggregation=sum&window=1m")
    assert status == 200 and body["value"] == pytest.approx(30 * GIB, rel=0.01)


def test_memory_signals(client: FlaskClient) -> None:
    status, body = get(client, "deployment=api&signal=memory_used_bytes&aggregation=sum&window=1m")
    assert status == 200 and body["value"] == pytest.approx(28 * GIB, rel=0.01)
    status, body = get(client, "deployment=api&profile=vllm-inference&aggregation=max")
    assert status == 200 and body["value"] == pytest.approx(25.0, abs=0.5)  # 20 GiB of 80 GiB
    status, body = get(client, "deployment=api&signal=memory_used_ratio&aggregation=min&window=1m")
    assert status == 200 and body["value"] == pytest.approx(0.1, abs=0.005)  # 8 GiB of 80 GiB


def test_power_is_split_between_the_pods_of_a_shared_gpu(
    stack: tuple[Prometheus, Path], client: FlaskClient
) -> None:
    power = {
        r["metric"]["uuid"]: float(r["value"][1])
        for r in stack[0].query("max by (uuid) (avg_over_time(gpu_steward_gpu_power_watts[1m]))")
    }
    status, body = get(client, "deployment=other&signal=power_watts&aggregation=sum&window=1m")
    assert status == 200 and body["value"] == pytest.approx(power["GPU-1"] / 2, rel=0.05)
    status, body = get(client, "deployment=api&signal=power_watts&aggregation=max&window=1m")
    assert status == 200 and body["value"] == pytest.approx(max(power["GPU-0"], power["GPU-1"] / 2), rel=0.05)
    status, body = get(client, "deployment=api&signal=temperature_celsius&aggregation=max&window=1m")
    assert status == 200 and 20 < body["value"] < 100


def test_idle_ratio_of_busy_pods_is_zero_measured(client: FlaskClient) -> None:
    status, body = get(client, "deployment=api&signal=idle_ratio&aggregation=max&window=1m")
    assert status == 200 and body["value"] == 0 and body["pods"] == 2


def test_selector_reads_the_same_pods(client: FlaskClient) -> None:
    status, body = get(client, "selector=app%3Dapi&signal=gpu_utilization&aggregation=sum&window=1m")
    assert status == 200 and body["value"] == pytest.approx(80.0, abs=0.5)


def test_no_running_pods_is_zero_and_missing_data_is_503(client: FlaskClient) -> None:
    status, body = get(client, "deployment=empty&profile=training")
    assert status == 200 and (body["value"], body["pods"]) == (0, 0)
    status, body = get(client, "deployment=ghost&profile=training")
    assert status == 503 and body["error"] == "no_data" and "value" not in body


def test_bad_parameters_are_400(client: FlaskClient) -> None:
    for query, parameter in [
        ("deployment=api&profile=gpt", "profile"),
        ("deployment=api&signal=fan_speed", "signal"),
        ("deployment=api&signal=gpu_utilization&aggregation=median", "aggregation"),
        ("selector=app%3D%3D%3D&signal=gpu_utilization", "selector"),
    ]:
        status, body = get(client, query)
        assert (status, body["parameter"]) == (400, parameter)


def test_prometheus_unreachable_is_503(stack: tuple[Prometheus, Path]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    client, _runtime = _client(dead, stack[1])
    status, body = get(client, "deployment=api&profile=triton-inference")
    assert status == 503 and body["error"] == "prometheus_unavailable"
    assert "127.0.0.1" not in body["message"]


def test_stale_data_is_503(stack: tuple[Prometheus, Path]) -> None:
    # Every answer's data is at least 0 s old; a max age below the rule interval makes most of them stale:
    # moving the cache's clock past the rule interval makes all of them stale, deterministically.
    client, runtime = _client(stack[0].url, stack[1], "--keda-max-age-seconds", "60")
    assert get(client, "deployment=api&profile=triton-inference")[0] == 200
    real = runtime.cache.table.clock
    runtime.cache.table.clock = lambda: real() + 120
    runtime.cache.refresh()
    status, body = get(client, "deployment=api&profile=triton-inference")
    assert status == 503 and body["error"] == "stale"


def test_external_scaler_over_grpc_reads_the_same_cache(stack: tuple[Prometheus, Path]) -> None:
    _, runtime = _client(stack[0].url, stack[1])
    server, port = serve(ExternalScaler(runtime.cache), "127.0.0.1", 0, workers=2)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            # As KEDA sends it: the trigger's metadata (no workload: the scale target's), no call metadata.
            ref = pb.ScaledObjectRef(
                name="api",
                namespace="inference",
                scalerMetadata={"scalerAddress": SCALER, "profile": "triton-inference"},
            )
            spec = stub.GetMetricSpec(ref, timeout=10).metricSpecs[0]
            assert spec.targetSizeFloat == 75
            got = stub.GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=ref, metricName=spec.metricName), timeout=10
            )
            assert got.metricValues[0].metricValueFloat == pytest.approx(40.0, abs=0.5)
            assert stub.IsActive(ref, timeout=10).result is True
            ghost = pb.ScaledObjectRef(
                name="g", namespace="inference", scalerMetadata={"deployment": "ghost", "profile": "training"}
            )
            with pytest.raises(grpc.RpcError) as e:
                stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ghost, metricName="m"), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(grace=None)


def test_one_query_per_declared_signal_and_window(stack: tuple[Prometheus, Path]) -> None:
    _, runtime = _client(stack[0].url, stack[1])
    table = runtime.cache.table.table
    assert table is not None and len(table.results) == len(ASKED)  # the external triggers ask known ones
    pairs = {(d.question.signal.base, d.question.window_seconds) for d in table.declared.questions.values()}
    assert table.queries == len(pairs) < len(ASKED)


def test_a_question_no_scaled_object_declares_is_404_not_declared(client: FlaskClient) -> None:
    status, body = get(client, "deployment=api&signal=gpu_utilization&aggregation=avg&window=7m")
    assert status == 404 and body["error"] == "not_declared"
    assert "namespace=inference&deployment=api" in body["message"]
    # Named by the ScaledObject that asks: one the last refresh did not list is warming up.
    status, body = get(client, "deployment=api&signal=gpu_utilization&window=7m&scaledobject=new-one")
    assert status == 503 and body["error"] == "warming_up"
    status, body = get(client, "deployment=api&signal=gpu_utilization&window=7m&scaledobject=asked-0")
    assert status == 404 and body["error"] == "not_declared" and "asked-0" in body["message"]
