"""Test certificates made with the openssl CLI: a CA, a server certificate for 127.0.0.1/localhost and a
client certificate it signed, plus a second CA's client certificate (one the server must refuse)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # signed by another CA
    stranger_key: Path


def _run(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    key, cert = d / f"{name}.key", d / f"{name}.pem"
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "2", "-subj", f"/CN={name}")  # fmt: skip
    return cert, key


def _signed(d: Path, name: str, ca: tuple[Path, Path], ext: str) -> tuple[Path, Path]:
    key, csr, cert, extfile = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem", d / f"{name}.ext"
    extfile.write_text(ext)
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
         "-subj", f"/CN={name}")  # fmt: skip
    _run("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
         "-out", str(cert), "-days", "2", "-extfile", str(extfile))  # fmt: skip
    return cert, key


def make_certs(d: Path) -> Certs:
    ca = _ca(d, "ca")
    other = _ca(d, "other-ca")
    server_ext = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    server = _signed(d, "server", ca, server_ext)
    client = _signed(d, "keda", ca, "extendedKeyUsage=clientAuth\n")
    stranger = _signed(d, "stranger", other, "extendedKeyUsage=clientAuth\n")
    return Certs(ca[0], server[0], server[1], client[0], client[1], stranger[0], stranger[1])


def another_server_certificate(d: Path, name: str) -> tuple[Path, Path]:
    """A server certificate for 127.0.0.1/localhost signed by the other CA (a rotation to a new issuer):
    make_certs(d) must have run in `d`."""
    server_ext = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    return _signed(d, name, (d / "other-ca.pem", d / "other-ca.key"), server_ext)
