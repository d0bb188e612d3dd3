"""The KEDA cache's Kubernetes adapter against an HTTP server speaking the API (pytest-httpserver)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from pytest_httpserver import HTTPServer

from automator.keda.kube import NamespaceLister
from automator.keda.request import question
from automator.keda.workloads import resolve
from automator.ports import KubernetesUnavailable
from tests.automator.keda.fakes import pod, replicaset

CORE, APPS = "/api/v1/namespaces/inference", "/apis/apps/v1/namespaces/inference"


def a_list(items: list[dict[str, Any]], cont: str = "") -> dict[str, Any]:
    return {"kind": "List", "apiVersion": "v1", "metadata": {"continue": cont}, "items": items}


def lister(httpserver: HTTPServer) -> NamespaceLister:
    return NamespaceLister(
        client.ApiClient(client.Configuration(host=httpserver.url_for("").rstrip("/"))), 5.0
    )


def serve_namespace(httpserver: HTTPServer) -> None:
    pods = [
        pod("api-a", ("ReplicaSet", "api-5d8"), {"app": "api"}),
        pod("api-b", ("ReplicaSet", "api-5d8"), {"app": "api"}),
        pod("db-0", ("StatefulSet", "db"), {"app": "db"}),
    ]
    # Two pages of pods: the adapter follows `continue`.
    httpserver.expect_request(f"{CORE}/pods", query_string={"limit": "500"}).respond_with_json(
        a_list(pods[:2], cont="page-2")
    )
    httpserver.expect_request(
        f"{CORE}/pods", query_string={"limit": "500", "continue": "page-2"}
    ).respond_with_json(a_list(pods[2:]))
    httpserver.expect_request(f"{APPS}/replicasets").respond_with_json(a_list([replicaset("api-5d8", "api")]))
    httpserver.expect_request(f"{APPS}/deployments").respond_with_json(
        a_list([{"metadata": {"name": "api"}}])
    )
    httpserver.expect_request(f"{APPS}/statefulsets").respond_with_json(
        a_list([{"metadata": {"name": "db"}}])
    )


def test_lists_one_namespace_and_resolves_its_workloads(httpserver: HTTPServer) -> None:
    serve_namespace(httpserver)
    ns = lister(httpserver).namespace("inference")
    assert (ns.deployments, ns.statefulsets) == (frozenset({"api"}), frozenset({"db"}))
    api = question({"namespace": "inference", "deployment": "api", "profile": "training"}).workload
    assert [p.name for p in resolve(api, ns)] == ["api-a", "api-b"]
    db = question({"namespace": "inference", "statefulset": "db", "profile": "training"}).workload
    assert [p.name for p in resolve(db, ns)] == ["db-0"]


@pytest.mark.parametrize("code", [403, 500])
def test_an_api_error_is_kubernetes_unavailable(httpserver: HTTPServer, code: int) -> None:
    httpserver.expect_request(f"{CORE}/pods").respond_with_json(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "no", "code": code},
        status=code,
    )
    with pytest.raises(KubernetesUnavailable):
        lister(httpserver).namespace("inference")


def test_a_body_that_is_not_json_is_kubernetes_unavailable(httpserver: HTTPServer) -> None:
    httpserver.expect_request(f"{CORE}/pods").respond_with_data(
        "<html>proxy</html>", content_type="text/html"
    )
    with pytest.raises(KubernetesUnavailable):
        lister(httpserver).namespace("inference")
