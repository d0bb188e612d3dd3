"""A fake Prometheus answer and namespace for the KEDA unit tests (the integration test uses real ones)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from automator.keda.signals import STAT_LABEL, STAT_TIMESTAMP
from automator.keda.workloads import Namespace
from automator.objects.pod import pod_record
from automator.objects.workload import workload_record
from automator.ports import KubernetesUnavailable, PrometheusUnavailable

NOW = 1_800_000_000.0


def pod(
    name: str, owner: tuple[str, str] | None = None, labels: Mapping[str, str] | None = None, **kw: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": kw.get("namespace", "inference"),
        "uid": kw.get("uid", f"uid-{name}"),
        "labels": dict(labels or {}),
    }
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1]}]
    if "deleting" in kw:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "kind": "Pod",
        "metadata": meta,
        "status": {"phase": kw.get("phase", "Running"), "startTime": kw.get("start", "2026-01-01T00:00:00Z")},
    }


def replicaset(name: str, deployment: str) -> dict[str, Any]:
    return {
        "kind": "ReplicaSet",
        "metadata": {"name": name, "ownerReferences": [{"kind": "Deployment", "name": deployment}]},
    }


def sample(
    pod_name: str, uuid: str, value: float, uid: str | None = None, ns: str = "inference"
) -> dict[str, Any]:
    metric = {
        "namespace": ns,
        "pod": pod_name,
        "uuid": uuid,
        "pod_uid": uid if uid is not None else f"uid-{pod_name}",
    }
    return {"metric": metric, "value": [NOW, repr(value)]}


def stamp(pod_name: str, at: float, uid: str | None = None, ns: str = "inference") -> dict[str, Any]:
    metric = {
        "namespace": ns,
        "pod": pod_name,
        "pod_uid": uid if uid is not None else f"uid-{pod_name}",
        STAT_LABEL: STAT_TIMESTAMP,
    }
    return {"metric": metric, "value": [NOW, repr(at)]}


@dataclass
class FakePrometheus:
    """Answers every query with `result`; counts queries; fails while `down` (with upstream-looking text)."""

    result: list[dict[str, Any]] = field(default_factory=list)
    down: bool = False
    queries: list[str] = field(default_factory=list)

    def __call__(self, expr: str) -> Sequence[Mapping[str, Any]]:
        self.queries.append(expr)
        if self.down:
            raise PrometheusUnavailable(
                "KEDA query to http://prom.secret-host:9090 failed: "
                "<html>proxy page Authorization: Bearer s3cret</html>"
            )
        return self.result


@dataclass
class FakeKube:
    pods: list[dict[str, Any]] = field(default_factory=list)
    replicasets: list[dict[str, Any]] = field(default_factory=list)
    deployments: frozenset[str] = frozenset({"api", "other", "empty"})
    statefulsets: frozenset[str] = frozenset({"db"})
    down: bool = False
    lists: int = 0

    def __call__(self, name: str) -> Namespace:
        self.lists += 1
        if self.down:
            raise KubernetesUnavailable("list pods: 500 Internal Server Error")
        pods, replicasets = map(pod_record, self.pods), map(workload_record, self.replicasets)
        return Namespace(pods, replicasets, self.deployments, self.statefulsets)


def cluster() -> FakeKube:
    """Deployment api (api-a, api-b), Deployment other (other-x), StatefulSet db (db-0), Deployment empty."""
    return FakeKube(
        pods=[
            pod("api-a", ("ReplicaSet", "api-5d8"), {"app": "api", "tier": "web"}),
            pod("api-b", ("ReplicaSet", "api-5d8"), {"app": "api", "tier": "web"}),
            pod("api-old", ("ReplicaSet", "api-4c1"), {"app": "api"}, phase="Succeeded"),
            pod("other-x", ("ReplicaSet", "other-7f"), {"app": "other"}),
            pod("db-0", ("StatefulSet", "db"), {"app": "db"}),
        ],
        replicasets=[
            replicaset("api-5d8", "api"),
            replicaset("api-4c1", "api"),
            replicaset("other-7f", "other"),
        ],
    )


def fresh_result(age: float = 10.0) -> list[dict[str, Any]]:
    """api-a holds GPU-0 (0.6), api-b shares GPU-1 (0.2) with other-x (0.5); db-0 holds GPU-2 and 3."""
    return [
        sample("api-a", "GPU-0", 0.6),
        sample("api-b", "GPU-1", 0.2),
        sample("other-x", "GPU-1", 0.5),
        sample("db-0", "GPU-2", 0.1),
        sample("db-0", "GPU-3", 0.3),
        *(stamp(p, NOW - age) for p in ("api-a", "api-b", "other-x", "db-0")),
    ]


METRICS_URL = "http://gpu-steward-automator.gpu-steward.svc:8080/keda/v1/metrics"
SCALER_ADDRESS = "gpu-steward-automator.gpu-steward.svc:9000"


def scaled_object(
    name: str,
    *queries: str,
    namespace: str = "inference",
    target: str = "api",
    external: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ScaledObject with one metrics-api trigger per query (and an external trigger with that metadata)."""
    triggers: list[dict[str, Any]] = [
        {"type": "metrics-api", "metadata": {"url": f"{METRICS_URL}?namespace={namespace}&{q}"}}
        for q in queries
    ]
    if external is not None:
        triggers.append({"type": "external", "metadata": {"scalerAddress": SCALER_ADDRESS, **external}})
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"scaleTargetRef": {"name": target}, "triggers": triggers},
    }


@dataclass
class FakeDeclaredSource:
    """The declared mode's source: ScaledObjects and the namespaces of a FakeKube; counts both lists."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    kube: FakeKube = field(default_factory=cluster)
    absent: bool = False
    down: bool = False
    object_lists: int = 0
    pod_lists: int = 0

    def scaled_objects(self) -> list[dict[str, Any]]:
        from automator.keda.table import ScaledObjectsAbsent

        self.object_lists += 1
        if self.absent:
            raise ScaledObjectsAbsent("scaledobjects.keda.sh v1alpha1: not served (KEDA not installed)")
        if self.down:
            raise KubernetesUnavailable("list scaledobjects: 500 Internal Server Error")
        return self.objects

    def namespaces(self, names: frozenset[str]) -> dict[str, Namespace]:
        self.pod_lists += 1
        return {n: self.kube(n) for n in names}
