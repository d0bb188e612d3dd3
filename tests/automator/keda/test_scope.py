"""Credentials limited to namespaces: `SECRET namespaces=a,b` lines in the token, API-key and basic files;
another namespace is 403 before anything is read, so no body names another namespace's pods."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from flask import Flask

from automator.keda.auth import AuthConfig, load
from automator.keda.http import blueprint
from automator.keda.request import METRICS_PATH
from steward_common.settingspec import SettingError
from tests.automator.keda.fakes import FakePrometheus, fresh_result, scaled_object
from tests.automator.keda.test_declared import _answers


def _files(tmp_path: Path) -> AuthConfig:
    (tmp_path / "tokens").write_text("tok-all\ntok-inf namespaces=inference\ntok-two namespaces=a, b\n")
    (tmp_path / "keys").write_text("key-inf namespaces=inference\n")
    (tmp_path / "basic").write_text("keda:pw with spaces namespaces=elsewhere\nroot:pw\n")
    return load(str(tmp_path / "tokens"), str(tmp_path / "keys"), str(tmp_path / "basic"))


def test_scoped_lines_are_read(tmp_path: Path) -> None:
    config = _files(tmp_path)
    assert config.bearer_tokens == ("tok-all", "tok-inf", "tok-two")
    assert config.basic == (("keda", "pw with spaces"), ("root", "pw"))
    assert config.scopes == {
        ("bearer", "tok-inf"): {"inference"},
        ("bearer", "tok-two"): {"a", "b"},
        ("apiKey", "key-inf"): {"inference"},
        ("basic", "keda:pw with spaces"): {"elsewhere"},
    }


@pytest.mark.parametrize("line", ["tok namespaces=", "tok namespaces=Not_A_Name", " namespaces=a"])
def test_a_bad_scope_names_the_file_and_line(tmp_path: Path, line: str) -> None:
    (tmp_path / "tokens").write_text(f"ok\n{line}\n")
    with pytest.raises(SettingError, match="--keda-bearer-token-file: line 2"):
        load(str(tmp_path / "tokens"), None, None)


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_a_limited_credential_reads_its_namespaces_only(tmp_path: Path) -> None:
    source_objects = [
        scaled_object("api-gpu", "deployment=api&profile=training"),
        scaled_object("api-gpu", "deployment=api&profile=training", namespace="elsewhere"),
    ]
    answers, _, _ = _answers(source_objects, prom=FakePrometheus(fresh_result()))
    answers.refresh()
    app = Flask("t")
    app.register_blueprint(blueprint(answers, _files(tmp_path), answers.metrics))
    client = app.test_client()

    def status(ns: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
        r = client.get(f"{METRICS_PATH}?namespace={ns}&deployment=api&profile=training", headers=headers)
        return r.status_code, r.get_json()

    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    assert status("inference", bearer("tok-inf"))[0] == 200
    code, body = status("elsewhere", bearer("tok-inf"))
    assert code == 403 and body["error"] == "forbidden" and "api-" not in str(body)
    assert status("elsewhere", bearer("tok-all"))[0] == 200  # unlimited: every namespace
    assert status("inference", {"X-API-KEY": "key-inf"})[0] == 200
    assert status("elsewhere", {"X-API-KEY": "key-inf"})[0] == 403
    assert status("elsewhere", _basic("keda", "pw with spaces"))[0] == 200
    assert status("inference", _basic("keda", "pw with spaces"))[0] == 403
    assert status("inference", bearer("tok-none"))[0] == 401
    # An undeclared question of another namespace is 403 too: the body names nothing of it.
    code, body = status("a-third", bearer("tok-inf"))
    assert code == 403
    assert answers.metrics is not None
    assert answers.metrics.requests.labels(transport="http", status="403")._value.get() == 4
