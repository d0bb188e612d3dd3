"""Kubernetes adapter of the KEDA endpoints: the ScaledObjects that declare questions, and the pods and
workloads of the declared namespaces (declared mode); one namespace's objects (on-demand mode).

Declared mode: per refresh one list of ScaledObjects and one list each of running pods, ReplicaSets,
Deployments and StatefulSets, cluster-wide (or per namespace of --keda-namespaces), whatever the number of
ScaledObjects or questions; pod records are kept by version across refreshes, so an unchanged pod is not
decoded again. On-demand mode: four list calls per namespace per refresh. Every call has a timeout; the
calls are KubernetesAdapter's public list methods and the client's paged list.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from automator.keda.declared import GROUP, KIND, PLURAL, VERSION
from automator.keda.table import ScaledObjectsAbsent
from automator.keda.workloads import Namespace
from automator.kube import KubernetesAdapter
from automator.kube.client import list_all, objects_of, records_of
from automator.objects.cache import RecordCache
from automator.objects.model import JsonObj
from automator.objects.pod import Pod, pod_page_decoder
from automator.objects.workload import WorkloadObject, workload_record
from automator.ports import KubernetesUnavailable

# Only running pods carry GPU readings a workload's value is made of.
RUNNING_PODS = "status.phase=Running"


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


def group_by_namespace(
    names: frozenset[str],
    pods: Iterable[Pod],
    replicasets: Iterable[WorkloadObject],
    deployments: Iterable[WorkloadObject],
    statefulsets: Iterable[WorkloadObject],
) -> dict[str, Namespace]:
    """The Namespace of each of `names` from cluster-wide records (what other namespaces hold is dropped)."""
    pods_of: dict[str, list[Pod]] = {n: [] for n in names}
    sets_of: dict[str, list[WorkloadObject]] = {n: [] for n in names}
    for pod in pods:
        if pod.key.namespace in pods_of:
            pods_of[pod.key.namespace].append(pod)
    for rs in replicasets:
        if rs.namespace in sets_of:
            sets_of[rs.namespace].append(rs)
    names_of: dict[str, tuple[set[str], set[str]]] = {n: (set(), set()) for n in names}
    for i, objects in enumerate((deployments, statefulsets)):
        for o in objects:
            if o.namespace in names_of:
                names_of[o.namespace][i].add(o.name)
    return {
        n: Namespace(pods_of[n], sets_of[n], frozenset(names_of[n][0]), frozenset(names_of[n][1]))
        for n in names
    }


class ClusterLister:
    """The declared mode's source (automator.keda.table.DeclaredSource) on the Kubernetes API."""

    def __init__(
        self, api: client.ApiClient, namespaces: tuple[str, ...] = (), request_timeout: float = 10.0
    ) -> None:
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.scope = namespaces  # empty: cluster-wide
        self.timeout = request_timeout
        self.pod_records = RecordCache[Pod]()

    def _listed(
        self,
        what: str,
        namespaced: Callable[..., Any],
        everywhere: Callable[..., Any],
        decode: Any,
        **kw: Any,
    ) -> Iterator[Any]:
        if not self.scope:
            yield from list_all(what, everywhere, decode, self.timeout, **kw)
            return
        for ns in self.scope:
            yield from list_all(f"{what} in {ns}", namespaced, decode, self.timeout, namespace=ns, **kw)

    def scaled_objects(self) -> list[JsonObj]:
        namespaced = functools.partial(self.custom.list_namespaced_custom_object, GROUP, VERSION)
        everywhere = functools.partial(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)

        def in_namespace(namespace: str, **kw: Any) -> Any:
            return namespaced(namespace, PLURAL, **kw)

        try:
            return list(
                self._listed(PLURAL, in_namespace, everywhere, objects_of(KIND, f"{GROUP}/{VERSION}"))
            )
        except KubernetesUnavailable as e:
            cause = e.__cause__
            if isinstance(cause, ApiException) and cause.status in (403, 404):
                what = "not served (KEDA not installed)" if cause.status == 404 else "not allowed (RBAC)"
                raise ScaledObjectsAbsent(f"{PLURAL}.{GROUP} {VERSION}: {what}") from e
            raise

    def namespaces(self, names: frozenset[str]) -> Mapping[str, Namespace]:
        self.pod_records.start()
        pods = list(
            self._listed(
                "pods",
                self.core.list_namespaced_pod,
                self.core.list_pod_for_all_namespaces,
                pod_page_decoder(self.pod_records),
                field_selector=RUNNING_PODS,
            )
        )
        self.pod_records.finish()
        decode = records_of(workload_record)
        apps = self.apps
        return group_by_namespace(
            names,
            pods,
            self._listed(
                "replicasets",
                apps.list_namespaced_replica_set,
                apps.list_replica_set_for_all_namespaces,
                decode,
            ),
            self._listed(
                "deployments",
                apps.list_namespaced_deployment,
                apps.list_deployment_for_all_namespaces,
                decode,
            ),
            self._listed(
                "statefulsets",
                apps.list_namespaced_stateful_set,
                apps.list_stateful_set_for_all_namespaces,
                decode,
            ),
        )
