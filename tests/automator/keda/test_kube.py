"""The KEDA cache's Kubernetes adapter against the fake API server (tools/fakekube.py, a real HTTP server)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from automator.keda.kube import NamespaceLister
from automator.keda.request import question
from automator.keda.workloads import resolve
from automator.ports import KubernetesUnavailable
from tests.automator.keda.fakes import pod, replicaset
from tools.fakekube import FakeApiServer

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
