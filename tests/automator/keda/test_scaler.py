"""The external scaler through a real gRPC channel (KEDA's externalscaler.proto), over the fake sources."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from prometheus_client import CollectorRegistry

from automator.keda.cache import CacheConfig, KedaCache
from automator.keda.externalscaler import externalscaler_pb2 as pb
from automator.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from automator.keda.metrics import KedaMetrics
from automator.keda.scaler import ExternalScaler, serve
from tests.automator.keda.fakes import NOW, FakePrometheus, cluster, fresh_result


@pytest.fixture
def prom() -> FakePrometheus:
    return FakePrometheus(fresh_result())


@pytest.fixture
def stub(prom: FakePrometheus) -> Iterator[pb_grpc.ExternalScalerStub]:
    metrics = KedaMetrics(CollectorRegistry())
    cache = KedaCache(prom, cluster(), CacheConfig(refresh_seconds=3600), metrics, clock=lambda: NOW)
    scaler = ExternalScaler(cache, metrics, max_streams=1, stream_interval=0.05)
    server, port = serve(scaler, "127.0.0.1", 0, workers=4)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.ExternalScalerStub(channel)
    finally:
        scaler.stop()
        channel.close()
        server.stop(grace=None)
        cache.stop()


def ref(**meta: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(
        name="api-gpu", namespace="inference", scalerMetadata={"deployment": "api", **meta}
    )


def test_metric_spec_and_metrics(stub: pb_grpc.ExternalScalerStub) -> None:
    spec = stub.GetMetricSpec(ref(profile="triton-inference"), timeout=10)
    assert len(spec.metricSpecs) == 1
    m = spec.metricSpecs[0]
    assert (m.metricName, m.targetSizeFloat, m.targetSize) == ("gpu-gpu-utilization-avg", 75.0, 75)
    got = stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref(profile="triton-inference"), metricName=m.metricName),
        timeout=10,
    )
    assert got.metricValues[0].metricName == m.metricName
    assert got.metricValues[0].metricValueFloat == pytest.approx(40.0)
    assert got.metricValues[0].metricValue == 40


def test_trigger_metadata_overrides_the_profile(stub: pb_grpc.ExternalScalerStub) -> None:
    r = ref(profile="triton-inference", aggregation="max", targetValue="50", activationThreshold="70")
    spec = stub.GetMetricSpec(r, timeout=10)
    assert spec.metricSpecs[0].targetSizeFloat == 50.0
    got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=r, metricName="x"), timeout=10)
    assert got.metricValues[0].metricValueFloat == pytest.approx(60.0)
    assert stub.IsActive(r, timeout=10).result is False  # 60 <= 70
    assert stub.IsActive(ref(profile="triton-inference"), timeout=10).result is True  # 40 > 10


def test_metadata_cannot_read_another_namespace(stub: pb_grpc.ExternalScalerStub) -> None:
    meta = {"namespace": "inference", "selector": "app=other", "signal": "gpu_utilization"}
    r = pb.ScaledObjectRef(name="x", namespace="elsewhere", scalerMetadata=meta)
    with pytest.raises(grpc.RpcError) as e:
        stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=r, metricName="m"), timeout=10)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED and "namespace" in e.value.details()
    own = pb.ScaledObjectRef(name="x", namespace="inference", scalerMetadata=meta)
    got = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=own, metricName="m"), timeout=10)
    assert got.metricValues[0].metricValueFloat == pytest.approx(50.0)  # naming its own is fine


def test_bad_metadata_is_invalid_argument_naming_the_key(stub: pb_grpc.ExternalScalerStub) -> None:
    with pytest.raises(grpc.RpcError) as e:
        stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(profile="nope"), metricName="m"), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "profile" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.GetMetricSpec(ref(signal="gpu_utilization"), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "targetValue" in e.value.details()


def test_missing_data_is_unavailable_never_zero(
    stub: pb_grpc.ExternalScalerStub, prom: FakePrometheus
) -> None:
    prom.result = fresh_result(age=1000)
    for call in (
        lambda: stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref(profile="training"), metricName="m"), timeout=10
        ),
        lambda: stub.IsActive(ref(profile="training"), timeout=10),
    ):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "stale" in e.value.details()


def test_unknown_workload_is_not_found(stub: pb_grpc.ExternalScalerStub) -> None:
    with pytest.raises(grpc.RpcError) as e:
        stub.IsActive(ref(profile="training", deployment="gone"), timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_stream_is_active_sends_the_state_and_streams_are_bounded(stub: pb_grpc.ExternalScalerStub) -> None:
    stream = stub.StreamIsActive(ref(profile="triton-inference"), timeout=10)
    assert next(stream).result is True
    second = stub.StreamIsActive(ref(profile="training"), timeout=10)
    with pytest.raises(grpc.RpcError) as e:
        next(second)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    stream.cancel()
