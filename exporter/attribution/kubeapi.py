"""The pods bound to this node, from the Kubernetes API: the one module that imports the `kubernetes`
client. What they say about containers is read by the pure `exporter.attribution.pods.index_pods`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, cast

from exporter.ports import KubeApiError

log = logging.getLogger(__name__)

API_TIMEOUT_SECONDS = 5.0


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
