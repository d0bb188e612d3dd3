"""Client for the kubelet PodResources gRPC API (which device ids the kubelet gave to which container)."""

from exporter.podresources.client import (
    DEFAULT_GPU_RESOURCE_PREFIXES,
    DEFAULT_GPU_RESOURCES,
    DEFAULT_SOCKET,
    ContainerDevices,
    ContainerResources,
    PodResources,
    PodResourcesError,
    device_uuid,
    gpu_allocations,
    is_gpu_resource,
    list_pod_resources,
)

__all__ = [
    "DEFAULT_GPU_RESOURCES",
    "DEFAULT_GPU_RESOURCE_PREFIXES",
    "DEFAULT_SOCKET",
    "ContainerDevices",
    "ContainerResources",
    "PodResources",
    "PodResourcesError",
    "device_uuid",
    "gpu_allocations",
    "is_gpu_resource",
    "list_pod_resources",
]
