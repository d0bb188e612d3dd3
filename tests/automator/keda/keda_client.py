"""KEDA's side of an external scaler call, run in its own interpreter: stubs generated from KEDA's own
externalscaler.proto (their messages share full names with the automator's generated ones, so both cannot
live in one process), a channel made as pkg/scalers/external_scaler.go makes it (transport credentials
and nothing else: no per-call metadata), and the calls KEDA makes each poll.

usage: python keda_client.py STUBS_DIR ADDRESS NAME NAMESPACE METADATA_JSON [CA CERT KEY]
prints one JSON line: {"metric_spec": ..., "value": ..., "active": ...} or {"error": CODE_NAME}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    stubs, address, name, namespace, metadata = argv[:5]
    sys.path.insert(0, stubs)
    import externalscaler_pb2 as pb  # type: ignore[import-not-found]
    import externalscaler_pb2_grpc as pb_grpc  # type: ignore[import-not-found]
    import grpc

    options = [("grpc.ssl_target_name_override", "localhost")]
    if len(argv) > 5:
        ca, cert, key = (Path(p).read_bytes() if p != "-" else None for p in argv[5:8])
        credentials = grpc.ssl_channel_credentials(ca, key, cert)
        channel = grpc.secure_channel(address, credentials, options)
    else:
        channel = grpc.insecure_channel(address)
    ref = pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=json.loads(metadata))
    stub = pb_grpc.ExternalScalerStub(channel)
    try:
        spec = stub.GetMetricSpec(ref, timeout=10).metricSpecs[0]
        request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=spec.metricName)
        value = stub.GetMetrics(request, timeout=10).metricValues[0].metricValueFloat
        active = stub.IsActive(ref, timeout=10).result
    except grpc.RpcError as e:
        print(json.dumps({"error": e.code().name, "details": e.details()}))
        return 0
    finally:
        channel.close()
    print(
        json.dumps({"metric_spec": [spec.metricName, spec.targetSizeFloat], "value": value, "active": active})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
