"""The KEDA endpoints under hostile use: no secret in any log, mutual TLS with a real TLS client, slow and
trickling clients, floods of new namespaces and windows, bounded memory, gRPC credentials, odd input."""

from __future__ import annotations

import gc
import json
import logging
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
import requests
from flask import Flask
from prometheus_client import CollectorRegistry

from automator.keda.auth import AuthConfig, allowed, load
from automator.keda.cache import CacheConfig, KedaCache
from automator.keda.certs import ReloadingTLS, TlsFiles
from automator.keda.externalscaler import externalscaler_pb2 as pb
from automator.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from automator.keda.http import blueprint
from automator.keda.metrics import KedaMetrics
from automator.keda.request import METRICS_PATH, ParamError, parse_selector, question
from automator.keda.scaler import ExternalScaler, serve
from automator.keda.tls import serve_tls
from automator.keda.values import NoValue
from automator.keda.wiring import EXTENSION, KedaRuntime
from automator.keda.workloads import Namespace, UnknownWorkload
from automator.objects.pod import pod_record
from automator.objects.workload import workload_record
from automator.service.main import build
from automator.service.web import create_app, http_server
from tests.automator.keda.certs import Certs, make_certs
from tests.automator.keda.fakes import NOW, FakeKube, FakePrometheus, cluster, fresh_result, pod
from tests.automator.keda.test_wiring import settings
from tools.fakes.promserver import free_port

URL = METRICS_PATH + "?namespace=inference&deployment=api&profile=training"
SECRET = "k3y-that-must-never-be-logged"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _cache(prom: Any = None, kube: Any = None, **config: Any) -> KedaCache:
    cache = KedaCache(
        prom or FakePrometheus(fresh_result()),
        kube or cluster(),
        CacheConfig(refresh_seconds=3600, **config),
        KedaMetrics(CollectorRegistry()),
        clock=lambda: NOW,
    )
    cache.ensure_started = lambda: None  # type: ignore[method-assign]  # refreshes run by hand here
    return cache


def _app(cache: KedaCache, auth: AuthConfig | None = None, **kw: Any) -> Flask:
    app = Flask("t")
    app.register_blueprint(blueprint(cache, auth or AuthConfig(), cache.metrics, **kw))
    return app


# --- secrets and TLS -------------------------------------------------------------------------------------


def test_https_listener_logs_no_api_key(
    tmp_path: Path, certs: Certs, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keys").write_text(f"{SECRET}\n")
    port = free_port()
    s = settings(
        tmp_path,
        "--listen-address", "127.0.0.1", "--keda-api-key-file", str(tmp_path / "keys"),
        "--keda-tls-cert-file", str(certs.server_cert), "--keda-tls-key-file", str(certs.server_key),
        "--keda-tls-port", str(port),
    )  # fmt: skip
    caplog.set_level(logging.DEBUG)
    runtime: KedaRuntime = build(s).app.extensions[EXTENSION]
    runtime.cache.refresh()
    runtime.start()
    try:
        base = f"https://127.0.0.1:{port}{URL}"
        # KEDA's `method: query`, a right key and a wrong guess; the CA as KEDA's /custom/ca would hold it.
        right = requests.get(base + f"&api_key={SECRET}", verify=str(certs.ca), timeout=30)
        wrong = requests.get(base + f"&api_key={SECRET}-guess", verify=str(certs.ca), timeout=30)
        assert right.status_code == 503 and right.json()["error"] == "prometheus_unavailable"
        assert wrong.status_code == 401
    finally:
        runtime.stop()
    out, err = capfd.readouterr()
    # Everything the service logged (the test's own HTTP client, urllib3, logs its requests: not counted).
    logged = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("urllib3"))
    assert "KEDA HTTPS endpoint" in logged  # the capture sees the service's lines
    assert "/keda/v1/metrics" not in logged + out + err  # no access log line at all
    assert SECRET not in logged + out + err


def test_mutual_tls_is_an_auth_mode_of_its_own(tmp_path: Path, certs: Certs) -> None:
    port = free_port()
    s = settings(
        tmp_path,
        "--listen-address", "127.0.0.1", "--keda-tls-client-ca-file", str(certs.ca),
        "--keda-tls-cert-file", str(certs.server_cert), "--keda-tls-key-file", str(certs.server_key),
        "--keda-tls-port", str(port),
    )  # fmt: skip
    wiring = build(s)
    runtime: KedaRuntime = wiring.app.extensions[EXTENSION]
    runtime.cache.refresh()
    runtime.start()
    base = f"https://127.0.0.1:{port}{URL}"
    try:
        # KEDA's `authModes: tls` sends the cert and key of its TriggerAuthentication.
        r = requests.get(
            base, verify=str(certs.ca), cert=(str(certs.client_cert), str(certs.client_key)), timeout=30
        )
        assert r.status_code == 503 and r.json()["error"] == "prometheus_unavailable"  # admitted
        for cert in (None, (str(certs.stranger_cert), str(certs.stranger_key))):
            with pytest.raises(requests.exceptions.SSLError):
                requests.get(base, verify=str(certs.ca), cert=cert, timeout=30)
        # The plain port has no certificate to check: with mutual TLS the only mode, it admits nobody.
        assert wiring.app.test_client().get(URL).status_code == 401
    finally:
        runtime.stop()


def test_client_ca_needs_the_listeners_certificate(tmp_path: Path, certs: Certs) -> None:
    from steward_common.settingspec import SettingError

    with pytest.raises(SettingError, match="--keda-tls-client-ca-file"):
        settings(tmp_path, "--keda-tls-client-ca-file", str(certs.ca))
    with pytest.raises(SettingError, match="--keda-tls-client-ca-file"):
        settings(
            tmp_path,
            "--keda-tls-client-ca-file", str(certs.server_key),  # a key, not a certificate
            "--keda-tls-cert-file", str(certs.server_cert), "--keda-tls-key-file", str(certs.server_key),
        )  # fmt: skip


def _trickle(port: int, ca: Path, stop: threading.Event, cut: list[bool]) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        try:
            tls.sendall(b"GET " + URL.encode() + b" HTTP/1.1\r\nHost: x\r\n")
            while not stop.wait(0.3):
                tls.sendall(b"X-Slow: 1\r\n")  # never the blank line that ends the head
        except OSError:
            cut.append(True)  # the server closed the connection under the trickle


def test_trickling_clients_do_not_lock_out_a_client_with_a_token(certs: Certs) -> None:
    cache = _cache()
    auth = AuthConfig(bearer_tokens=("tok-1",))
    tls = ReloadingTLS(TlsFiles(str(certs.server_cert), str(certs.server_key)))
    server = serve_tls(_app(cache, auth), "127.0.0.1", 0, tls, head_seconds=1.0)
    port = server.bind_addr[1]
    stop, cut = threading.Event(), []  # type: ignore[var-annotated]
    tricklers = [
        threading.Thread(target=_trickle, args=(port, certs.ca, stop, cut), daemon=True) for _ in range(16)
    ]
    try:
        for t in tricklers:
            t.start()
        r = requests.get(
            f"https://127.0.0.1:{port}{URL}",
            headers={"Authorization": "Bearer tok-1"},
            verify=str(certs.ca),
            timeout=30,
        )
        assert r.status_code == 200 and r.json()["pods"] == 2
        for t in tricklers:
            t.join(30)
        assert len(cut) == 16  # every trickler was cut at its head deadline, none finished its head
    finally:
        stop.set()
        server.stop()
        cache.stop()


def test_a_body_is_refused() -> None:
    cache = _cache()
    client = _app(cache).test_client()
    r = client.get(URL, data=b"x" * 1000)
    assert r.status_code == 413 and json.loads(r.data)["error"] == "body_not_allowed"
    assert client.get(URL).status_code == 200


# --- the cache under load --------------------------------------------------------------------------------


class SlowKube(FakeKube):
    """Lists `fast` namespaces at once; every other one waits until `release` is set."""

    def __init__(self, fast: set[str]) -> None:
        base = cluster()
        super().__init__(base.pods, base.replicasets)
        self.fast = fast
        self.release = threading.Event()
        self.answered: list[str] = []

    def __call__(self, name: str) -> Namespace:
        if name not in self.fast:
            self.release.wait(60)
        self.answered.append(name)
        return super().__call__(name)


def test_a_first_question_waits_a_bounded_time_then_answers_warming_up() -> None:
    kube = SlowKube(fast=set())
    cache = _cache(kube=kube, first_wait_seconds=0.2)
    client = _app(cache).test_client()
    try:
        r = client.get(URL)
        body = json.loads(r.data)
        assert r.status_code == 503 and body["error"] == "warming_up" and "first time" in body["reason"]
        kube.release.set()  # the fetch went on meanwhile and now finishes
        slot = cache._namespaces["inference"]
        pending = slot.pending
        if pending is not None:
            pending.result(30)
        assert client.get(URL).status_code == 200
    finally:
        kube.release.set()
        cache.stop()


def test_first_fetches_are_per_key_not_behind_one_lock() -> None:
    kube = SlowKube(fast={"inference"})
    cache = _cache(kube=kube, first_wait_seconds=30)
    slow_question = question({"namespace": "slow", "deployment": "api", "profile": "training"})

    def ask_slow() -> None:
        cache.answer(slow_question)  # answers once the slow list returns

    slow = threading.Thread(target=ask_slow, daemon=True)
    try:
        slow.start()
        while "slow" not in cache._namespaces:  # the slow namespace's first fetch is under way
            time.sleep(0.01)
        got = cache.answer(question({"namespace": "inference", "deployment": "api", "profile": "training"}))
        assert got.value.pods == 2 and kube.answered == ["inference"]  # answered while slow still lists
    finally:
        kube.release.set()
        slow.join(30)
        cache.stop()


def test_probes_and_known_workloads_answer_while_30_clients_ask_new_namespaces() -> None:
    kube = SlowKube(fast={"inference"})
    cache = _cache(kube=kube)
    service: Any = SimpleNamespace(readiness=lambda: (True, "ready"))
    threads = 4
    app = create_app(
        service, blueprints=[blueprint(cache, AuthConfig(), cache.metrics, max(1, threads // 2))]
    )
    server = http_server(app, "127.0.0.1", 0, threads)
    port = server.effective_port
    threading.Thread(target=server.run, daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    statuses: list[int] = []

    def ask(i: int) -> None:
        url = f"{base}{METRICS_PATH}?namespace=new-{i}&deployment=api&profile=training"
        statuses.append(requests.get(url, timeout=60).status_code)

    clients = [threading.Thread(target=ask, args=(i,), daemon=True) for i in range(30)]
    try:
        assert requests.get(base + URL, timeout=30).status_code == 200  # a known workload, cached
        for c in clients:
            c.start()
        for _ in range(5):
            assert requests.get(base + "/healthz", timeout=1).status_code == 200
            assert requests.get(base + URL, timeout=5).status_code == 200
        kube.release.set()
        for c in clients:
            c.join(60)
        assert len(statuses) == 30 and set(statuses) <= {200, 404, 503}
    finally:
        kube.release.set()
        server.close()
        cache.stop()


def test_namespaces_are_bounded_dropping_only_what_was_not_asked_within_the_refresh() -> None:
    kube = cluster()
    now = [NOW]
    cache = _cache(kube=kube, max_namespaces=3)
    cache.config = CacheConfig(refresh_seconds=15, max_namespaces=3)
    cache.clock = lambda: now[0]

    def ask(ns: str) -> None:
        with pytest.raises((UnknownWorkload, NoValue)):  # 404 (no such Deployment) or refused
            cache.answer(question({"namespace": ns, "deployment": "nope", "profile": "training"}))

    for ns in ("a", "b", "c", "d"):
        ask(ns)
    assert list(cache._namespaces) == ["a", "b", "c"]  # d was refused: all three were asked just now
    now[0] += 16
    for ns in ("a", "d", "e"):
        ask(ns)
    assert list(cache._namespaces) == ["a", "d", "e"]  # b and c were not asked within the refresh
    kube.lists = 0
    cache.refresh()
    assert kube.lists == 3


def test_a_namespace_keeps_small_records_not_the_pod_objects() -> None:
    class Obj(dict[str, Any]):
        """A dict that can be referenced weakly."""

    base = cluster()
    pods = [Obj(pod(f"api-{i}", ("ReplicaSet", "api-5d8"), {"app": "api"})) for i in range(50)]
    for p in pods:
        p["spec"] = {"containers": [{"name": "c", "env": [{"name": "X", "value": "y" * 10_000}]}]}
    refs = [weakref.ref(p) for p in pods]
    records = map(workload_record, base.replicasets)
    ns = Namespace(map(pod_record, pods), records, frozenset({"api"}), frozenset())
    del pods, p
    gc.collect()
    assert all(r() is None for r in refs)  # nothing of the objects is kept but what the answer needs
    assert len(ns.owned_by("Deployment", "api")) == 50
    assert len(ns.matching(parse_selector("app=api"), "app In (api)")) == 50


# --- credentials and input -------------------------------------------------------------------------------


def test_bearer_and_basic_parsing_is_strict_and_on_bytes() -> None:
    config = AuthConfig(bearer_tokens=("tok-1",), basic=(("keda", "pw"),))

    def ok(value: str) -> bool:
        return allowed(config, {"Authorization": value}.get, {})

    assert ok("Bearer tok-1") and ok("bearer tok-1")
    assert not ok("Bearer  tok-1")  # two spaces
    assert not ok("tok-1") and not ok("Bearertok-1") and not ok("Bearer tok-1 tok-1")
    assert not ok("Bearer tök-1") and not ok("Basic \xff\xfe")  # odd bytes: refused, never an error
    assert ok("Basic a2VkYTpwdw==") and not ok("Basic a2VkYTpwdw")


def test_an_indented_comment_is_not_a_token(tmp_path: Path) -> None:
    (tmp_path / "tokens").write_text("  # rotated on Monday\ntok-1\n")
    assert load(str(tmp_path / "tokens"), None, None).bearer_tokens == ("tok-1",)


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"window": "1" * 5000 + "s"}, "window"),
        ({"namespace": "inference\n"}, "namespace"),
        ({"deployment": "api\n"}, "deployment"),
        ({"deployment": None, "selector": ",".join(f"k{i}=v" for i in range(40))}, "selector"),
        ({"deployment": None, "selector": "a=" + "b" * 2000}, "selector"),
        ({"targetValue": "1" * 5000}, "targetValue"),
    ],
)
def test_hostile_parameters_are_400_naming_the_parameter(params: dict[str, Any], parameter: str) -> None:
    base = {"namespace": "inference", "deployment": "api", "signal": "gpu_utilization"}
    merged = {k: v for k, v in {**base, **params}.items() if v is not None}
    with pytest.raises(ParamError) as e:
        question(merged)
    assert e.value.parameter == parameter


def test_every_answer_sets_its_workloads_availability() -> None:
    prom = FakePrometheus(fresh_result())
    cache = _cache(prom=prom)
    client = _app(cache).test_client()
    assert client.get(URL).status_code == 200
    available = cache.metrics.workload_available  # type: ignore[union-attr]
    assert available.labels("inference", "deployment/api")._value.get() == 1
    assert client.get(URL.replace("deployment=api", "deployment=gone")).status_code == 404
    prom.down = True
    cache.refresh()
    assert client.get(URL).status_code == 503
    assert available.labels("inference", "deployment/api")._value.get() == 0
    names = {s.labels["workload"] for m in cache.metrics.workload_available.collect() for s in m.samples}  # type: ignore[union-attr]
    assert names == {"deployment/api"}  # a workload that does not exist gets no series


# --- gRPC ---------------------------------------------------------------------------------------------------


@pytest.fixture
def scaler_cache() -> Iterator[KedaCache]:
    cache = _cache()
    yield cache
    cache.stop()


def _ref() -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(
        name="x", namespace="inference", scalerMetadata={"deployment": "api", "profile": "training"}
    )


def test_grpc_never_takes_tokens(scaler_cache: KedaCache) -> None:
    # KEDA's external scaler sends no metadata: with credentials configured, only a verified client
    # certificate admits a call, and a token in metadata admits nothing.
    auth = AuthConfig(bearer_tokens=("tok-1",), api_keys=("key-1",))
    scaler = ExternalScaler(scaler_cache, scaler_cache.metrics, max_streams=1, auth=auth)
    server, port = serve(scaler, "127.0.0.1", 0, workers=4)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            for call in (stub.IsActive, stub.GetMetricSpec):
                with pytest.raises(grpc.RpcError) as e:
                    call(_ref(), timeout=10)
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as e:
                next(stub.StreamIsActive(_ref(), timeout=10))
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            for metadata in ((("authorization", "Bearer tok-1"),), (("x-api-key", "key-1"),)):
                with pytest.raises(grpc.RpcError) as e:
                    stub.GetMetrics(
                        pb.GetMetricsRequest(scaledObjectRef=_ref()), timeout=10, metadata=metadata
                    )
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        scaler.stop()
        server.stop(grace=None)


def test_grpc_mutual_tls(scaler_cache: KedaCache, certs: Certs) -> None:
    auth = AuthConfig(client_certificates=True)
    scaler = ExternalScaler(
        scaler_cache, scaler_cache.metrics, max_streams=1, auth=auth, client_verified=True
    )
    tls = ReloadingTLS(TlsFiles(str(certs.server_cert), str(certs.server_key), str(certs.ca)))
    server, port = serve(scaler, "127.0.0.1", 0, workers=4, tls=tls)
    ca = certs.ca.read_bytes()
    options = (("grpc.ssl_target_name_override", "localhost"),)
    try:
        keda = grpc.ssl_channel_credentials(ca, certs.client_key.read_bytes(), certs.client_cert.read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{port}", keda, options) as channel:
            assert pb_grpc.ExternalScalerStub(channel).IsActive(_ref(), timeout=10).result is True
        stranger = grpc.ssl_channel_credentials(
            ca, certs.stranger_key.read_bytes(), certs.stranger_cert.read_bytes()
        )
        for credentials in (grpc.ssl_channel_credentials(ca), stranger):
            with grpc.secure_channel(f"127.0.0.1:{port}", credentials, options) as channel:
                with pytest.raises(grpc.RpcError) as e:
                    pb_grpc.ExternalScalerStub(channel).IsActive(_ref(), timeout=10)
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE  # the handshake refuses it
    finally:
        scaler.stop()
        server.stop(grace=None)
