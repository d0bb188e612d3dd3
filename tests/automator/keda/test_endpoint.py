"""GET /keda/v1/metrics through Flask's test client over a fake Prometheus and cluster: the status and JSON
of every rule in docs/keda.md, the cache's query bound, authentication, and the GJSON valueLocation."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import gjson
import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client import CollectorRegistry

from automator.keda.auth import AuthConfig, load
from automator.keda.cache import CacheConfig, KedaCache
from automator.keda.http import blueprint
from automator.keda.metrics import KedaMetrics
from automator.keda.request import METRICS_PATH, VALUE_LOCATION
from steward_common.settingspec import SettingError
from tests.automator.keda.fakes import NOW, FakeKube, FakePrometheus, cluster, fresh_result
from tests.fakeclock import FakeClock

URL = METRICS_PATH + "?namespace=inference&deployment=api"


def make(
    prom: FakePrometheus | None = None, kube: FakeKube | None = None, auth: AuthConfig | None = None
) -> tuple[FlaskClient, KedaCache, FakePrometheus, FakeClock, KedaMetrics]:
    prom = prom or FakePrometheus(fresh_result())
    clock = FakeClock(NOW)
    metrics = KedaMetrics(CollectorRegistry())
    cache = KedaCache(prom, kube or cluster(), CacheConfig(refresh_seconds=3600), metrics, clock=clock)
    cache.ensure_started = lambda: None  # type: ignore[method-assign]  # refreshes run by hand here
    app = Flask("t")
    app.register_blueprint(blueprint(cache, auth or AuthConfig(), metrics))
    return app.test_client(), cache, prom, clock, metrics


def get(client: FlaskClient, url: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    r = client.get(url, **kw)
    return r.status_code, json.loads(r.data)


def test_answer_shape_and_value_location_read_by_gjson() -> None:
    client, *_ = make()
    r = client.get(URL + "&profile=triton-inference")
    assert r.status_code == 200
    body = json.loads(r.data)
    for key in (
        "value",
        "pods",
        "gpus",
        "age_seconds",
        "signal",
        "unit",
        "aggregation",
        "window_seconds",
        "query",
    ):
        assert key in body
    assert (body["pods"], body["gpus"], body["signal"], body["unit"]) == (2, 2, "gpu_utilization", "percent")
    assert body["window_seconds"] == 120 and body["age_seconds"] == 10
    # KEDA evaluates valueLocation as a GJSON path on the raw body.
    assert gjson.get(json.loads(r.data), VALUE_LOCATION) == pytest.approx(40.0)
    assert isinstance(body["value"], float)
    assert body["recommended"] == {"targetValue": 75, "activationTargetValue": 10, "metricType": "Value"}


def test_explicit_parameters_override_the_profile() -> None:
    client, *_ = make()
    status, body = get(client, URL + "&profile=triton-inference&aggregation=max&window=5m")
    assert status == 200 and body["value"] == pytest.approx(60) and body["window_seconds"] == 300


def test_selector_and_statefulset_workloads() -> None:
    client, *_ = make()
    status, body = get(
        client, METRICS_PATH + "?namespace=inference&selector=app%3Dother&signal=gpu_utilization"
    )
    assert status == 200 and body["value"] == pytest.approx(50) and body["pods"] == 1
    status, body = get(
        client, METRICS_PATH + "?namespace=inference&statefulset=db&signal=gpu_utilization&aggregation=sum"
    )
    assert status == 200 and body["value"] == pytest.approx(40) and body["gpus"] == 2


def test_no_running_pods_is_200_with_zero() -> None:
    client, *_ = make()
    status, body = get(client, METRICS_PATH + "?namespace=inference&deployment=empty&profile=training")
    assert status == 200 and (body["value"], body["pods"]) == (0, 0)


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("&profile=nope", "profile"),
        ("&signal=nope", "signal"),
        ("&signal=gpu_utilization&aggregation=median", "aggregation"),
        ("&signal=gpu_utilization&window=fortnight", "window"),
        ("&signal=gpu_utilization&selector=app%3D%3D%3Dx", "deployment"),
    ],
)
def test_bad_parameters_are_400_naming_them(query: str, parameter: str) -> None:
    client, *_ = make()
    status, body = get(client, URL + query)
    assert status == 400 and body["parameter"] == parameter


def test_malformed_selector_is_400_naming_selector() -> None:
    client, *_ = make()
    status, body = get(
        client, METRICS_PATH + "?namespace=inference&selector=app+in+(x&signal=gpu_utilization"
    )
    assert status == 400 and body["parameter"] == "selector"


def test_unknown_deployment_is_404() -> None:
    client, *_ = make()
    status, body = get(client, METRICS_PATH + "?namespace=inference&deployment=gone&profile=training")
    assert status == 404 and body["error"] == "not_found"


def test_stale_data_is_503_never_0() -> None:
    client, *_ = make(FakePrometheus(fresh_result(age=500)))
    status, body = get(client, URL + "&profile=training")
    assert status == 503 and body["error"] == "stale" and "value" not in body
    assert "old" in body["reason"]


def test_data_ageing_in_the_cache_turns_503() -> None:
    client, _cache, _prom, clock, _m = make()
    assert get(client, URL + "&profile=training")[0] == 200
    clock.now += 300  # no refresh for 5 minutes (the refresh thread died, say)
    status, body = get(client, URL + "&profile=training")
    assert status == 503 and body["error"] == "stale"


def test_missing_pod_data_is_503() -> None:
    kube = cluster()
    kube.pods.append(
        kube.pods[0] | {"metadata": {**kube.pods[0]["metadata"], "name": "api-c", "uid": "uid-api-c"}}
    )
    client, *_ = make(kube=kube)
    status, body = get(client, URL + "&profile=training")
    assert status == 503 and body["error"] == "no_data" and "api-c" in body["message"]


def test_prometheus_unreachable_is_503_without_upstream_text() -> None:
    client, *_ = make(FakePrometheus(down=True))
    r = client.get(URL + "&profile=training")
    assert r.status_code == 503
    body = json.loads(r.data)
    assert body["error"] == "prometheus_unavailable"
    for leak in (b"s3cret", b"secret-host", b"<html>"):
        assert leak not in r.data


def test_prometheus_failing_after_success_is_503_not_the_old_value() -> None:
    client, cache, prom, _clock, metrics = make()
    assert get(client, URL + "&profile=training")[0] == 200
    prom.down = True
    assert cache.refresh() is False
    status, body = get(client, URL + "&profile=training")
    assert status == 503 and body["error"] == "prometheus_unavailable"
    prom.down = False
    assert cache.refresh() is True
    assert get(client, URL + "&profile=training")[0] == 200
    assert metrics.prometheus_errors._value.get() == 1


def test_kubernetes_unreachable_is_503() -> None:
    kube = cluster()
    kube.down = True
    client, *_ = make(kube=kube)
    r = client.get(URL + "&profile=training")
    assert r.status_code == 503 and json.loads(r.data)["error"] == "kubernetes_unavailable"
    assert b"500 Internal" not in r.data


def test_one_query_per_signal_and_window_whatever_the_workloads() -> None:
    client, cache, prom, _clock, _m = make()
    for workload in (
        "deployment=api",
        "deployment=other",
        "statefulset=db",
        "selector=app%3Dapi",
        "deployment=empty",
    ):
        for profile in ("triton-inference", "training"):  # same signal, windows 120 s and 300 s
            assert (
                client.get(f"{METRICS_PATH}?namespace=inference&{workload}&profile={profile}").status_code
                == 200
            )
    assert len(prom.queries) == 2  # first asks only: one per (signal, window)
    cache.refresh()
    assert len(prom.queries) == 4  # a refresh: one per (signal, window), not one per workload
    before = len(prom.queries)
    for _ in range(50):
        client.get(URL + "&profile=training")
    assert len(prom.queries) == before  # answers come from the cache


def test_new_windows_never_evict_a_window_asked_within_the_last_refresh() -> None:
    client, cache, prom, clock, metrics = make()
    cache.config = CacheConfig(max_queries=2, refresh_seconds=15)
    for window in ("1m", "2m"):
        assert client.get(URL + f"&signal=gpu_utilization&window={window}").status_code == 200
    r = client.get(URL + "&signal=gpu_utilization&window=3m")  # the table is full of recent questions
    assert r.status_code == 503 and r.get_json()["error"] == "warming_up"
    assert metrics.ondemand_refusals.labels("table_full")._value.get() == 1
    assert len(cache._readings) == 2
    clock.now += 16  # 2m is asked again within the refresh; 1m is not
    assert client.get(URL + "&signal=gpu_utilization&window=2m").status_code == 200
    assert client.get(URL + "&signal=gpu_utilization&window=3m").status_code == 200  # replaces 1m
    assert sorted(s for _, s in cache._readings) == [120, 180]
    cache.refresh()
    assert len(prom.queries) == 3 + 2  # a refresh runs the kept ones only


def test_requests_are_counted_by_status() -> None:
    client, _c, _p, _clock, metrics = make()
    client.get(URL + "&profile=training")
    client.get(URL + "&profile=nope")
    assert metrics.requests.labels(transport="http", status="200")._value.get() == 1
    assert metrics.requests.labels(transport="http", status="400")._value.get() == 1


# --- authentication ----------------------------------------------------------------------------------

AUTH = AuthConfig(bearer_tokens=("tok-1",), api_keys=("key-1",), basic=(("keda", "pw-1"),))


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.parametrize(
    ("headers", "query", "ok"),
    [
        ({}, "", False),
        ({"Authorization": "Bearer tok-1"}, "", True),
        ({"Authorization": "Bearer tok-2"}, "", False),
        ({"X-API-KEY": "key-1"}, "", True),
        ({"X-API-KEY": "key-2"}, "", False),
        ({}, "&api_key=key-1", True),
        ({}, "&api_key=key-2", False),
        (basic("keda", "pw-1"), "", True),
        (basic("keda", "pw-2"), "", False),
        (basic("other", "pw-1"), "", False),
        ({"Authorization": "Basic !!!notbase64"}, "", False),
        ({"Authorization": "Bearer key-1"}, "", False),  # an API key is not a bearer token
    ],
)
def test_auth_modes_right_and_wrong(headers: dict[str, str], query: str, ok: bool) -> None:
    client, *_ = make(auth=AUTH)
    r = client.get(URL + "&profile=training" + query, headers=headers)
    assert r.status_code == (200 if ok else 401)
    if not ok:
        assert b"tok-1" not in r.data and b"key-" not in r.data and b"pw-" not in r.data


def test_auth_files(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("tok-1\n")
    (tmp_path / "keys").write_text("# comment\nkey-1\nkey-2\n")
    (tmp_path / "basic").write_text("keda:pw:with:colons\n")
    cfg = load(str(tmp_path / "token"), str(tmp_path / "keys"), str(tmp_path / "basic"))
    assert cfg.bearer_tokens == ("tok-1",) and cfg.api_keys == ("key-1", "key-2")
    assert cfg.basic == (("keda", "pw:with:colons"),)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SettingError, match="--keda-api-key-file"):
        load(None, str(tmp_path / "empty"), None)
    with pytest.raises(SettingError, match="--keda-bearer-token-file"):
        load(str(tmp_path / "missing"), None, None)
    (tmp_path / "bad").write_text("no-colon\n")
    with pytest.raises(SettingError, match="line 1"):
        load(None, None, str(tmp_path / "bad"))
