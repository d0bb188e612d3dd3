"""Which running pods make a workload (pure): a Deployment's pods through their ReplicaSets, a
StatefulSet's directly, or a label selector's, from plain API objects of one namespace."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from automator.keda.request import Workload, matches
from automator.keda.values import PodRef
from automator.model import JsonObj
from automator.resources import FieldError, is_finished, is_terminating, labels_of, parse_time


class UnknownWorkload(LookupError):
    """The Deployment or StatefulSet does not exist (HTTP 404)."""


@dataclass(frozen=True)
class Namespace:
    """A namespace's pods, ReplicaSets and the names of its Deployments and StatefulSets, indexed once per
    refresh by owner, so that answering for one workload reads its pods only."""

    pods: Sequence[JsonObj]
    replicasets: Sequence[JsonObj]
    deployments: frozenset[str]
    statefulsets: frozenset[str]
    _by_owner: dict[tuple[str, str], list[JsonObj]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        sets_of: dict[str, set[str]] = {}
        for rs in self.replicasets:
            for kind, name in _owners(rs):
                if kind == "Deployment":
                    sets_of.setdefault(str((rs.get("metadata") or {}).get("name")), set()).add(name)
        for pod in self.pods:
            for kind, name in _owners(pod):
                self._by_owner.setdefault((kind, name), []).append(pod)
                for deployment in sets_of.get(name, ()) if kind == "ReplicaSet" else ():
                    self._by_owner.setdefault(("Deployment", deployment), []).append(pod)

    def owned_by(self, kind: str, name: str) -> list[JsonObj]:
        return self._by_owner.get((kind, name), [])


def _owners(obj: JsonObj) -> Iterable[tuple[str, str]]:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict):
            yield str(ref.get("kind") or ""), str(ref.get("name") or "")


def _running(pod: JsonObj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and not is_terminating(pod) and not is_finished(pod)


def _started(pod: JsonObj) -> float | None:
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    value = status.get("startTime") or meta.get("creationTimestamp")
    if value is None:
        return None
    try:
        return parse_time(value, "status.startTime").timestamp()
    except FieldError:
        return None


def _ref(pod: JsonObj) -> PodRef:
    meta = pod.get("metadata") or {}
    return PodRef(
        str(meta.get("namespace") or "default"),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        _started(pod),
    )


def resolve(workload: Workload, ns: Namespace) -> list[PodRef]:
    """The workload's running pods, sorted by name; UnknownWorkload for a missing Deployment/StatefulSet."""
    if workload.kind == "deployment":
        if workload.name not in ns.deployments:
            raise UnknownWorkload(f"Deployment {workload.namespace}/{workload.name} not found")
        chosen = ns.owned_by("Deployment", workload.name)
    elif workload.kind == "statefulset":
        if workload.name not in ns.statefulsets:
            raise UnknownWorkload(f"StatefulSet {workload.namespace}/{workload.name} not found")
        chosen = ns.owned_by("StatefulSet", workload.name)
    else:
        assert workload.selector is not None
        chosen = [p for p in ns.pods if matches(workload.selector, labels_of(p))]
    return sorted((_ref(p) for p in chosen if _running(p)), key=lambda r: r.name)
