"""The KEDA cache's Kubernetes adapter against the fake API server (tools/fakes/fakekube.py, a real HTTP
server)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from automator.keda.answers import DECLARED, ON_DEMAND, KedaAnswers
from automator.keda.cache import KedaCache
from automator.keda.kube import ClusterLister, NamespaceLister
from automator.keda.request import question
from automator.keda.table import DeclaredTable, ScaledObjectsAbsent
from automator.keda.workloads import resolve
from automator.ports import KubernetesUnavailable
from tests.automator.keda.fakes import FakePrometheus, fresh_result, pod, replicaset, scaled_object
from tools.fakes.fakekube import FakeApiServer

CORE, APPS = "/api/v1/namespaces/inference", "/apis/apps/v1/namespaces/inference"


def lister(fake_kube: FakeApiServer) -> NamespaceLister:
    return NamespaceLister(client.ApiClient(client.Configuration(host=fake_kube.url)), 5.0)


def with_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}


def serve_namespace(fake_kube: FakeApiServer) -> None:
    for obj in (
        pod("api-a", ("ReplicaSet", "api-5d8"), {"app": "api"}),
        pod("api-b", ("ReplicaSet", "api-5d8"), {"app": "api"}),
        pod("db-0", ("StatefulSet", "db"), {"app": "db"}),
        pod("other", ("StatefulSet", "db"), {"app": "db"}, namespace="elsewhere"),  # not listed
        with_namespace(replicaset("api-5d8", "api"), "inference"),
        {"kind": "Deployment", "metadata": {"name": "api", "namespace": "inference"}},
        {"kind": "StatefulSet", "metadata": {"name": "db", "namespace": "inference"}},
        {"kind": "StatefulSet", "metadata": {"name": "db2", "namespace": "elsewhere"}},
    ):
        fake_kube.put(obj)


def test_lists_one_namespace_and_resolves_its_workloads(
    fake_kube: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_namespace(fake_kube)
    monkeypatch.setattr("automator.kube.client.PAGE_SIZE", 2)  # two pages of pods: it follows `continue`
    ns = lister(fake_kube).namespace("inference")
    assert (ns.deployments, ns.statefulsets) == (frozenset({"api"}), frozenset({"db"}))
    api = question({"namespace": "inference", "deployment": "api", "profile": "training"}).workload
    assert [p.name for p in resolve(api, ns)] == ["api-a", "api-b"]
    db = question({"namespace": "inference", "statefulset": "db", "profile": "training"}).workload
    assert [p.name for p in resolve(db, ns)] == ["db-0"]
    pages = fake_kube.requests("GET", f"{CORE}/pods")
    assert len(pages) == 2 and pages[1].query["continue"] != [""]
    listed = {c.path for c in fake_kube.requests("GET")}
    assert listed == {f"{CORE}/pods", f"{APPS}/replicasets", f"{APPS}/deployments", f"{APPS}/statefulsets"}


@pytest.mark.parametrize("code", [403, 500])
def test_an_api_error_is_kubernetes_unavailable(fake_kube: FakeApiServer, code: int) -> None:
    fake_kube.fail("GET", f"{CORE}/pods", code, "Forbidden" if code == 403 else "InternalError", "no")
    with pytest.raises(KubernetesUnavailable):
        lister(fake_kube).namespace("inference")


def test_a_body_that_is_not_json_is_kubernetes_unavailable(fake_kube: FakeApiServer) -> None:
    fake_kube.answer("GET", f"{CORE}/pods", 200, "<html>proxy</html>", headers={"Content-Type": "text/html"})
    with pytest.raises(KubernetesUnavailable):
        lister(fake_kube).namespace("inference")


# --- the declared mode's reads -------------------------------------------------------------------------

SCALED_OBJECTS = "/apis/keda.sh/v1alpha1/scaledobjects"


def cluster_lister(fake_kube: FakeApiServer, namespaces: tuple[str, ...] = ()) -> ClusterLister:
    return ClusterLister(client.ApiClient(client.Configuration(host=fake_kube.url)), namespaces, 5.0)


def test_declared_reads_are_a_constant_number_of_cluster_wide_lists(fake_kube: FakeApiServer) -> None:
    serve_namespace(fake_kube)
    for i in range(30):  # thirty ScaledObjects in thirty namespaces: still one list of each kind
        fake_kube.put(scaled_object(f"so-{i}", "deployment=api&profile=training", namespace=f"ns-{i}"))
    fake_kube.put(scaled_object("api-gpu", "deployment=api&profile=training"))
    source = cluster_lister(fake_kube)
    table = DeclaredTable(FakePrometheus(fresh_result()))
    table.refresh(source)
    listed = sorted(c.path for c in fake_kube.requests("GET"))
    assert listed == sorted(
        [SCALED_OBJECTS, "/api/v1/pods", "/apis/apps/v1/replicasets", "/apis/apps/v1/deployments",
         "/apis/apps/v1/statefulsets"]
    )  # fmt: skip
    assert all(c.query.get("fieldSelector") == ["status.phase=Running"] for c in fake_kube.requests(
        "GET", "/api/v1/pods"))  # fmt: skip
    ns = source.namespaces(frozenset({"inference"}))
    assert [p.name for p in ns["inference"].owned_by("Deployment", "api")] == ["api-a", "api-b"]
    assert table.table is not None and len(table.table.results) == 31
    # Limited to --keda-namespaces: one list per named namespace, none cluster-wide.
    before = len(fake_kube.requests("GET"))
    cluster_lister(fake_kube, ("inference",)).scaled_objects()
    (call,) = fake_kube.requests("GET")[before:]
    assert call.path == "/apis/keda.sh/v1alpha1/namespaces/inference/scaledobjects"


@pytest.mark.parametrize("code", [403, 404])
def test_without_the_scaled_object_api_the_on_demand_mode_runs(fake_kube: FakeApiServer, code: int) -> None:
    fake_kube.fail("GET", SCALED_OBJECTS, code, "Forbidden" if code == 403 else "NotFound", "no", times=2)
    source = cluster_lister(fake_kube)
    with pytest.raises(ScaledObjectsAbsent):
        source.scaled_objects()
    prom = FakePrometheus(fresh_result())
    answers = KedaAnswers(DeclaredTable(prom), KedaCache(prom, lister(fake_kube).namespace), source)
    answers.refresh()
    assert answers.mode == ON_DEMAND


def test_another_api_error_keeps_the_mode(fake_kube: FakeApiServer) -> None:
    fake_kube.put(scaled_object("api-gpu", "deployment=api&profile=training"))
    source = cluster_lister(fake_kube)
    prom = FakePrometheus(fresh_result())
    answers = KedaAnswers(DeclaredTable(prom), KedaCache(prom, lister(fake_kube).namespace), source)
    answers.refresh()
    fake_kube.fail("GET", SCALED_OBJECTS, 500, "InternalError", "no")
    answers.refresh()
    assert answers.mode == DECLARED and answers.table.table is not None
    assert len(answers.table.table.results) == 1


def test_only_the_declared_namespaces_pods_are_decoded_and_kept(fake_kube: FakeApiServer) -> None:
    serve_namespace(fake_kube)
    for i in range(20):
        fake_kube.put(pod(f"noise-{i}", ("ReplicaSet", "noise-1"), {"app": "noise"}, namespace=f"other-{i}"))
    source = cluster_lister(fake_kube)
    found = source.namespaces(frozenset({"inference"}))
    assert set(found) == {"inference"}
    assert [p.name for p in found["inference"].owned_by("StatefulSet", "db")] == ["db-0"]
    kept = source.pod_records
    assert kept.misses == 3 and kept.hits == 0  # api-a, api-b, db-0: nothing of the other namespaces
    source.namespaces(frozenset({"inference"}))
    assert (kept.hits, kept.misses) == (3, 0)  # unchanged pods are not decoded again
