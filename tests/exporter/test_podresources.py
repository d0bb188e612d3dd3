"""The PodResources client against a real gRPC server on a unix socket, speaking the generated v1 API."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from exporter.attribution.allocations import (
    ContainerDevices,
    ContainerResources,
    PodResources,
    device_uuid,
    gpu_allocations,
)
from exporter.attribution.kubelet import KubeletAttributor
from exporter.attribution.podresources import api_pb2, api_pb2_grpc
from exporter.attribution.podresources.client import list_pod_resources
from exporter.model import ContainerRef
from exporter.ports import PodResourcesError

GPU_A = "GPU-1e2d3c4b-0000-1111-2222-333344445555"
GPU_B = "GPU-9f8e7d6c-6666-7777-8888-999900001111"
MIG_1 = "MIG-a1b2c3d4-aaaa-bbbb-cccc-ddddeeeeffff"


def _pod(name: str, namespace: str, containers: list[tuple[str, list[tuple[str, list[str]]]]]) -> Any:
    return api_pb2.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            api_pb2.ContainerResources(
                name=cname,
                devices=[api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in devices],
                cpu_ids=[2, 3],
            )
            for cname, devices in containers
        ],
    )


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.pods: list[Any] = []
        self.calls = 0
        self.fail_with: grpc.StatusCode | None = None

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.calls += 1
        if self.fail_with is not None:
            context.abort(self.fail_with, "injected failure")
        return api_pb2.ListPodResourcesResponse(pod_resources=self.pods)


@pytest.fixture
def socket_path(tmp_path: Path) -> Iterator[str]:
    path = tmp_path / "kubelet.sock"
    if len(str(path)) < 100:  # unix socket paths are limited to 107 bytes
        yield str(path)
        return
    with tempfile.TemporaryDirectory(prefix="pr", dir="/tmp") as short:
        yield f"{short}/kubelet.sock"


@pytest.fixture
def kubelet(socket_path: str) -> Iterator[FakeKubelet]:
    servicer = FakeKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    assert server.add_insecure_port(f"unix://{socket_path}") != 0
    server.start()
    yield servicer
    server.stop(grace=None)


def test_method_path_is_upstreams() -> None:
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert service.methods_by_name["List"].input_type.full_name == "v1.ListPodResourcesRequest"
    fields = {f.name: f.number for f in api_pb2.ContainerDevices.DESCRIPTOR.fields}
    assert fields["resource_name"] == 1 and fields["device_ids"] == 2
    fields = {f.name: f.number for f in api_pb2.PodResources.DESCRIPTOR.fields}
    assert fields == {"name": 1, "namespace": 2, "containers": 3}


def test_list_reads_pods_containers_and_devices(kubelet: FakeKubelet, socket_path: str) -> None:
    kubelet.pods = [
        _pod("train-0", "ml", [("trainer", [("nvidia.com/gpu", [GPU_A, GPU_B])]), ("sidecar", [])]),
        _pod("web", "default", [("nginx", [("example.com/nic", ["eth1"])])]),
    ]
    pods = list_pod_resources(socket_path, timeout=5)
    assert kubelet.calls == 1
    assert pods == [
        PodResources(
            "train-0",
            "ml",
            (
                ContainerResources("trainer", (ContainerDevices("nvidia.com/gpu", (GPU_A, GPU_B)),)),
                ContainerResources("sidecar", ()),
            ),
        ),
        PodResources(
            "web",
            "default",
            (ContainerResources("nginx", (ContainerDevices("example.com/nic", ("eth1",)),)),),
        ),
    ]


def test_missing_socket_raises_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PodResourcesError, match="does not exist"):
        list_pod_resources(str(tmp_path / "absent.sock"), timeout=1)


def test_rpc_failure_raises_podresources_error(kubelet: FakeKubelet, socket_path: str) -> None:
    kubelet.fail_with = grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(PodResourcesError, match="PERMISSION_DENIED"):
        list_pod_resources(socket_path, timeout=5)


def test_socket_without_server_raises_podresources_error(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "s"
    if len(str(path)) >= 100:
        pytest.skip("tmp path too long for a unix socket")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))  # exists, but nobody listens
        with pytest.raises(PodResourcesError):
            list_pod_resources(str(path), timeout=1)


def test_gpu_allocations_keep_gpus_and_mig_only_and_fold_replicas() -> None:
    pods = [
        PodResources("a", "ns", (ContainerResources("c", (ContainerDevices("nvidia.com/gpu", (GPU_A,)),)),)),
        PodResources(
            "b",
            "ns",
            (
                ContainerResources("c1", (ContainerDevices("nvidia.com/gpu", (f"{GPU_B}::0",)),)),
                ContainerResources("c2", (ContainerDevices("nvidia.com/gpu", (f"{GPU_B}::1",)),)),
                ContainerResources("m", (ContainerDevices("nvidia.com/mig-1g.10gb", (MIG_1,)),)),
                ContainerResources("n", (ContainerDevices("example.com/nic", ("eth0",)),)),
            ),
        ),
    ]
    assert gpu_allocations(pods) == {
        GPU_A: [ContainerRef("ns", "a", "c")],
        GPU_B: [ContainerRef("ns", "b", "c1"), ContainerRef("ns", "b", "c2")],
        MIG_1: [ContainerRef("ns", "b", "m")],
    }
    # Resource names are configurable: a custom name replaces the default.
    assert gpu_allocations(pods, names=("example.com/nic",), prefixes=()) == {
        "eth0": [ContainerRef("ns", "b", "n")]
    }


def test_device_uuid() -> None:
    assert device_uuid(f"{GPU_A}::12") == GPU_A
    assert device_uuid(GPU_A) == GPU_A


def test_attributor_allocations_from_a_real_kubelet_socket(kubelet: FakeKubelet, socket_path: str) -> None:
    kubelet.pods = [_pod("idle-0", "ml", [("main", [("nvidia.com/gpu", [GPU_A])])])]
    attributor = KubeletAttributor(
        None, proc_root="/nonexistent", podresources_socket=socket_path, use_kube_api=False
    )
    attributor.refresh()
    assert attributor.allocations() == {GPU_A: [ContainerRef("ml", "idle-0", "main")]}
    assert attributor.status()["podresources"] is True


def test_attributor_with_missing_socket_degrades(tmp_path: Path) -> None:
    attributor = KubeletAttributor(
        None, proc_root=str(tmp_path), podresources_socket=str(tmp_path / "absent.sock"), use_kube_api=False
    )
    attributor.refresh()
    assert attributor.allocations() == {}
    assert attributor.status() == {"proc": True, "podresources": False, "kubernetes_api": False}
