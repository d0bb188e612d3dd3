"""The exporter's ports: what the collection loop needs from a GPU source and an attributor, and the
errors its adapters raise. Adapters (sources/nvml.py, sources/mock.py, attribution/kubelet.py,
attribution/podresources/client.py, attribution/kubeapi.py) implement these; the pure modules and the
loop depend only on this module and exporter.model.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from exporter.model import Attribution, ContainerRef, GpuSample

# The kubelet's PodResources socket on every node (the `--podresources-socket` default).
DEFAULT_PODRESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


class SourceError(RuntimeError):
    """The source cannot start (e.g. NVML missing); the message says why."""


class PodResourcesError(Exception):
    """The kubelet PodResources API could not be asked (socket missing, kubelet down, timeout)."""


class KubeApiError(Exception):
    """The pods on this node could not be listed (no config, forbidden, unreachable, bad answer)."""


class Source(Protocol):
    """A GPU reader: NVML on a node, or the scenario-driven mock."""

    name: str

    def collect(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


class Attributor(Protocol):
    """Maps host PIDs and devices to Kubernetes containers."""

    def refresh(self) -> None:
        """Called once per collection; an attributor re-reads its sources when its cache is old."""
        ...

    def attribute(
        self, pids: Sequence[int], devices: Mapping[int, Collection[str]] | None = None
    ) -> dict[int, Attribution]:
        """Host PID -> owner. `devices`: pid -> GPU UUIDs it runs on, for attributors that can use it."""
        ...

    def allocations(self) -> dict[str, list[ContainerRef]]:
        """Device UUID -> containers the kubelet allocated it to (whole-device)."""
        ...

    def status(self) -> dict[str, bool]:
        """Attribution source name -> whether it answered in the last refresh."""
        ...
