"""The service's wiring of the KEDA endpoints: flags -> auth files, HTTPS listener, external scaler; and
the generated gRPC code against its proto."""

from __future__ import annotations

import filecmp
import json
import shutil
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest

from automator.cli import build_parser
from automator.keda.externalscaler import externalscaler_pb2 as pb
from automator.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from automator.keda.wiring import EXTENSION, KedaRuntime
from automator.service.main import build
from automator.settings import service_settings
from steward_common.settingspec import SettingError
from tools.fakes.promserver import free_port

REPO = Path(__file__).resolve().parents[3]
PROTO = "automator/keda/externalscaler/externalscaler.proto"
QUERY = "namespace=inference&deployment=api&profile=training"
SCALER = "gpu-steward-automator.gpu-steward.svc:9000"
# The snapshot's ScaledObjects declare the question the tests ask, on each trigger type.
CLUSTER = json.dumps(
    {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "api", "namespace": "inference"},
            },
            {
                "apiVersion": "keda.sh/v1alpha1",
                "kind": "ScaledObject",
                "metadata": {"name": "api-gpu", "namespace": "inference"},
                "spec": {
                    "scaleTargetRef": {"name": "api"},
                    "triggers": [
                        {
                            "type": "metrics-api",
                            "metadata": {"url": f"https://x:8443/keda/v1/metrics?{QUERY}"},
                        },
                        {"type": "external", "metadata": {"scalerAddress": SCALER, "profile": "training"}},
                    ],
                },
            },
        ],
    }
)


def settings(tmp_path: Path, *extra: str):  # type: ignore[no-untyped-def]
    snapshot = tmp_path / "cluster.json"
    snapshot.write_text(CLUSTER)
    dead = f"http://127.0.0.1:{free_port()}"
    argv = ["run", "--cluster-snapshot", str(snapshot), "--prometheus-url", dead, "--prometheus-timeout", "2"]
    return service_settings(build_parser().parse_args([*argv, *extra]), environ={})


def test_bad_auth_file_and_half_tls_are_setting_errors(tmp_path: Path) -> None:
    with pytest.raises(SettingError, match="--keda-bearer-token-file"):
        settings(tmp_path, "--keda-bearer-token-file", str(tmp_path / "missing"))
    with pytest.raises(SettingError, match="--keda-tls-cert-file"):
        settings(tmp_path, "--keda-tls-cert-file", str(tmp_path / "cert.pem"))
    with pytest.raises(SettingError, match="--keda-grpc-max-streams"):
        settings(
            tmp_path, "--keda-grpc-port", "9000", "--keda-grpc-workers", "2", "--keda-grpc-max-streams", "2"
        )
    with pytest.raises(SettingError, match="--keda-max-age-seconds"):
        settings(tmp_path, "--keda-max-age-seconds", "nan")


def test_grpc_with_credentials_needs_mutual_tls(tmp_path: Path) -> None:
    # KEDA's external scaler sends no token: a port that asked for one could never be called by KEDA.
    (tmp_path / "token").write_text("tok-1\n")
    with pytest.raises(SettingError, match=r"--keda-grpc-port: .*--keda-tls-client-ca-file"):
        settings(tmp_path, "--keda-grpc-port", "9000", "--keda-bearer-token-file", str(tmp_path / "token"))


@pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl command for a test certificate"
)
def test_https_listener_and_grpc_scaler_start(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    (tmp_path / "token").write_text("tok-1\n")
    tls_port, grpc_port = free_port(), free_port()
    with_token = settings(
        tmp_path,
        "--listen-address", "127.0.0.1",
        "--keda-tls-cert-file", str(cert), "--keda-tls-key-file", str(key), "--keda-tls-port", str(tls_port),
        "--keda-bearer-token-file", str(tmp_path / "token"),
    )  # fmt: skip
    runtime: KedaRuntime = build(with_token).app.extensions[EXTENSION]
    runtime.cache.refresh()
    runtime.start()
    try:
        # A client that connects and says nothing holds no one up (the handshake runs in its own thread).
        silent = socket.create_connection(("127.0.0.1", tls_port), timeout=5)
        context = ssl.create_default_context(cafile=str(cert))
        url = f"https://127.0.0.1:{tls_port}/keda/v1/metrics?{QUERY}"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url, context=context, timeout=10)
        assert e.value.code == 401
        request = urllib.request.Request(url, headers={"Authorization": "Bearer tok-1"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, context=context, timeout=30)
        assert e.value.code == 503  # authenticated; Prometheus is down
        assert json.loads(e.value.read())["error"] == "prometheus_unavailable"
        silent.close()
    finally:
        runtime.stop()
    # Without credentials the external scaler is open, as KEDA calls it: no metadata at all.
    open_grpc = settings(tmp_path, "--listen-address", "127.0.0.1", "--keda-grpc-port", str(grpc_port))
    runtime = build(open_grpc).app.extensions[EXTENSION]
    runtime.cache.refresh()
    runtime.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{runtime.grpc_port}") as channel:
            ref = pb.ScaledObjectRef(
                name="api-gpu",
                namespace="inference",
                scalerMetadata={"scalerAddress": SCALER, "profile": "training"},
            )
            with pytest.raises(grpc.RpcError) as rpc:
                pb_grpc.ExternalScalerStub(channel).IsActive(ref, timeout=30)
            assert rpc.value.code() == grpc.StatusCode.UNAVAILABLE  # admitted; Prometheus is down
    finally:
        runtime.stop()


def test_generated_code_is_current(tmp_path: Path) -> None:
    shutil.copytree(
        REPO / "automator" / "keda" / "externalscaler", tmp_path / "automator" / "keda" / "externalscaler"
    )
    for generated in (tmp_path / "automator" / "keda" / "externalscaler").glob("*_pb2*.py"):
        generated.unlink()
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", "--grpc_python_out=.", PROTO],
        cwd=tmp_path, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    for name in ("externalscaler_pb2.py", "externalscaler_pb2_grpc.py"):
        assert filecmp.cmp(
            tmp_path / Path(PROTO).parent / name, REPO / Path(PROTO).parent / name, shallow=False
        ), f"{name} is stale: run make protos"
