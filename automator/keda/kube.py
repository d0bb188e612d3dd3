"""Kubernetes adapter of the KEDA cache: one namespace's pods, ReplicaSets, Deployments and StatefulSets.

Four list calls per namespace per refresh, whatever the number of workloads in it; each has a timeout.
The calls are KubernetesAdapter's public list methods (automator/kube/adapter.py).
"""

from __future__ import annotations

from kubernetes import client

from automator.keda.workloads import Namespace
from automator.kube import KubernetesAdapter


class NamespaceLister:
    def __init__(self, api: client.ApiClient, request_timeout: float = 10.0) -> None:
        self.kube = KubernetesAdapter(api, request_timeout=request_timeout)

    def namespace(self, name: str) -> Namespace:
        """Raises KubernetesUnavailable on any failure."""
        kube = self.kube
        return Namespace(
            pods=kube.pods_in(name),
            replicasets=kube.apps_objects(name, "ReplicaSet"),
            deployments=frozenset(o.name for o in kube.apps_objects(name, "Deployment")),
            statefulsets=frozenset(o.name for o in kube.apps_objects(name, "StatefulSet")),
        )
