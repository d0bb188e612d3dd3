"""Kubernetes adapter of the KEDA endpoints: the ScaledObjects that declare questions, and the pods and
workloads of the declared namespaces (declared mode); one namespace's objects (on-demand mode).

Declared mode: per refresh one list of ScaledObjects and one list each of running pods, ReplicaSets,
Deployments and StatefulSets, cluster-wide (or per namespace of --keda-namespaces), whatever the number of
ScaledObjects or questions. Of the pods, only those of the declared namespaces are decoded and kept (each
item is first read for its namespace and version only), by version across refreshes: memory follows the
declared questions, not the cluster, and an unchanged pod is not decoded again. On-demand mode: four
list calls per namespace per refresh. Every call has a timeout; the calls are KubernetesAdapter's public
list methods and the client's paged list.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import msgspec
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from automator.keda.declared import GROUP, KIND, PLURAL, VERSION
from automator.keda.table import ScaledObjectsAbsent
from automator.keda.workloads import Namespace
from automator.kube import KubernetesAdapter
from automator.kube.client import list_all, objects_of, records_of
from automator.objects.cache import RecordCache
from automator.objects.keys import JsonObj
from automator.objects.pod import Pod, decode_one_pod
from automator.objects.workload import WorkloadObject, workload_record
from automator.ports import KubernetesUnavailable

# Only running pods carry GPU readings a workload's value is made of.
RUNNING_PODS = "status.phase=Running"


class _ItemMeta(msgspec.Struct):
    namespace: Any = None
    uid: Any = None
    resourceVersion: Any = None


class _Item(msgspec.Struct):
    """What a listed pod is first read for: its namespace and version (the C parser skips the rest)."""

    metadata: _ItemMeta | None = None


class _Continue(msgspec.Struct):
    token: Any = msgspec.field(default=None, name="continue")


class _PodPage(msgspec.Struct):
    items: list[msgspec.Raw] | None = None
    metadata: _Continue | None = None


_POD_PAGE, _ITEM = msgspec.json.Decoder(_PodPage), msgspec.json.Decoder(_Item)


def pods_of(
    namespaces: frozenset[str], cache: RecordCache[Pod]
) -> Callable[[bytes], tuple[list[Pod], str | None]]:
    """A decoder of pod list pages that decodes and keeps the records of `namespaces`' pods only."""

    def decode(data: bytes) -> tuple[list[Pod], str | None]:
        try:
            page = _POD_PAGE.decode(data)
        except msgspec.MsgspecError as e:
            raise ValueError(f"a list answer is not a JSON object with a list of items: {e}") from None
        records = []
        for raw in page.items or ():
            try:
                meta = _ITEM.decode(raw).metadata
            except msgspec.MsgspecError:
                meta = None  # decoded in full below, which names what is wrong
            if meta is not None and meta.namespace not in namespaces:
                continue
            key = None
            if meta is not None and type(meta.uid) is str and type(meta.resourceVersion) is str:
                key = (meta.uid, meta.resourceVersion) if meta.uid and meta.resourceVersion else None
            kept = cache.get(key)
            if key is not None and kept is not None:
                cache.keep(key, kept)
            else:
                kept = decode_one_pod(raw)
                if kept.key.namespace not in namespaces:
                    continue
                cache.put(key, kept)
            records.append(kept)
        token = page.metadata.token if page.metadata is not None else None
        return records, (str(token) if token else None)

    return decode


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
                pods_of(names, self.pod_records),
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
