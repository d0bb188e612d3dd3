"""Container id / pod UID -> namespace, pod, container, from the pods the Kubernetes API runs on this node.

`index_pods` is pure over the pods-list JSON; `NodePodLister` is the only part that talks to the API.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from exporter.model import ContainerRef

log = logging.getLogger(__name__)

API_TIMEOUT_SECONDS = 5.0
# A static pod runs under the UID the kubelet derived from its manifest (the config hash); the API
# object is the mirror pod, with its own UID and that hash in this annotation. The cgroup shows the hash.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_STATUS_LISTS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")


class KubeApiError(Exception):
    """The pods on this node could not be listed (no config, forbidden, unreachable, bad answer)."""


@dataclass(frozen=True)
class PodIndex:
    """What the pods on this node tell about their containers. Both maps hold immutable facts (a
    container id or pod UID never changes owner), so an old index is incomplete but never wrong."""

    containers: dict[str, ContainerRef] = field(default_factory=dict)  # container id -> ref
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod UID -> (namespace, name)


def strip_runtime(container_id: str) -> str:
    """`containerd://<id>`, `cri-o://<id>`, `docker://<id>` -> `<id>`."""
    _, sep, rest = container_id.partition("://")
    return rest if sep else container_id


def index_pods(pods: Iterable[Mapping[str, Any]]) -> PodIndex:
    """Builds the index from pod objects as the API serialises them (camelCase keys)."""
    index = PodIndex()
    for pod in pods:
        meta = pod.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            continue
        uids = [meta.get("uid"), (meta.get("annotations") or {}).get(MIRROR_ANNOTATION)]
        for uid in uids:
            if isinstance(uid, str) and uid:
                index.pods[uid.lower()] = (namespace, name)
        status = pod.get("status") or {}
        for key in _STATUS_LISTS:
            for cs in status.get(key) or []:
                cid, cname = cs.get("containerID"), cs.get("name")
                # A container not started yet has no id; it cannot own a process either.
                if isinstance(cid, str) and cid and isinstance(cname, str):
                    index.containers[strip_runtime(cid)] = ContainerRef(namespace, name, cname)
    return index


def _in_cluster_api() -> Any:
    """CoreV1Api from the pod's service account; raises KubeApiError outside a cluster."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException as e:
        raise KubeApiError(f"no in-cluster Kubernetes config: {e}") from e
    return client.CoreV1Api(client.ApiClient(cfg))


def as_core_v1(kube_client: object) -> Any:
    """Accepts a CoreV1Api, an ApiClient (wrapped), or any object with list_pod_for_all_namespaces."""
    from kubernetes import client

    if isinstance(kube_client, client.ApiClient):
        return client.CoreV1Api(kube_client)
    if not hasattr(kube_client, "list_pod_for_all_namespaces"):
        raise TypeError(f"kube_client: expected a CoreV1Api or ApiClient, got {type(kube_client).__name__}")
    return kube_client


def _items(result: Any) -> list[Mapping[str, Any]]:
    data = getattr(result, "data", None)
    if isinstance(data, bytes | str):
        # Raw body (_preload_content=False): parsed here rather than by the client's models, which
        # reject pod JSON missing fields they mark required and cost much more on a dense node.
        try:
            body = json.loads(data)
        except ValueError as e:
            raise KubeApiError(f"pods list: not JSON: {e}") from e
    else:
        from kubernetes import client

        body = client.ApiClient().sanitize_for_serialization(result)
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise KubeApiError("pods list: field 'items' missing or not a list")
    return [cast(Mapping[str, Any], i) for i in items if isinstance(i, dict)]


class NodePodLister:
    """Lists the pods bound to one node (fieldSelector spec.nodeName=<node>), never the whole cluster."""

    def __init__(
        self, node_name: str, kube_client: object | None = None, timeout: float = API_TIMEOUT_SECONDS
    ):
        if not node_name:
            raise ValueError("node_name: required to limit the pod list to this node")
        self.node_name = node_name
        self.timeout = timeout
        self._api: Any = as_core_v1(kube_client) if kube_client is not None else None

    def list_pods(self) -> list[Mapping[str, Any]]:
        """Raises KubeApiError on any failure (forbidden, unreachable, timeout, malformed answer)."""
        if self._api is None:
            self._api = _in_cluster_api()  # retried on the next call when it fails
        from kubernetes.client.exceptions import ApiException

        try:
            result = self._api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self.node_name}",
                _request_timeout=self.timeout,
                _preload_content=False,
            )
        except ApiException as e:
            raise KubeApiError(f"listing pods on node {self.node_name}: HTTP {e.status} {e.reason}") from e
        except Exception as e:  # urllib3 / socket errors: the exact classes vary by client version
            raise KubeApiError(f"listing pods on node {self.node_name}: {type(e).__name__}: {e}") from e
        try:
            return _items(result)
        finally:
            release = getattr(result, "release_conn", None)
            if callable(release):
                release()
