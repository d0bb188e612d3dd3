"""The KEDA cache's namespaces from a snapshot file (`kubectl get -o yaml` List), re-read on every refresh:
the demo's simulated cluster (pure: no client library)."""

from __future__ import annotations

from pathlib import Path

from automator.keda.workloads import Namespace
from automator.objects.files import InputError, documents, flatten
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.pod import pod_record
from automator.objects.workload import workload_record
from automator.ports import KubernetesUnavailable


class SnapshotNamespaces:
    def __init__(self, path: Path) -> None:
        self.path = path

    def namespace(self, name: str) -> Namespace:
        by_kind: dict[str, list[JsonObj]] = {"Pod": [], "ReplicaSet": [], "Deployment": [], "StatefulSet": []}
        try:
            for d, doc in enumerate(documents(self.path)):
                for obj, _where in flatten(doc, f"{self.path} document {d}"):
                    kind = obj.get("kind")
                    if kind in by_kind and ObjectKey.of(obj).namespace == name:
                        by_kind[str(kind)].append(obj)
        except InputError as e:
            raise KubernetesUnavailable(str(e)) from e
        return Namespace(
            pods=map(pod_record, by_kind["Pod"]),
            replicasets=map(workload_record, by_kind["ReplicaSet"]),
            deployments=frozenset(workload_record(o).name for o in by_kind["Deployment"]),
            statefulsets=frozenset(workload_record(o).name for o in by_kind["StatefulSet"]),
        )
