"""Prometheus credentials: given by file or in the URL, sent to Prometheus, never shown.

The service runs against a real HTTP server standing in for Prometheus (pytest-httpserver); what it
receives proves the credentials are sent, and /readyz, /decisions and the log prove they are not echoed.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from automator.service import main as service
from automator.settings import SettingError
from steward_common.urls import redact_url
from tests.automator.service.test_service import cluster_objects, resolved

PASSWORD = "hunter2"


def _snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    items = cluster_objects()
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def _failing_prometheus(httpserver: HTTPServer, seen: list[str]) -> None:
    def answer(request: Request) -> Response:
        seen.append(request.headers.get("Authorization", ""))
        return Response("upstream failure", status=500)

    httpserver.expect_request("/api/v1/query").respond_with_handler(answer)


@pytest.mark.usefixtures("clean_env")
def test_userinfo_in_the_url_is_sent_but_never_shown(
    tmp_path: Path, httpserver: HTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []
    _failing_prometheus(httpserver, seen)
    url = f"http://admin:{PASSWORD}@{httpserver.host}:{httpserver.port}"
    args = resolved(["--cluster-snapshot", str(_snapshot(tmp_path)), "--prometheus-url", url])
    caplog.set_level(logging.DEBUG)
    wiring = service.build(args, CollectorRegistry())
    result = wiring.service.run_once()
    assert result is not None and not result.ok
    assert seen and seen[0] == "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
    http = wiring.app.test_client()
    ready = http.get("/readyz")
    decisions = http.get("/decisions")
    assert ready.status_code == 503 and decisions.status_code == 200
    assert "***@" in decisions.get_json()["reason"]  # the address is still named, redacted
    for shown in (ready.get_data(as_text=True), decisions.get_data(as_text=True), caplog.text):
        assert PASSWORD not in shown and "admin:" not in shown


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("flag", "content", "header"),
    [
        ("--prometheus-bearer-token-file", "tok-123\n", "Bearer tok-123"),
        ("--prometheus-basic-auth-file", f"reader:{PASSWORD}\n", "Basic "),
    ],
)
def test_credentials_from_files_are_sent_and_not_shown(
    tmp_path: Path,
    httpserver: HTTPServer,
    caplog: pytest.LogCaptureFixture,
    flag: str,
    content: str,
    header: str,
) -> None:
    seen: list[str] = []
    _failing_prometheus(httpserver, seen)
    secret = tmp_path / "secret"
    secret.write_text(content)
    url = httpserver.url_for("").rstrip("/")
    args = resolved(
        ["--cluster-snapshot", str(_snapshot(tmp_path)), "--prometheus-url", url, flag, str(secret)]
    )
    caplog.set_level(logging.DEBUG)
    wiring = service.build(args, CollectorRegistry())
    wiring.service.run_once()
    assert seen and seen[0].startswith(header)
    body = wiring.app.test_client().get("/decisions").get_data(as_text=True)
    for shown in (body, caplog.text):
        assert content.strip() not in shown and PASSWORD not in shown


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("flag", "content", "problem"),
    [
        ("--prometheus-basic-auth-file", "no-colon\n", "user:password"),
        ("--prometheus-basic-auth-file", ":empty-user\n", "user:password"),
        ("--prometheus-bearer-token-file", "\n", "one non-empty line"),
        ("--prometheus-bearer-token-file", "tok-aa\ntok-bb\n", "one non-empty line"),
    ],
)
def test_bad_credential_files_name_the_flag_and_not_the_content(
    tmp_path: Path, flag: str, content: str, problem: str
) -> None:
    secret = tmp_path / "secret"
    secret.write_text(content)
    args = resolved(["--cluster-snapshot", str(_snapshot(tmp_path)), flag, str(secret)])
    with pytest.raises(SettingError) as e:
        service.build(args, CollectorRegistry())
    assert str(e.value).startswith(flag) and problem in str(e.value)
    assert all(line not in str(e.value) for line in content.split("\n") if line)


@pytest.mark.usefixtures("clean_env")
def test_a_missing_ca_file_names_the_flag(tmp_path: Path) -> None:
    args = resolved(
        ["--cluster-snapshot", str(_snapshot(tmp_path)), "--prometheus-ca-file", "/nonexistent.pem"]
    )
    with pytest.raises(SettingError, match=r"^--prometheus-ca-file"):
        service.build(args, CollectorRegistry())


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://admin:hunter2@prom:9090/x", "http://***@prom:9090/x"),
        ("https://token@[::1]:9090", "https://***@[::1]:9090"),
        ("http://prom:9090", "http://prom:9090"),
        # without a scheme (refused as a URL, and the refusal shows it), or with a / or @ in the password
        ("admin:hunter2@host:9090", "***@host:9090"),
        ("admin:hunter2@host:9090/prom", "***@host:9090/prom"),
        ("http://user:pa/ss@host:9090", "http://***@host:9090"),
        ("http://u:p@ss@host", "http://***@host"),
        ("host:9090", "host:9090"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown
