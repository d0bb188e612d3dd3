"""Which containers the kubelet gave which GPU to, from a PodResources answer (pure).

The answer arrives as the frozen dataclasses below (the gRPC adapter, attribution/podresources/client.py,
copies it into them); everything here is plain typed data and functions over it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from exporter.model import ContainerRef

# Whole GPUs; MIG slices (`nvidia.com/mig-1g.10gb`, ...) are matched by prefix, see `is_gpu_resource`.
DEFAULT_GPU_RESOURCES: tuple[str, ...] = ("nvidia.com/gpu",)
DEFAULT_GPU_RESOURCE_PREFIXES: tuple[str, ...] = ("nvidia.com/mig-",)
# NVIDIA's device plugin names time-sliced / MPS replicas `<uuid>::<n>`; the GPU is the part before.
_REPLICA_SUFFIX = re.compile(r"::[0-9]+\Z")  # \Z: `$` would also match before a trailing newline


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


def sole_gpu_container(
    pods: Sequence[PodResources],
    namespace: str,
    pod: str,
    devices: Collection[str] | None,
    names: Sequence[str] = DEFAULT_GPU_RESOURCES,
    prefixes: Sequence[str] = DEFAULT_GPU_RESOURCE_PREFIXES,
) -> ContainerRef | None:
    """The container of a pod that a GPU process must belong to, when PodResources leaves no choice.

    Used only when the API cannot name the process's container id (the API is down, or the container
    status does not carry the id yet) but the pod UID from the cgroup is known. The rule: among the
    pod's containers that the kubelet gave a GPU to (the process's own GPUs when the caller passes
    them, else any GPU), exactly one -> that container; none or several -> None. It holds because a
    container only sees the GPUs allocated to it; the one way to break it, a container that sets
    NVIDIA_VISIBLE_DEVICES itself to reach GPUs it was not allocated, gets an answer that names the
    GPU's holder in the same pod.
    """
    wanted = {device_uuid(d) for d in devices} if devices else None
    holders: set[ContainerRef] = set()
    for p in pods:
        if p.namespace != namespace or p.name != pod:
            continue
        for c in p.containers:
            for d in c.devices:
                if not is_gpu_resource(d.resource_name, names, prefixes):
                    continue
                if wanted is None or any(device_uuid(i) in wanted for i in d.device_ids):
                    holders.add(ContainerRef(namespace, pod, c.name))
    return holders.pop() if len(holders) == 1 else None
