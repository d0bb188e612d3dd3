"""A typed client for the kubelet PodResources API (List only): the one module that speaks gRPC.

The generated protobuf classes are untyped to mypy, so `list_pod_resources` copies the answer into the
frozen dataclasses of `exporter.attribution.allocations` right at the edge; everything after that is
plain typed data.
"""

from __future__ import annotations

import os

import grpc

from exporter.attribution.allocations import ContainerDevices, ContainerResources, PodResources
from exporter.attribution.podresources import api_pb2, api_pb2_grpc
from exporter.ports import DEFAULT_PODRESOURCES_SOCKET, PodResourcesError

DEFAULT_TIMEOUT_SECONDS = 5.0
# The kubelet answers with every pod on the node; gRPC's 4 MiB default is too small on dense nodes.
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def list_pod_resources(
    socket_path: str = DEFAULT_PODRESOURCES_SOCKET, timeout: float = DEFAULT_TIMEOUT_SECONDS
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
