"""The KEDA listeners' certificates: checked at start (exit 2 naming the flag, before any pass), reloaded
when a Secret volume swaps its files (a symlink swap), connections in flight kept."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from flask import Flask

from automator.cli import main
from automator.keda.auth import AuthConfig
from automator.keda.certs import ReloadingTLS, TlsFiles, load
from automator.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from automator.keda.http import blueprint
from automator.keda.scaler import ExternalScaler, serve
from automator.keda.tls import serve_tls
from steward_common.settingspec import SettingError
from tests.automator.keda.certs import Certs, another_server_certificate, make_certs
from tests.automator.keda.fakes import FakePrometheus, cluster, fresh_result

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for certificates")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


# --- at start -------------------------------------------------------------------------------------------


def test_every_bad_file_is_named_by_its_flag(certs: Certs, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    cases = [
        (TlsFiles(str(tmp_path / "missing.pem"), str(certs.server_key)), "--keda-tls-cert-file"),
        (TlsFiles(str(certs.server_key), str(certs.server_key)), "--keda-tls-cert-file"),  # a key, no cert
        (TlsFiles(str(junk), str(certs.server_key)), "--keda-tls-cert-file"),
        (TlsFiles(str(certs.server_cert), str(certs.client_key)), "--keda-tls-key-file"),  # another's key
        (TlsFiles(str(certs.server_cert), str(tmp_path / "missing.key")), "--keda-tls-key-file"),
        (TlsFiles(str(certs.server_cert), str(certs.server_key), str(junk)), "--keda-tls-client-ca-file"),
    ]
    for files, flag in cases:
        with pytest.raises(SettingError, match=flag):
            load(files)
    assert load(TlsFiles(str(certs.server_cert), str(certs.server_key), str(certs.ca))).ca is not None


def test_a_bad_key_exits_2_before_any_pass(
    certs: Certs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "cluster.json"
    snapshot.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": []}))
    flags = ["--keda-tls-cert-file", str(certs.server_cert), "--keda-tls-key-file", str(certs.client_key)]
    code = main(["run", "--cluster-snapshot", str(snapshot), *flags])
    err = capsys.readouterr().err
    assert code == 2 and "--keda-tls-key-file" in err and "Traceback" not in err


# --- rotation -------------------------------------------------------------------------------------------


class SecretVolume:
    """A directory laid out as the kubelet lays out a Secret volume: each key a symlink through `..data`,
    which points to a timestamped directory; an update writes a new directory and swaps `..data`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0

    def write(self, files: dict[str, Path]) -> None:
        self.generation += 1
        target = self.root / f"..2026_{self.generation}"
        target.mkdir()
        for name, source in files.items():
            shutil.copy(source, target / name)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(target.name)
        os.replace(tmp, self.root / "..data")  # the atomic swap
        for name in files:
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(Path("..data") / name)

    def path(self, name: str) -> str:
        return str(self.root / name)


@pytest.fixture
def volume(tmp_path: Path, certs: Certs) -> Iterator[SecretVolume]:
    v = SecretVolume(tmp_path / "secret")
    v.root.mkdir()
    v.write({"tls.crt": certs.server_cert, "tls.key": certs.server_key, "ca.crt": certs.ca})
    yield v


def _peer(port: int, ca: Path) -> bytes:
    context = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with context.wrap_socket(raw, server_hostname="localhost") as s:
        der = s.getpeercert(binary_form=True)
        assert der is not None
        return der


def test_https_serves_the_new_certificate_after_a_swap_and_keeps_connections(
    volume: SecretVolume, certs: Certs, tmp_path: Path
) -> None:
    from automator.keda.cache import CacheConfig, KedaCache

    cache = KedaCache(FakePrometheus(fresh_result()), cluster(), CacheConfig())
    app = Flask("t")
    app.register_blueprint(blueprint(cache, AuthConfig()))
    tls = ReloadingTLS(TlsFiles(volume.path("tls.crt"), volume.path("tls.key")), check_seconds=0)
    server = serve_tls(app, "127.0.0.1", 0, tls)
    port = server.bind_addr[1]
    try:
        old = _peer(port, certs.ca)
        kept = http.client.HTTPSConnection(
            "127.0.0.1", port, timeout=10, context=ssl.create_default_context(cafile=str(certs.ca))
        )
        kept.request("GET", "/keda/v1/profiles")
        first = kept.getresponse()
        assert first.status == 200 and first.read()
        sock = kept.sock
        new_cert, new_key = another_server_certificate(certs.ca.parent, "rotated")
        volume.write({"tls.crt": new_cert, "tls.key": new_key})
        other_ca = certs.ca.parent / "other-ca.pem"
        assert _peer(port, other_ca) != old  # a new connection: the new certificate, of the new issuer
        assert tls.version == 1
        kept.request("GET", "/keda/v1/profiles")  # the connection made before the swap still answers
        assert kept.getresponse().status == 200 and kept.sock is sock  # on the same socket
        kept.close()
    finally:
        server.stop()
        cache.stop()


def test_a_half_written_rotation_keeps_the_last_good_certificate(volume: SecretVolume, certs: Certs) -> None:
    tls = ReloadingTLS(TlsFiles(volume.path("tls.crt"), volume.path("tls.key")), check_seconds=0)
    first = tls.current()
    new_cert, _ = another_server_certificate(certs.ca.parent, "half")
    volume.write({"tls.crt": new_cert, "tls.key": certs.server_key})  # the new certificate, the old key
    assert tls.current() is first and tls.version == 0


def test_grpc_serves_the_new_certificate_after_a_swap(volume: SecretVolume, certs: Certs) -> None:
    from tests.automator.keda.test_hostile import _cache, _ref

    cache = _cache()
    files = TlsFiles(volume.path("tls.crt"), volume.path("tls.key"), volume.path("ca.crt"))
    scaler = ExternalScaler(
        cache, cache.metrics, auth=AuthConfig(client_certificates=True), client_verified=True
    )
    server, port = serve(scaler, "127.0.0.1", 0, 4, tls=ReloadingTLS(files, check_seconds=0))
    key, cert = certs.client_key.read_bytes(), certs.client_cert.read_bytes()
    options = (("grpc.ssl_target_name_override", "localhost"),)

    def channel(ca: Path) -> grpc.Channel:
        return grpc.secure_channel(
            f"127.0.0.1:{port}", grpc.ssl_channel_credentials(ca.read_bytes(), key, cert), options
        )

    try:
        kept = channel(certs.ca)
        assert pb_grpc.ExternalScalerStub(kept).IsActive(_ref(), timeout=10).result is True
        new_cert, new_key = another_server_certificate(certs.ca.parent, "rotated-grpc")
        volume.write({"tls.crt": new_cert, "tls.key": new_key, "ca.crt": certs.ca})
        other_ca = certs.ca.parent / "other-ca.pem"
        with channel(other_ca) as fresh:  # a new handshake: the new certificate, of the new issuer
            assert pb_grpc.ExternalScalerStub(fresh).IsActive(_ref(), timeout=10).result is True
        assert pb_grpc.ExternalScalerStub(kept).IsActive(_ref(), timeout=10).result is True  # in flight
        kept.close()
    finally:
        scaler.stop()
        server.stop(grace=None)
        cache.stop()
