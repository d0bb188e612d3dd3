"""A typed client for the kubelet PodResources API (List only).

The generated protobuf classes are untyped to mypy, so `list_pod_resources` copies the answer into the
frozen dataclasses below right at the edge; everything after that is plain typed data.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import grpc

from exporter.model import ContainerRef
from exporter.podresources import api_pb2, api_pb2_grpc

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_TIMEOUT_SECONDS = 5.0
# Whole GPUs; MIG slices (`nvidia.com/mig-1g.10gb`, ...) are matched by prefix, see `is_gpu_resource`.
DEFAULT_GPU_RESOURCES: tuple[str, ...] = ("nvidia.com/gpu",)
DEFAULT_GPU_RESOURCE_PREFIXES: tuple[str, ...] = ("nvidia.com/mig-",)
# The kubelet answers with every pod on the node; gRPC's 4 MiB default is too small on dense nodes.
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# NVIDIA's device plugin names time-sliced / MPS replicas `<uuid>::<n>`; the GPU is the part before.
_REPLICA_SUFFIX = re.compile(r"::\d+$")


class PodResourcesError(Exception):
    """The kubelet PodResources API could not be asked (socket missing, kubelet down, timeout)."""


@dataclass(frozen=True)
class ContainerDevices:
    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class ContainerResources:
    name: str
    devices: tuple[ContainerDevices, ...]


@dataclass(frozen=True)
class PodResources:
    name: str
    namespace: str
    containers: tuple[ContainerResources, ...]


def list_pod_resources(
    socket_path: str = DEFAULT_SOCKET, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> list[PodResources]:
    """Calls `/v1.PodResourcesLister/List` on the kubelet's unix socket.

    Raises PodResourcesError on any transport or RPC failure. A fresh channel per call keeps nothing
    pointing at a socket the kubelet re-created on restart; at one call per refresh it costs little.
    """
    if not os.path.exists(socket_path):
        raise PodResourcesError(f"PodResources socket {socket_path} does not exist")
    options = [("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES)]
    try:
        with grpc.insecure_channel(f"unix://{socket_path}", options=options) as channel:
            stub = api_pb2_grpc.PodResourcesListerStub(channel)
            response = stub.List(api_pb2.ListPodResourcesRequest(), timeout=timeout)
    except grpc.RpcError as e:
        code = e.code() if isinstance(e, grpc.Call) else None
        raise PodResourcesError(f"PodResources List on {socket_path} failed: {code}: {e}") from e
    return [
        PodResources(
            name=str(pod.name),
            namespace=str(pod.namespace),
            containers=tuple(
                ContainerResources(
                    name=str(c.name),
                    devices=tuple(
                        ContainerDevices(str(d.resource_name), tuple(str(i) for i in d.device_ids))
                        for d in c.devices
                    ),
                )
                for c in pod.containers
            ),
        )
        for pod in response.pod_resources
    ]


def is_gpu_resource(
    resource_name: str,
    names: Sequence[str] = DEFAULT_GPU_RESOURCES,
    prefixes: Sequence[str] = DEFAULT_GPU_RESOURCE_PREFIXES,
) -> bool:
    return resource_name in names or any(resource_name.startswith(p) for p in prefixes)


def device_uuid(device_id: str) -> str:
    """The NVML UUID behind a device-plugin id (`GPU-x::3` is replica 3 of the shared GPU `GPU-x`)."""
    return _REPLICA_SUFFIX.sub("", device_id)


def gpu_allocations(
    pods: Iterable[PodResources],
    names: Sequence[str] = DEFAULT_GPU_RESOURCES,
    prefixes: Sequence[str] = DEFAULT_GPU_RESOURCE_PREFIXES,
) -> dict[str, list[ContainerRef]]:
    """Device UUID -> the containers the kubelet allocated it to, sorted and without repeats.

    A GPU shared by replicas lists every container holding one of its replicas.
    """
    holders: dict[str, set[ContainerRef]] = {}
    for pod in pods:
        for container in pod.containers:
            ref = ContainerRef(pod.namespace, pod.name, container.name)
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name, names, prefixes):
                    continue
                for device_id in devices.device_ids:
                    holders.setdefault(device_uuid(device_id), set()).add(ref)
    return {uuid: sorted(refs) for uuid, refs in sorted(holders.items())}
