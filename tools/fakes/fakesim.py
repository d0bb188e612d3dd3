"""What happens in the fake cluster between API calls: a kubelet, a scheduler and the GPUs' processes.

- Kubelet: a terminating pod (an accepted eviction or delete) is removed once its grace period is over
  (its deletionTimestamp); until then it holds its node's resources.
- Scheduler: a pending pod without a node is bound to the first node (by name) that is schedulable, not
  NotReady, matches its nodeSelector, and has room for its requests (every resource it requests, cpu,
  memory and extended resources such as nvidia.com/gpu, plus one pod) counting every pod bound there,
  terminating ones included. Highest priority first, then oldest. It never preempts, and knows no taints,
  affinity or topology. A pod that fits nowhere gets `PodScheduled=False, reason Unschedulable`.
- Workloads: a Deployment's `spec.replicas` goes to the ReplicaSet it controls, and a ReplicaSet keeps that
  many pods of its template (named `<replicaset>-<5 characters>`, owned by it, their priority from their
  PriorityClass as admission sets it): missing pods are created Pending, extra ones deleted gracefully,
  unscheduled and newest first (as the ReplicaSet controller ranks them). No rollouts.
- GPUs (`GpuDevices`, optional, one per GPU node): the node of a mock exporter scenario
  (exporter/sources/scenario.py). The
  fake keeps which GPU each container holds, and writes the scenario file again whenever that changes;
  the exporter started with `--scenario-reload` follows it. A terminating pod's processes stop at once
  (its GPUs go quiet, still allocated), its allocations go when it is removed; a pod bound to the node
  gets free GPUs and, when its pod sets `fakekube.gpu-steward.io/gpu-utilization` (0-1, and optionally
  `fakekube.gpu-steward.io/gpu-memory`, a quantity), one process per GPU at that level from now on.
  A Deployment with `fakekube.gpu-steward.io/gpu-load` (a JSON list of `{"from": seconds, "utilization":
  total}` in scenario time) has that total load spread over its running pods: each of their GPUs runs at
  total / running pods (at most 1), rewritten whenever the number of running pods changes, so the
  exporter measures what a load balancer in front of the replicas would make of that load.
- Kueue (tools/fakes/kueuesim.py), where Workloads are loaded: deactivated Workloads stopped and their quota
  released, waiting ones admitted when their ClusterQueue's quota allows, their pods created.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from exporter.sources.scenario import parse_scenario
from steward_common.quantity import parse_quantity
from tools.fakes.kueuesim import KueueStandIn

if TYPE_CHECKING:
    from tools.fakes.fakekube import Store
    from tools.fakes.kubeapi import JsonObj

log = logging.getLogger("fakekube.sim")

UTILIZATION_ANNOTATION = "fakekube.gpu-steward.io/gpu-utilization"
MEMORY_ANNOTATION = "fakekube.gpu-steward.io/gpu-memory"
LOAD_ANNOTATION = "fakekube.gpu-steward.io/gpu-load"
GPU_RESOURCE = "nvidia.com/gpu"
SCHEDULER = "default-scheduler"
KUBELET = "kubelet"
REPLICASET_CONTROLLER = "replicaset-controller"
FIRST_PID = 20_000


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """What the scheduler reserves: per resource, the containers' sum or the largest init container."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> dict[str, Decimal]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}  # requests default to limits
        return {k: parse_quantity(str(v)) for k, v in merged.items()}

    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    total["pods"] = Decimal(1)
    return total


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, Any]) -> bool:
    """A metav1.LabelSelector; an empty one matches everything, a missing one nothing (as PDBs read it)."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op, False)
        if not ok:
            return False
    return True


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return (pod.get("status") or {}).get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def parse_load(text: str) -> list[tuple[float, float]]:
    """The gpu-load annotation: (from, total utilization) phases, sorted; ValueError when malformed."""
    phases = json.loads(text)
    if not isinstance(phases, list) or not phases:
        raise ValueError(f"{LOAD_ANNOTATION}: expected a non-empty JSON list")
    out = []
    for phase in phases:
        start, level = float(phase["from"]), float(phase["utilization"])
        if not (start >= 0 and 0 <= level <= 1000):
            raise ValueError(f"{LOAD_ANNOTATION}: phase {phase!r} out of range")
        out.append((start, level))
    return sorted(out)


@dataclass
class Cluster:
    store: Store
    devices: list[GpuDevices] = field(default_factory=list)

    # --- workloads: Deployment -> ReplicaSet -> pods ---

    def _reconcile_workloads(self) -> None:
        objects = self.store.objects
        deployments = {str(d["metadata"].get("uid")): d for d in objects["deployments"].values()}
        pods = self.store.pods()
        for rs in list(objects["replicasets"].values()):
            owner = deployments.get(_controller_uid(rs) or "")
            spec = rs.setdefault("spec", {})
            if owner is not None:
                want = int((owner.get("spec") or {}).get("replicas", 1))
                if int(spec.get("replicas", 1)) != want:
                    spec["replicas"] = want
                    self.store.stamp(rs)
            uid = str(rs["metadata"].get("uid"))
            mine = [p for p in pods if _controller_uid(p) == uid and not _finished(p)]
            active = [p for p in mine if p["metadata"].get("deletionTimestamp") is None]
            want = int(spec.get("replicas", 1))
            for _ in range(want - len(active)):
                self._create_pod(rs)
            if len(active) > want:
                # The ReplicaSet controller deletes unscheduled pods first, then the newest.
                unscheduled = [p for p in active if not (p.get("spec") or {}).get("nodeName")]
                scheduled = sorted(
                    (p for p in active if (p.get("spec") or {}).get("nodeName")),
                    key=lambda p: str(p["metadata"].get("creationTimestamp", "")),
                    reverse=True,
                )
                for pod in (unscheduled + scheduled)[: len(active) - want]:
                    self.terminate(pod, None)
                    self.store.event(rs, "Normal", "SuccessfulDelete", f"Deleted pod: {_key(pod)[1]}",
                                     REPLICASET_CONTROLLER)  # fmt: skip
            mine = [p for p in self.store.pods() if _controller_uid(p) == uid and not _finished(p)]
            status = {"replicas": len(mine), "readyReplicas": sum(_ready(p) for p in mine)}
            if owner is not None:
                owner["status"] = {**status, "availableReplicas": status["readyReplicas"],
                                   "updatedReplicas": len(mine)}  # fmt: skip
            if rs.get("status") != status:
                rs["status"] = status
                self.store.stamp(rs)

    def _create_pod(self, rs: JsonObj) -> None:
        template = copy.deepcopy((rs.get("spec") or {}).get("template") or {})
        meta = template.get("metadata") or {}
        rs_meta = rs["metadata"]
        name = f"{rs_meta['name']}-{secrets.token_hex(3)[:5]}"
        spec = template.get("spec") or {}
        klass = self.store.objects["priorityclasses"].get(("", str(spec.get("priorityClassName") or "")))
        if klass is not None:
            spec["priority"] = int(klass.get("value", 0))
        pod = self.store.add(
            {
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": rs_meta.get("namespace"),
                    "labels": dict(meta.get("labels") or {}),
                    "annotations": dict(meta.get("annotations") or {}),
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "ReplicaSet",
                            "name": rs_meta["name"],
                            "uid": rs_meta.get("uid"),
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": spec,
                "status": {"phase": "Pending"},
            }
        )
        self.store.event(rs, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}",
                         REPLICASET_CONTROLLER)  # fmt: skip

    def loads(self) -> dict[tuple[str, str], list[tuple[float, float]]]:
        """Per running pod of a Deployment with a gpu-load annotation: its share of the load, by phase."""
        out: dict[tuple[str, str], list[tuple[float, float]]] = {}
        objects = self.store.objects
        by_rs = {
            str(rs["metadata"].get("uid")): _controller_uid(rs) for rs in objects["replicasets"].values()
        }
        for deployment in objects["deployments"].values():
            text = ((deployment.get("metadata") or {}).get("annotations") or {}).get(LOAD_ANNOTATION)
            if not text:
                continue
            try:
                phases = parse_load(str(text))
            except (ValueError, KeyError, TypeError) as e:
                log.warning("%s/%s: %s", *_key(deployment), e)
                continue
            uid = str(deployment["metadata"].get("uid"))
            running = [
                _key(p)
                for p in self.store.pods()
                if by_rs.get(_controller_uid(p) or "") == uid
                and (p.get("spec") or {}).get("nodeName")
                and p["metadata"].get("deletionTimestamp") is None
                and not _finished(p)
            ]
            for key in running:
                out[key] = [(start, min(1.0, level / len(running))) for start, level in phases]
        return out

    # --- pods leaving ---

    def terminate(self, pod: JsonObj, grace: int | None) -> JsonObj:
        """Graceful deletion: unscheduled or finished pods go at once, others after their grace period."""
        now = self.store.clock()
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if not spec.get("nodeName") or _finished(pod):
            self.store.remove("pods", pod)
            return pod
        if grace is None:
            grace = int(spec.get("terminationGracePeriodSeconds", 30))
        grace = max(0, grace)
        deadline = now + grace
        if meta.get("deletionTimestamp") is not None:
            deadline = min(deadline, self.store.deadlines.get(_key(pod), deadline))
        meta["deletionTimestamp"] = rfc3339(deadline)
        meta["deletionGracePeriodSeconds"] = grace
        self.store.deadlines[_key(pod)] = deadline
        self.store.stamp(pod)
        names = ", ".join(str(c.get("name")) for c in spec.get("containers") or [])
        self.store.event(pod, "Normal", "Killing", f"Stopping container {names}", KUBELET)
        return pod

    def _reap(self) -> None:
        now = self.store.clock()
        for key, deadline in list(self.store.deadlines.items()):
            pod = self.store.objects["pods"].get(key)
            if pod is None:
                del self.store.deadlines[key]
            elif now >= deadline:
                self.store.remove("pods", pod)

    # --- disruption budgets ---

    def _budgets(self, pod: Mapping[str, Any]) -> list[JsonObj]:
        ns, _ = _key(pod)
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return [
            b
            for (b_ns, _), b in self.store.objects["poddisruptionbudgets"].items()
            if b_ns == ns and _selector_matches((b.get("spec") or {}).get("selector"), labels)
        ]

    def blocking_budget(self, pod: Mapping[str, Any]) -> str | None:
        """The name of a budget that allows no disruption of this pod now."""
        for b in self._budgets(pod):
            if int((b.get("status") or {}).get("disruptionsAllowed", 0)) <= 0:
                return str(b["metadata"]["name"])
        return None

    def spend_budget(self, pod: Mapping[str, Any]) -> None:
        for b in self._budgets(pod):
            status = b.setdefault("status", {})
            status["disruptionsAllowed"] = int(status.get("disruptionsAllowed", 0)) - 1
            self.store.stamp(b)

    # --- the scheduler ---

    def _fits(
        self, pod: Mapping[str, Any], node: Mapping[str, Any], used: Mapping[str, Decimal]
    ) -> str | None:
        """None when the pod fits on the node, else why not (the scheduler's words)."""
        spec, nspec = pod.get("spec") or {}, node.get("spec") or {}
        labels = (node.get("metadata") or {}).get("labels") or {}
        if nspec.get("unschedulable"):
            return "node(s) were unschedulable"
        if any(
            c.get("type") == "Ready" and c.get("status") == "False"
            for c in (node.get("status") or {}).get("conditions") or []
        ):
            return "node(s) were not ready"
        if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            return "node(s) didn't match Pod's node affinity/selector"
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for name, want in _requests(pod).items():
            if want <= 0:
                continue
            have = parse_quantity(str(allocatable.get(name, "0")))
            if used.get(name, Decimal(0)) + want > have:
                return f"Insufficient {name}"
        return None

    def _schedule(self) -> None:
        pods = self.store.pods()
        nodes = sorted(self.store.objects["nodes"].values(), key=lambda n: str(n["metadata"]["name"]))
        used: dict[str, dict[str, Decimal]] = {str(n["metadata"]["name"]): {} for n in nodes}
        for p in pods:
            where = (p.get("spec") or {}).get("nodeName")
            if where in used and not _finished(p):
                for k, v in _requests(p).items():
                    used[where][k] = used[where].get(k, Decimal(0)) + v
        pending = [
            p
            for p in pods
            if not (p.get("spec") or {}).get("nodeName")
            and p["metadata"].get("deletionTimestamp") is None
            and (p.get("status") or {}).get("phase", "Pending") == "Pending"
            and (p.get("spec") or {}).get("schedulerName", SCHEDULER) == SCHEDULER
        ]
        pending.sort(key=lambda p: (-int((p.get("spec") or {}).get("priority") or 0),
                                    str(p["metadata"].get("creationTimestamp", "")), _key(p)))  # fmt: skip
        for pod in pending:
            why: dict[str, int] = {}
            for node in nodes:
                name = str(node["metadata"]["name"])
                reason = self._fits(pod, node, used[name])
                if reason is None:
                    for k, v in _requests(pod).items():
                        used[name][k] = used[name].get(k, Decimal(0)) + v
                    self._bind(pod, name)
                    break
                why[reason] = why.get(reason, 0) + 1
            else:
                self._unschedulable(pod, len(nodes), why)

    def _bind(self, pod: JsonObj, node: str) -> None:
        now = rfc3339(self.store.clock())
        pod.setdefault("spec", {})["nodeName"] = node
        status = pod.setdefault("status", {})
        status.update(phase="Running", startTime=now)
        status.pop("nominatedNodeName", None)
        status["conditions"] = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        self.store.stamp(pod)
        ns, name = _key(pod)
        self.store.event(
            pod, "Normal", "Scheduled", f"Successfully assigned {ns}/{name} to {node}", SCHEDULER
        )

    def _unschedulable(self, pod: JsonObj, nodes: int, why: Mapping[str, int]) -> None:
        status = pod.setdefault("status", {})
        conditions = status.setdefault("conditions", [])
        if any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions):
            return
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(why.items()))
        message = (
            f"0/{nodes} nodes are available: {reasons}." if reasons else f"0/{nodes} nodes are available."
        )
        conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
        now = rfc3339(self.store.clock())
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": message, "lastTransitionTime": now})  # fmt: skip
        status["phase"] = "Pending"
        self.store.stamp(pod)
        self.store.event(pod, "Warning", "FailedScheduling", message, SCHEDULER)

    def step(self) -> None:
        self._reap()
        self._reconcile_workloads()
        KueueStandIn(
            self.store.objects,
            self.store.pods,
            self.store.add,
            self.store.stamp,
            lambda pod: self.terminate(pod, None),
            lambda: rfc3339(self.store.clock()),
        ).step()
        self._schedule()
        if self.devices:
            pods, loads = self.store.pods(), self.loads()
            for devices in self.devices:
                devices.sync(pods, loads)


@dataclass
class GpuDevices:
    """The GPUs of one scenario node, which container holds each, and the scenario file they make."""

    base: dict[str, Any]  # the scenario document as loaded
    out: Path
    gpu_resource: str = GPU_RESOURCE
    written: str = ""
    next_pid: int = FIRST_PID
    assigned: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # pod -> GPU indexes

    @classmethod
    def from_file(cls, scenario: Path, out: Path, gpu_resource: str = GPU_RESOURCE) -> GpuDevices:
        doc = yaml.safe_load(scenario.read_text(encoding="utf-8"))
        parse_scenario(copy.deepcopy(doc))  # fail now, not at the first write
        return cls(doc, out, gpu_resource)

    @property
    def node(self) -> str:
        return str(self.base.get("node", "mock-node"))

    def _gpus(self) -> list[dict[str, Any]]:
        return list(self.base.get("gpus") or [])

    def sync(
        self,
        pods: Iterable[Mapping[str, Any]],
        loads: Mapping[tuple[str, str], list[tuple[float, float]]] | None = None,
    ) -> None:
        """Follow the node's pods: what gone or terminating pods ran or held goes, new pods get GPUs, and
        pods sharing a Deployment's load run at their share of it (`loads`, Cluster.loads)."""
        on_node = {
            _key(p): p
            for p in pods
            if (p.get("spec") or {}).get("nodeName") == self.node and not _finished(p)
        }
        for gpu in self._gpus():
            gpu["allocations"] = [
                a for a in gpu.get("allocations") or [] if (a["namespace"], a["pod"]) in on_node
            ]
            gpu["processes"] = [
                proc
                for proc in gpu.get("processes") or []
                if not (owner := proc.get("owner") or {}).get("pod")
                or (
                    (owner["namespace"], owner["pod"]) in on_node
                    and on_node[(owner["namespace"], owner["pod"])]["metadata"].get("deletionTimestamp")
                    is None
                )
            ]
        self.assigned = {k: v for k, v in self.assigned.items() if k in on_node}
        held = {(a["namespace"], a["pod"]) for g in self._gpus() for a in g.get("allocations") or []}
        for key, pod in sorted(on_node.items()):
            if key not in held and pod["metadata"].get("deletionTimestamp") is None:
                self._allocate(pod)
        for key, phases in (loads or {}).items():
            if key in on_node:
                self._share(key, on_node[key], phases)
        self._write()

    def _share(self, key: tuple[str, str], pod: Mapping[str, Any], phases: list[tuple[float, float]]) -> None:
        """The pod's GPUs each run one process at its share of its Deployment's load."""
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        for gpu in self._gpus():
            owners = [a for a in gpu.get("allocations") or [] if (a["namespace"], a["pod"]) == key]
            if not owners:
                continue
            old = [p for p in gpu.get("processes") or [] if (p.get("owner") or {}).get("pod") == key[1]]
            memory = annotations.get(MEMORY_ANNOTATION) or (
                old[0]["phases"][0].get("memory", "1Gi") if old and old[0].get("phases") else "1Gi"
            )
            if old:
                pid = int(old[0]["pid"])
            else:
                pid, self.next_pid = self.next_pid, self.next_pid + 1
            gpu["processes"] = [
                p for p in gpu.get("processes") or [] if (p.get("owner") or {}).get("pod") != key[1]
            ] + [
                {"pid": pid, "owner": dict(owners[0]),
                 "phases": [{"from": start, "utilization": round(level, 4), "memory": memory}
                            for start, level in phases]}
            ]  # fmt: skip

    def _allocate(self, pod: Mapping[str, Any]) -> None:
        ns, name = _key(pod)
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        utilization = float(annotations.get(UTILIZATION_ANNOTATION, 0))
        memory = annotations.get(MEMORY_ANNOTATION, "1Gi")
        free = [g for g in self._gpus() if not g.get("allocations") and not g.get("mig")]
        for container in (pod.get("spec") or {}).get("containers") or []:
            res = container.get("resources") or {}
            want = int(
                parse_quantity(
                    str(
                        {**(res.get("limits") or {}), **(res.get("requests") or {})}.get(self.gpu_resource, 0)
                    )
                )
            )
            if want > len(free):
                log.warning(
                    "%s/%s wants %d GPUs on %s, %d free: not allocated", ns, name, want, self.node, len(free)
                )
                return
            owner = {"namespace": ns, "pod": name, "container": str(container.get("name"))}
            for gpu in free[:want]:
                gpu["allocations"] = [dict(owner)]
                if utilization > 0:
                    gpu["processes"] = [
                        {"pid": self.next_pid, "owner": dict(owner),
                         "phases": [{"from": 0, "utilization": utilization, "memory": memory}]}
                    ]  # fmt: skip
                    self.next_pid += 1
                self.assigned.setdefault((ns, name), []).append(int(gpu["index"]))
            free = free[want:]

    def _write(self) -> None:
        text = yaml.safe_dump(self.base, sort_keys=False)
        if text == self.written:
            return
        parse_scenario(yaml.safe_load(text))  # never hand the exporter a file it would reject
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.out)
        self.written = text
