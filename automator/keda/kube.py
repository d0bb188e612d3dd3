"""Kubernetes adapter of the KEDA cache: one namespace's pods, ReplicaSets, Deployments and StatefulSets.

Four list calls per namespace per refresh, whatever the number of workloads in it; each has a timeout.
"""

from __future__ import annotations

from kubernetes import client

from automator.keda.workloads import Namespace
from automator.kube import KubernetesAdapter


class NamespaceLister(KubernetesAdapter):
    def __init__(self, api: client.ApiClient, request_timeout: float = 10.0) -> None:
        super().__init__(api, request_timeout=request_timeout)
        self.apps = client.AppsV1Api(api)

    def namespace(self, name: str) -> Namespace:
        """Raises KubernetesUnavailable on any failure."""
        pods = self._list(f"pods in {name}", self.core.list_namespaced_pod, "Pod", "v1", namespace=name)
        sets = self._list(
            f"replicasets in {name}",
            self.apps.list_namespaced_replica_set,
            "ReplicaSet",
            "apps/v1",
            namespace=name,
        )
        deployments = self._list(
            f"deployments in {name}",
            self.apps.list_namespaced_deployment,
            "Deployment",
            "apps/v1",
            namespace=name,
        )
        statefulsets = self._list(
            f"statefulsets in {name}",
            self.apps.list_namespaced_stateful_set,
            "StatefulSet",
            "apps/v1",
            namespace=name,
        )
        return Namespace(
            pods=pods,
            replicasets=sets,
            deployments=frozenset(str((d.get("metadata") or {}).get("name")) for d in deployments),
            statefulsets=frozenset(str((s.get("metadata") or {}).get("name")) for s in statefulsets),
        )
