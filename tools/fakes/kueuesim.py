"""A stand-in for Kueue's controller in the fake cluster (tools/fakes/fakesim.py runs it every step): what the
demo's Kueue story needs of Kueue, written from shared/reference/kueue.md (sections 2, 5 and 7.2), not
from Kueue's code. docs/demo.md says what it does and does not do.

- Deactivation: an admitted Workload set `spec.active: false` gets `Evicted=True` (reason `Deactivated`),
  its job's pods are deleted gracefully, and once they are gone its admission is cleared
  (`QuotaReserved=False`, `Admitted=False`) and `Requeued=False` (reason `Deactivated`): its quota is free,
  and it is not requeued.
- Admission: a waiting Workload (active, no `QuotaReserved=True`) of a LocalQueue's ClusterQueue is admitted
  when the queue's unused nominal quota of every resource it needs covers it (highest priority first, then
  oldest): `QuotaReserved` and `Admitted` True, `status.admission` with the first flavor, and its pods made
  from its podSets' templates, owned by its job (its ownerReference), Pending for the scheduler.
- A ClusterQueue's `status.flavorsUsage` is the sum of its admitted Workloads' usage, kept up to date.
Not done: preemption of any kind (so no priority boost), borrowing and cohorts, admission checks, partial
admission, `PodsReady`, requeueing, events, fair sharing; pods are not gated or suspended, they simply do
not exist before admission.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from steward_common.quantity import parse_quantity

JsonObj = dict[str, Any]
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PODSET_LABEL = "kueue.x-k8s.io/podset"


def _conditions(wl: JsonObj) -> dict[str, JsonObj]:
    return {str(c.get("type")): c for c in (wl.get("status") or {}).get("conditions") or []}


def _true(wl: JsonObj, kind: str) -> bool:
    return _conditions(wl).get(kind, {}).get("status") == "True"


def _set(wl: JsonObj, kind: str, status: bool, reason: str, message: str, now: str) -> None:
    conditions = wl.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c.get("type") != kind]
    conditions.append({"type": kind, "status": "True" if status else "False", "reason": reason,
                       "message": message, "lastTransitionTime": now})  # fmt: skip


def _job_uids(wl: JsonObj) -> set[str]:
    meta = wl.get("metadata") or {}
    uids = {str(r.get("uid")) for r in meta.get("ownerReferences") or [] if r.get("uid")}
    label = (meta.get("labels") or {}).get(JOB_UID_LABEL)
    return uids | ({str(label)} if label else set())


def _need(wl: JsonObj) -> dict[str, Decimal]:
    """count x each container's requests (limits where no request), per resource, over the podSets."""
    total: dict[str, Decimal] = {}
    for podset in (wl.get("spec") or {}).get("podSets") or []:
        count = int(podset.get("count", 1))
        for container in ((podset.get("template") or {}).get("spec") or {}).get("containers") or []:
            res = container.get("resources") or {}
            for name, value in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items():
                total[name] = total.get(name, Decimal(0)) + count * parse_quantity(str(value))
    return total


def _nominal(cq: JsonObj) -> tuple[str, dict[str, Decimal]]:
    """The first flavor's name and the nominal quota per resource, summed over flavors."""
    flavor, quota = "default", dict[str, Decimal]()
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for f in group.get("flavors") or []:
            flavor = flavor if quota else str(f.get("name") or flavor)
            for r in f.get("resources") or []:
                quota[str(r["name"])] = quota.get(str(r["name"]), Decimal(0)) + parse_quantity(
                    str(r.get("nominalQuota", 0))
                )
    return flavor, quota


def _usage(wl: JsonObj) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for assignment in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        for name, value in (assignment.get("resourceUsage") or {}).items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(str(value))
    return total


def _text(amount: Decimal) -> str:
    return str(int(amount)) if amount == amount.to_integral_value() else str(amount)


class KueueStandIn:
    """Kueue's part of a step, on the fake's store (`objects`, `pods`, `add`, `stamp`) and its kubelet
    (`terminate`)."""

    def __init__(
        self,
        objects: Mapping[str, dict[tuple[str, str], JsonObj]],
        pods: Callable[[], list[JsonObj]],
        add: Callable[[JsonObj], JsonObj],
        stamp: Callable[[JsonObj], JsonObj],
        terminate: Callable[[JsonObj], object],
        now: Callable[[], str],
    ) -> None:
        self.objects, self.pods, self.add, self.stamp, self.terminate, self.now = (
            objects, pods, add, stamp, terminate, now
        )  # fmt: skip

    def step(self) -> None:
        workloads = self.objects.get("workloads") or {}
        if not workloads:
            return
        pods = self.pods()
        for wl in workloads.values():
            self._deactivate(wl, pods)
        self._admit(list(workloads.values()))
        self._usage(list(workloads.values()))

    def _deactivate(self, wl: JsonObj, pods: list[JsonObj]) -> None:
        if not _true(wl, "Admitted") or (wl.get("spec") or {}).get("active") is not False:
            return
        now, uids = self.now(), _job_uids(wl)
        mine = [
            p for p in pods if uids & {str(r.get("uid")) for r in p["metadata"].get("ownerReferences") or []}
        ]
        if not _true(wl, "Evicted"):
            _set(wl, "Evicted", True, "Deactivated", "The workload is deactivated", now)
            for pod in mine:
                if pod["metadata"].get("deletionTimestamp") is None:
                    self.terminate(pod)
            self.stamp(wl)
        if not mine:  # the job stopped: its quota goes back
            _set(wl, "QuotaReserved", False, "Pending", "The workload is deactivated", now)
            _set(wl, "Admitted", False, "NoReservation", "The workload has no reservation", now)
            _set(wl, "Requeued", False, "Deactivated", "The workload is deactivated", now)
            wl["status"].pop("admission", None)
            self.stamp(wl)

    def _admit(self, workloads: list[JsonObj]) -> None:
        queues = self.objects.get("clusterqueues") or {}
        local = self.objects.get("localqueues") or {}
        used: dict[str, dict[str, Decimal]] = {}
        for wl in workloads:
            name = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
            if name:
                for resource, amount in _usage(wl).items():
                    used.setdefault(str(name), {})[resource] = (
                        used.get(str(name), {}).get(resource, 0) + amount
                    )
        waiting = [
            wl for wl in workloads
            if (wl.get("spec") or {}).get("active") is not False
            and not _true(wl, "QuotaReserved") and not _true(wl, "Finished")
        ]  # fmt: skip
        waiting.sort(key=lambda w: (-int((w.get("spec") or {}).get("priority") or 0),
                                    str(w["metadata"].get("creationTimestamp", ""))))  # fmt: skip
        for wl in waiting:
            meta = wl["metadata"]
            lq = local.get((str(meta.get("namespace")), str((wl.get("spec") or {}).get("queueName"))))
            cq_name = str(((lq or {}).get("spec") or {}).get("clusterQueue") or "")
            cq = queues.get(("", cq_name))
            if cq is None:
                continue
            flavor, nominal = _nominal(cq)
            need, mine = _need(wl), used.setdefault(cq_name, {})
            if any(
                amount > nominal.get(r, Decimal(0)) - mine.get(r, Decimal(0)) for r, amount in need.items()
            ):
                continue
            for resource, amount in need.items():
                mine[resource] = mine.get(resource, Decimal(0)) + amount
            self._admitted(wl, cq_name, flavor)

    def _admitted(self, wl: JsonObj, cq_name: str, flavor: str) -> None:
        now = self.now()
        _set(wl, "QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq_name}", now)
        _set(wl, "Admitted", True, "Admitted", "The workload is admitted", now)
        assignments = []
        meta = wl["metadata"]
        owners = [r for r in meta.get("ownerReferences") or [] if r.get("uid")]
        for podset in (wl.get("spec") or {}).get("podSets") or []:
            one = {"spec": {"podSets": [podset]}}
            usage = {name: _text(v) for name, v in _need(one).items()}
            assignments.append({"name": podset.get("name", "main"), "count": int(podset.get("count", 1)),
                                "flavors": dict.fromkeys(usage, flavor), "resourceUsage": usage})  # fmt: skip
            template = copy.deepcopy(podset.get("template") or {})
            for i in range(int(podset.get("count", 1))):
                pod_meta = template.get("metadata") or {}
                labels = {**(pod_meta.get("labels") or {}), PODSET_LABEL: podset.get("name", "main")}
                self.add({
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{meta['name']}-{podset.get('name', 'main')}-{i}",
                        "namespace": meta.get("namespace"),
                        "labels": labels,
                        "annotations": dict(pod_meta.get("annotations") or {}),
                        "ownerReferences": copy.deepcopy(owners),
                    },
                    "spec": copy.deepcopy(template.get("spec") or {}),
                    "status": {"phase": "Pending"},
                })  # fmt: skip
        wl["status"]["admission"] = {"clusterQueue": cq_name, "podSetAssignments": assignments}
        self.stamp(wl)

    def _usage(self, workloads: list[JsonObj]) -> None:
        for (_, name), cq in (self.objects.get("clusterqueues") or {}).items():
            flavor, nominal = _nominal(cq)
            total: dict[str, Decimal] = dict.fromkeys(nominal, Decimal(0))
            for wl in workloads:
                if ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") == name:
                    for resource, amount in _usage(wl).items():
                        total[resource] = total.get(resource, Decimal(0)) + amount
            usage = [{"name": flavor, "resources": [{"name": r, "total": _text(v), "borrowed": "0"}
                                                     for r, v in sorted(total.items())]}]  # fmt: skip
            status = cq.setdefault("status", {})
            if status.get("flavorsUsage") != usage:
                status["flavorsUsage"] = usage
                self.stamp(cq)
