"""Container id / pod UID -> pod from the Kubernetes API: listing against the fake API server
(tools/fakes/fakekube.py), broken answers (non-JSON, no items) against pytest-httpserver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from pytest_httpserver import HTTPServer

from exporter.attribution.kubeapi import NodePodLister
from exporter.attribution.kubelet import KubeletAttributor
from exporter.attribution.pods import index_pods, strip_runtime
from exporter.model import Attribution, ContainerRef
from exporter.ports import KubeApiError
from tools.fakes.fakekube import FakeApiServer

NODE = "gpu-node-7"
UID_A = "0b3f5c2e-8d1a-4f6b-9c7e-1a2b3c4d5e6f"
UID_B = "7e9d1c3b-5a2f-4e8d-b6c4-0f1e2d3c4b5a"
CID_MAIN = "4f2a9c1e7b3d5f608a1c2e3d4b5a69788f7e6d5c4b3a29180f1e2d3c4b5a6978"
CID_INIT = "9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9"
CID_CRIO = "1234abcd5678ef901234abcd5678ef901234abcd5678ef901234abcd5678ef90"


def pod_json(
    name: str,
    namespace: str,
    uid: str,
    containers: dict[str, str],
    init: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod as the API serialises it; container statuses carry only the fields attribution reads."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    if annotations:
        meta["annotations"] = annotations
    status: dict[str, Any] = {
        "phase": "Running",
        "containerStatuses": [{"name": n, "containerID": cid} for n, cid in containers.items()],
    }
    if init:
        status["initContainerStatuses"] = [{"name": n, "containerID": cid} for n, cid in init.items()]
    return {
        "metadata": meta,
        "spec": {"nodeName": NODE, "containers": [{"name": n} for n in containers]},
        "status": status,
    }


PODS = [
    pod_json(
        "train-0",
        "ml",
        UID_A,
        {"trainer": f"containerd://{CID_MAIN}"},
        init={"fetch-data": f"containerd://{CID_INIT}"},
    ),
    pod_json("notebook", "research", UID_B, {"jupyter": f"cri-o://{CID_CRIO}", "starting": ""}),
]


@pytest.fixture
def api_client(httpserver: HTTPServer) -> Iterator[client.ApiClient]:
    api = client.ApiClient(client.Configuration(host=httpserver.url_for("").rstrip("/")))
    yield api
    api.close()


def _serve_pods(httpserver: HTTPServer, pods: list[dict[str, Any]]) -> None:
    httpserver.expect_request(
        "/api/v1/pods", method="GET", query_string={"fieldSelector": f"spec.nodeName={NODE}"}
    ).respond_with_json({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods})


def test_strip_runtime() -> None:
    assert strip_runtime(f"containerd://{CID_MAIN}") == CID_MAIN
    assert strip_runtime(f"cri-o://{CID_CRIO}") == CID_CRIO
    assert strip_runtime(f"docker://{CID_INIT}") == CID_INIT
    assert strip_runtime(CID_MAIN) == CID_MAIN


def test_index_pods_maps_containers_init_containers_and_mirror_uids() -> None:
    static = pod_json(
        "etcd-node",
        "kube-system",
        "11111111-2222-3333-4444-555555555555",
        {"etcd": "containerd://e7c"},
        annotations={"kubernetes.io/config.mirror": "0123456789ABCDEF0123456789abcdef"},
    )
    index = index_pods([*PODS, static, {"metadata": {"name": "no-namespace"}}])
    assert index.containers == {
        CID_MAIN: ContainerRef("ml", "train-0", "trainer"),
        CID_INIT: ContainerRef("ml", "train-0", "fetch-data"),
        CID_CRIO: ContainerRef("research", "notebook", "jupyter"),
        "e7c": ContainerRef("kube-system", "etcd-node", "etcd"),
    }
    assert index.pods == {
        UID_A: ("ml", "train-0"),
        UID_B: ("research", "notebook"),
        "11111111-2222-3333-4444-555555555555": ("kube-system", "etcd-node"),
        "0123456789abcdef0123456789abcdef": ("kube-system", "etcd-node"),
    }


def test_lister_asks_only_for_this_nodes_pods(fake_kube: FakeApiServer) -> None:
    elsewhere = pod_json("other", "ml", "uid-other", {"main": "containerd://0"})
    elsewhere["spec"]["nodeName"] = "another-node"
    for pod in (*PODS, elsewhere):
        fake_kube.put({"kind": "Pod", **pod})
    api = client.ApiClient(client.Configuration(host=fake_kube.url))

    pods = NodePodLister(NODE, api).list_pods()

    assert sorted(p["metadata"]["name"] for p in pods) == ["notebook", "train-0"]  # the server filtered
    (call,) = fake_kube.calls
    assert (call.path, call.query["fieldSelector"]) == ("/api/v1/pods", [f"spec.nodeName={NODE}"])
    assert index_pods(pods).containers[CID_CRIO] == ContainerRef("research", "notebook", "jupyter")
    assert len(NodePodLister(NODE, client.CoreV1Api(api)).list_pods()) == 2  # a CoreV1Api works too


def test_lister_refuses_to_list_without_a_node() -> None:
    with pytest.raises(ValueError, match="node_name"):
        NodePodLister("", object())


def test_lister_rejects_an_unusable_client() -> None:
    with pytest.raises(TypeError, match="kube_client"):
        NodePodLister(NODE, object())


@pytest.mark.parametrize(
    ("status", "body", "match"),
    [
        (403, '{"kind":"Status","reason":"Forbidden","code":403}', "HTTP 403"),
        (500, "boom", "HTTP 500"),
        (200, "not json", "not JSON"),
        (200, '{"kind":"PodList"}', "'items'"),
    ],
)
def test_lister_failures_raise_kube_api_error(
    httpserver: HTTPServer, api_client: client.ApiClient, status: int, body: str, match: str
) -> None:
    httpserver.expect_request("/api/v1/pods").respond_with_data(
        body, status=status, content_type="application/json"
    )
    with pytest.raises(KubeApiError, match=match):
        NodePodLister(NODE, api_client).list_pods()


def test_lister_unreachable_api_raises_kube_api_error() -> None:
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))  # discard port: refused
    with pytest.raises(KubeApiError):
        NodePodLister(NODE, api, timeout=2).list_pods()


def _proc(tmp_path: Path, cgroups: dict[int, str]) -> str:
    for pid, text in cgroups.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    return str(tmp_path)


CGROUPS = {
    100: f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_A.replace('-', '_')}.slice/"
    f"cri-containerd-{CID_MAIN}.scope\n",
    101: f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_A.replace('-', '_')}.slice/"
    f"cri-containerd-{CID_INIT}.scope\n",
    200: f"11:memory:/kubepods/besteffort/pod{UID_B}/crio-{CID_CRIO}\n1:name=systemd:/kubepods/besteffort/"
    f"pod{UID_B}/crio-{CID_CRIO}\n",
    300: "0::/system.slice/nvidia-persistenced.service\n",
}


def _attributor(tmp_path: Path, api_client: client.ApiClient) -> KubeletAttributor:
    """/proc with CGROUPS, no PodResources socket, the API served by the test's httpserver."""
    return KubeletAttributor(
        NODE,
        proc_root=_proc(tmp_path, CGROUPS),
        podresources_socket=str(tmp_path / "absent.sock"),
        kube_client=api_client,
    )


def test_attributor_names_processes_from_the_api(
    httpserver: HTTPServer, api_client: client.ApiClient, tmp_path: Path
) -> None:
    _serve_pods(httpserver, PODS)
    attributor = _attributor(tmp_path, api_client)
    attributor.refresh()
    assert attributor.attribute([100, 101, 200, 300, 999]) == {
        100: Attribution("container", ContainerRef("ml", "train-0", "trainer")),
        101: Attribution("container", ContainerRef("ml", "train-0", "fetch-data")),
        200: Attribution("container", ContainerRef("research", "notebook", "jupyter")),
        300: Attribution("host"),
        999: Attribution("unresolved"),
    }
    assert attributor.status() == {"proc": True, "podresources": False, "kubernetes_api": True}


def test_attributor_with_forbidden_api_leaves_processes_unresolved(
    httpserver: HTTPServer, api_client: client.ApiClient, tmp_path: Path
) -> None:
    httpserver.expect_request("/api/v1/pods").respond_with_json(
        {"kind": "Status", "reason": "Forbidden", "code": 403}, status=403
    )
    attributor = _attributor(tmp_path, api_client)
    attributor.refresh()
    result = attributor.attribute([100, 200, 300])
    assert result == {
        100: Attribution("unresolved"),
        200: Attribution("unresolved"),
        300: Attribution("host"),  # outside Kubernetes needs no API
    }
    assert attributor.status() == {"proc": True, "podresources": False, "kubernetes_api": False}
