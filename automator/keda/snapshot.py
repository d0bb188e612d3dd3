"""The KEDA endpoints' cluster from a snapshot file (`kubectl get -o yaml` List), re-read on every refresh:
the demo's simulated cluster, and the declared mode without a cluster (pure: no client library). The
ScaledObjects are read from the same file as the pods."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from automator.keda.declared import KIND
from automator.keda.workloads import Namespace
from automator.objects.files import InputError, documents, flatten
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.pod import pod_record
from automator.objects.workload import workload_record
from automator.ports import KubernetesUnavailable

_KINDS = ("Pod", "ReplicaSet", "Deployment", "StatefulSet", KIND)


class SnapshotNamespaces:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _objects(self, namespaces: frozenset[str] | None) -> dict[str, list[JsonObj]]:
        by_kind: dict[str, list[JsonObj]] = {kind: [] for kind in _KINDS}
        try:
            for d, doc in enumerate(documents(self.path)):
                for obj, _where in flatten(doc, f"{self.path} document {d}"):
                    kind = obj.get("kind")
                    if kind in by_kind and (namespaces is None or ObjectKey.of(obj).namespace in namespaces):
                        by_kind[str(kind)].append(obj)
        except InputError as e:
            raise KubernetesUnavailable(str(e)) from e
        return by_kind

    @staticmethod
    def _namespace(objects: Mapping[str, list[JsonObj]], name: str) -> Namespace:
        def of(kind: str) -> list[JsonObj]:
            return [o for o in objects[kind] if ObjectKey.of(o).namespace == name]

        return Namespace(
            pods=map(pod_record, of("Pod")),
            replicasets=map(workload_record, of("ReplicaSet")),
            deployments=frozenset(workload_record(o).name for o in of("Deployment")),
            statefulsets=frozenset(workload_record(o).name for o in of("StatefulSet")),
        )

    def namespace(self, name: str) -> Namespace:
        """One namespace (on-demand mode)."""
        return self._namespace(self._objects(frozenset({name})), name)

    def scaled_objects(self) -> list[JsonObj]:
        """The file's ScaledObjects (declared mode)."""
        return self._objects(None)[KIND]

    def namespaces(self, names: frozenset[str]) -> Mapping[str, Namespace]:
        """The declared namespaces, from one reading of the file (declared mode)."""
        objects = self._objects(names)
        return {n: self._namespace(objects, n) for n in names}
