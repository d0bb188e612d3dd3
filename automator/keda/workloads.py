"""Which running pods make a workload (pure): a Deployment's pods through their ReplicaSets, a
StatefulSet's directly, or a label selector's, from the records of one namespace's objects."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from automator.keda.request import Workload
from automator.keda.values import PodRef
from automator.objects.pod import Pod
from automator.objects.resources import FieldError, parse_time
from automator.objects.selectors import selector_matches
from automator.objects.workload import WorkloadObject


class UnknownWorkload(LookupError):
    """The Deployment or StatefulSet does not exist (HTTP 404)."""


# Selector answers kept per namespace snapshot, keyed on the parsed selector's canonical text.
MAX_SELECTOR_MEMO = 256


class Namespace:
    """A namespace's running pods (small records: ref, labels, owners), and the names of its Deployments and
    StatefulSets, indexed once per refresh by owner, so that answering for one workload reads its pods only.
    The records it is built from are not kept: a namespace costs its refs and labels only."""

    __slots__ = ("_by_owner", "_memo", "_running", "deployments", "statefulsets")

    def __init__(
        self,
        pods: Iterable[Pod],
        replicasets: Iterable[WorkloadObject],
        deployments: frozenset[str],
        statefulsets: frozenset[str],
    ) -> None:
        self.deployments = frozenset(deployments)
        self.statefulsets = frozenset(statefulsets)
        sets_of: dict[str, set[str]] = {}
        for rs in replicasets:
            for kind, name in rs.owners:
                if kind == "Deployment":
                    sets_of.setdefault(rs.name, set()).add(name)
        # Running pods only, sorted by name: by owner (a Deployment through its ReplicaSets), and all.
        self._by_owner: dict[tuple[str, str], list[PodRef]] = {}
        self._running: list[tuple[PodRef, Mapping[str, str]]] = []
        self._memo: dict[str, list[PodRef]] = {}
        running = [p for p in pods if p.phase == "Running" and not p.terminating]
        for pod in sorted(running, key=lambda p: p.key.name):
            ref = _ref(pod)
            labels = {str(k): str(v) for k, v in pod.labels.items()}
            self._running.append((ref, labels))
            for kind, name in pod.owners:
                self._by_owner.setdefault((kind, name), []).append(ref)
                for deployment in sets_of.get(name, ()) if kind == "ReplicaSet" else ():
                    self._by_owner.setdefault(("Deployment", deployment), []).append(ref)

    def owned_by(self, kind: str, name: str) -> list[PodRef]:
        """The running pods the object owns, sorted by name."""
        return self._by_owner.get((kind, name), [])

    def matching(self, selector: Mapping[str, Any], key: str | None = None) -> list[PodRef]:
        """The running pods the selector matches; `key` (its canonical text) memoizes the answer."""
        if key is not None and key in self._memo:
            return self._memo[key]
        found = [ref for ref, labels in self._running if selector_matches(selector, labels)]
        if key is not None:
            if len(self._memo) >= MAX_SELECTOR_MEMO:
                self._memo.pop(next(iter(self._memo)))
            self._memo[key] = found
        return found


def _started(pod: Pod) -> float | None:
    if pod.start_time is None:
        return None
    try:
        return parse_time(pod.start_time, "status.startTime").timestamp()
    except FieldError:
        return None


def _ref(pod: Pod) -> PodRef:
    return PodRef(pod.key.namespace, pod.key.name, pod.uid or "", _started(pod))


def resolve(workload: Workload, ns: Namespace) -> list[PodRef]:
    """The workload's running pods, sorted by name; UnknownWorkload for a missing Deployment/StatefulSet."""
    if workload.kind == "deployment":
        if workload.name not in ns.deployments:
            raise UnknownWorkload(f"Deployment {workload.namespace}/{workload.name} not found")
        return ns.owned_by("Deployment", workload.name)
    if workload.kind == "statefulset":
        if workload.name not in ns.statefulsets:
            raise UnknownWorkload(f"StatefulSet {workload.namespace}/{workload.name} not found")
        return ns.owned_by("StatefulSet", workload.name)
    assert workload.selector is not None
    return ns.matching(workload.selector, workload.name)
