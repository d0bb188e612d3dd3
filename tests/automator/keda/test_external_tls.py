"""The external scaler as KEDA calls it: stubs generated from KEDA's own proto, no per-call metadata, mutual
TLS with the certificates of a TriggerAuthentication's caCert/tlsClientCert/tlsClientKey; the answers
those of the ScaledObject that declares the question."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from automator.keda.answers import KedaAnswers
from automator.keda.auth import AuthConfig
from automator.keda.cache import CacheConfig, KedaCache
from automator.keda.certs import ReloadingTLS, TlsFiles
from automator.keda.metrics import KedaMetrics
from automator.keda.scaler import ExternalScaler, serve
from automator.keda.table import DeclaredTable
from tests.automator.keda.certs import Certs, make_certs
from tests.automator.keda.fakes import NOW, FakeDeclaredSource, FakePrometheus, fresh_result, scaled_object

HERE = Path(__file__).resolve().parent
UPSTREAM = HERE.parents[2].parent / "shared/reference/schemas/keda/externalscaler.proto"
METADATA = {"scalerAddress": "gpu-steward-automator.gpu-steward.svc:9000", "profile": "triton-inference"}

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for certificates")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def keda_stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not UPSTREAM.is_file():
        pytest.skip(f"KEDA's proto not found at {UPSTREAM}")
    out = tmp_path_factory.mktemp("keda-stubs")
    shutil.copy(UPSTREAM, out / "externalscaler.proto")
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", "--grpc_python_out=.",
         "externalscaler.proto"],
        cwd=out, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return out


@pytest.fixture
def answers() -> Iterator[KedaAnswers]:
    prom = FakePrometheus(fresh_result())
    source = FakeDeclaredSource([scaled_object("api-gpu", external=dict(METADATA))])
    metrics = KedaMetrics(CollectorRegistry())
    ondemand = KedaCache(prom, source.kube, CacheConfig(), metrics, clock=lambda: NOW)
    a = KedaAnswers(DeclaredTable(prom, metrics=metrics, clock=lambda: NOW), ondemand, source, metrics)
    a.refresh()
    yield a
    a.stop()


def keda_call(stubs: Path, port: int, *tls: Path | str, name: str = "api-gpu") -> dict[str, Any]:
    argv = [sys.executable, str(HERE / "keda_client.py"), str(stubs), f"127.0.0.1:{port}", name, "inference",
            json.dumps(METADATA), *map(str, tls)]  # fmt: skip
    done = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_keda_calls_with_mutual_tls_and_no_metadata(
    answers: KedaAnswers, certs: Certs, keda_stubs: Path
) -> None:
    # Credentials configured (a token file too): only a client certificate the CA signed admits a call.
    auth = AuthConfig(bearer_tokens=("tok-1",), client_certificates=True)
    scaler = ExternalScaler(answers, answers.metrics, auth=auth, client_verified=True)
    server, port = serve(
        scaler,
        "127.0.0.1",
        0,
        4,
        tls=ReloadingTLS(TlsFiles(str(certs.server_cert), str(certs.server_key), str(certs.ca))),
    )
    try:
        got = keda_call(keda_stubs, port, certs.ca, certs.client_cert, certs.client_key)
        assert got == {
            "metric_spec": ["gpu-gpu-utilization-avg", 75.0],
            "value": pytest.approx(40.0),
            "active": True,
        }
        for refused in ((certs.ca, "-", "-"), (certs.ca, certs.stranger_cert, certs.stranger_key)):
            assert keda_call(keda_stubs, port, *refused)["error"] == "UNAVAILABLE"  # the handshake refuses
        assert keda_call(keda_stubs, port)["error"] == "UNAVAILABLE"  # plaintext to a TLS port
        # A ScaledObject the last refresh did not list: warming up until the next one (KEDA's fallback).
        new = keda_call(keda_stubs, port, certs.ca, certs.client_cert, certs.client_key, name="new")
        assert new["error"] == "UNAVAILABLE" and "warming_up" in new["details"]
    finally:
        scaler.stop()
        server.stop(grace=None)


def test_without_credentials_keda_calls_the_open_port(answers: KedaAnswers, keda_stubs: Path) -> None:
    scaler = ExternalScaler(answers, answers.metrics)
    server, port = serve(scaler, "127.0.0.1", 0, 4)
    try:
        got = keda_call(keda_stubs, port)
        assert got["value"] == pytest.approx(40.0) and got["active"] is True
    finally:
        scaler.stop()
        server.stop(grace=None)


# --- what `keda scaledobject --trigger external` writes ------------------------------------------------


def _command(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, list[dict[str, Any]], str]:
    from automator.cli import main

    code = main(["keda", "scaledobject", "--namespace", "inference", "--deployment", "api",
                 "--profile", "triton-inference", "--trigger", "external", *flags])  # fmt: skip
    out, err = capsys.readouterr()
    return code, list(yaml.safe_load_all(out)) if code == 0 else [], err


def test_external_with_tls_writes_the_trigger_authentication_keda_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, docs, _ = _command(capsys, "--auth", "tls", "--secret", "keda-client")
    assert code == 0
    secret, auth, so = docs
    params = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert set(params) == {"caCert", "tlsClientCert", "tlsClientKey"}
    assert {n for n, _ in params.values()} == {"keda-client"} and set(secret["stringData"]) == {
        k for _, k in params.values()
    }
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == "external" and trigger["authenticationRef"] == {"name": "keda-client"}
    assert trigger["metadata"]["scalerAddress"] == "gpu-steward-automator.gpu-steward.svc:9000"
    assert not {"authMode", "authModes"} & set(trigger["metadata"])


def test_external_without_auth_writes_the_scaled_object_alone(capsys: pytest.CaptureFixture[str]) -> None:
    code, docs, _ = _command(capsys)
    assert code == 0 and [d["kind"] for d in docs] == ["ScaledObject"]
    assert "authenticationRef" not in docs[0]["spec"]["triggers"][0]


@pytest.mark.parametrize("mode", ["bearer", "apiKey", "basic"])
def test_external_with_a_token_exits_2(capsys: pytest.CaptureFixture[str], mode: str) -> None:
    code, _, err = _command(capsys, "--auth", mode)
    assert code == 2 and f"--auth {mode}" in err and "KEDA sends no tokens to external scalers" in err
