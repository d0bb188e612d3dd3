"""The attributor the NVML source uses: /proc cgroups + kubelet PodResources + Kubernetes API.

Per process: /proc/<pid>/cgroup gives (pod UID, container id); the Kubernetes API (pods on this node)
names the container that has that id. Per device: PodResources names the containers the kubelet gave it
to, which is what `allocations()` returns. See docs/attribution.md.

Never raises on I/O trouble: a source that fails is marked unavailable in `status()` (logged once per
change) and attribution degrades to `unresolved` instead.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from exporter.attribution.allocations import (
    DEFAULT_GPU_RESOURCE_PREFIXES,
    DEFAULT_GPU_RESOURCES,
    PodResources,
    gpu_allocations,
    sole_gpu_container,
)
from exporter.attribution.cgroup import classify_cgroup, read_cgroup
from exporter.attribution.kubeapi import NodePodLister
from exporter.attribution.podresources.client import list_pod_resources
from exporter.attribution.pods import PodIndex, index_pods
from exporter.model import ATTRIBUTION_SOURCES, Attribution, ContainerRef
from exporter.ports import DEFAULT_PODRESOURCES_SOCKET

log = logging.getLogger(__name__)

UNRESOLVED = Attribution("unresolved")
HOST = Attribution("host")


class KubeletAttributor:
    """`exporter.ports.Attributor` for a Kubernetes node. Caches both sources for `refresh_seconds`."""

    def __init__(
        self,
        node_name: str | None,
        proc_root: str = "/proc",
        podresources_socket: str = DEFAULT_PODRESOURCES_SOCKET,
        use_kube_api: bool = True,
        refresh_seconds: float = 30.0,
        kube_client: object | None = None,
        *,
        gpu_resources: Sequence[str] = DEFAULT_GPU_RESOURCES,
        gpu_resource_prefixes: Sequence[str] = DEFAULT_GPU_RESOURCE_PREFIXES,
        podresources_lister: Callable[[], list[PodResources]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.node_name = node_name
        self.proc_root = proc_root
        self.refresh_seconds = refresh_seconds
        self._gpu_names = tuple(gpu_resources)
        self._gpu_prefixes = tuple(gpu_resource_prefixes)
        self._clock = clock
        self._list_pod_resources = podresources_lister or (lambda: list_pod_resources(podresources_socket))
        self._pods: NodePodLister | None = None
        self._api_disabled_reason: str | None = None
        if not use_kube_api:
            self._api_disabled_reason = "disabled by configuration"
        elif not node_name:
            self._api_disabled_reason = "no node name to limit the pod list to this node"
        else:
            try:
                self._pods = NodePodLister(node_name, kube_client)
            except TypeError as e:
                self._api_disabled_reason = str(e)
        self._lock = threading.RLock()
        self._last_refresh: float | None = None
        # Unknown container id -> when it forced an early refresh. Each id forces one, so a process
        # whose id the API never reports (a status that lags, a sandbox) cannot make every collection
        # hit the API; entries expire so the map does not grow with container churn.
        self._forced_at: dict[str, float] = {}
        self._index = PodIndex()
        self._pod_resources: list[PodResources] = []
        self._status: dict[str, bool | None] = dict.fromkeys(ATTRIBUTION_SOURCES)

    # --- the Attributor protocol -------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-queries the kubelet and the API when the cache is `refresh_seconds` old (or never filled)."""
        with self._lock:
            now = self._clock()
            if self._last_refresh is not None and now - self._last_refresh < self.refresh_seconds:
                return
            self._refresh_now(now)

    def attribute(
        self, pids: Sequence[int], devices: Mapping[int, Collection[str]] | None = None
    ) -> dict[int, Attribution]:
        """Host PID -> owner. `devices` (optional, pid -> GPU UUIDs it runs on) sharpens the
        PodResources fallback for pods with several GPU containers."""
        with self._lock:
            self._fill_once()
            result: dict[int, Attribution] = {}
            readable = 0
            for pid in pids:
                text = read_cgroup(self.proc_root, pid)
                if text is None:
                    result[pid] = UNRESOLVED  # exited, or /proc is not the host's
                    continue
                readable += 1
                result[pid] = self._resolve(text, devices.get(pid) if devices else None)
            # /proc "answers" when its root is there and, if we asked about any process, at least one
            # could be read: none readable means the host PID namespace is not visible (no hostPID).
            if self._proc_root_exists():
                reason = f"no process readable in {self.proc_root} (is the pod running with hostPID?)"
                self._set_status("proc", readable > 0 or not pids, reason)
            return result

    def allocations(self) -> dict[str, list[ContainerRef]]:
        with self._lock:
            self._fill_once()
            return gpu_allocations(self._pod_resources, self._gpu_names, self._gpu_prefixes)

    def status(self) -> dict[str, bool]:
        with self._lock:
            return {source: bool(ok) for source, ok in self._status.items()}

    # --- internals ---------------------------------------------------------------------------------

    def _fill_once(self) -> None:
        """Without a `refresh()` first (the Attributor protocol does not require one), fill the cache."""
        if self._last_refresh is None:
            self._refresh_now(self._clock())

    def _proc_root_exists(self) -> bool:
        """False (and the `proc` source marked unavailable) when the host's /proc is not mounted."""
        if os.path.isdir(self.proc_root):
            return True
        self._set_status("proc", False, f"{self.proc_root} is not a directory")
        return False

    def _resolve(self, cgroup_text: str, devices: Collection[str] | None) -> Attribution:
        owner = classify_cgroup(cgroup_text)
        if not owner.kubepods:
            return HOST
        if owner.pod_uid is None or owner.container_id is None:
            return UNRESOLVED  # a pod-level or conmon cgroup: in Kubernetes, but no container to name
        ref = self._index.containers.get(owner.container_id)
        if ref is None and self._status["kubernetes_api"] and owner.container_id not in self._forced_at:
            # A container started since the last refresh: ask again now rather than in refresh_seconds.
            # Not while the API is failing: a timeout per new id would stall the collection.
            now = self._clock()
            self._forced_at[owner.container_id] = now
            self._refresh_now(now)
            ref = self._index.containers.get(owner.container_id)
        if ref is not None:
            if not ref.pod_uid:  # the cgroup names the pod's UID even when the pod list did not
                ref = replace(ref, pod_uid=owner.pod_uid)
            return Attribution("container", ref)
        pod = self._index.pods.get(owner.pod_uid)
        if pod is None:
            return UNRESOLVED
        sole = sole_gpu_container(
            self._pod_resources, pod[0], pod[1], devices, self._gpu_names, self._gpu_prefixes
        )
        return (
            Attribution("container", replace(sole, pod_uid=owner.pod_uid)) if sole is not None else UNRESOLVED
        )

    def _refresh_now(self, now: float) -> None:
        self._last_refresh = now
        expiry = max(10 * self.refresh_seconds, 300.0)
        self._forced_at = {cid: t for cid, t in self._forced_at.items() if now - t < expiry}
        # Whether /proc shows the host's processes is judged by attribute(); here only its absence,
        # so that the two do not flip the status (and the log) back and forth.
        if self._proc_root_exists() and self._status["proc"] is None:
            self._set_status("proc", True)
        try:
            self._pod_resources = self._list_pod_resources()
            self._set_status("podresources", True)
        except Exception as e:  # never raise on I/O trouble; PodResourcesError and anything unexpected
            # Stale allocations would keep a deleted pod "holding" a GPU, so drop them.
            self._pod_resources = []
            self._set_status("podresources", False, e)
        if self._pods is None:
            self._set_status("kubernetes_api", False, self._api_disabled_reason, level=logging.INFO)
            return
        try:
            self._index = index_pods(self._pods.list_pods())
            self._set_status("kubernetes_api", True)
        except Exception as e:
            # Keep the last index: its entries are immutable facts, incomplete but not wrong.
            self._set_status("kubernetes_api", False, e)

    def _set_status(self, source: str, ok: bool, reason: object = None, level: int = logging.WARNING) -> None:
        before = self._status[source]
        self._status[source] = ok
        if before == ok:
            return
        if not ok:
            log.log(level, "attribution source %s unavailable: %s", source, reason)
        elif before is False:
            log.info("attribution source %s available again", source)
