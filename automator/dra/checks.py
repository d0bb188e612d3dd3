"""The DRA capacity checks: what the scheduler promised (ResourceClaims) against what the drivers publish
(ResourceSlices) and what containers measurably use. Pure: records in, a Report out.

One pass over the claims' allocations builds per-device totals; every check then reads those totals or
indexes, so the cost grows linearly with devices + allocations + pods + usage entries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal

from automator.dra.model import (
    INVALID_CONSUMPTION,
    MIXED_MODE,
    ORPHANED_CLAIM,
    OVERCOMMITTED,
    SHARED,
    UNKNOWN_DEVICE,
    USAGE_OVER_CLAIM,
    Allocation,
    Claim,
    Device,
    DeviceId,
    DeviceReport,
    Finding,
    Pod,
    Records,
    Report,
)
from automator.dra.policy import consumption_problems, fmt
from automator.ports import ContainerUsage
from steward_common.gc_pause import gc_paused

MEMORY = "memory"  # the capacity measured usage is compared with (HAMi's name; bytes)
_ZERO = Decimal(0)
_NO_CLAIMS: dict[str, Claim] = {}
_NO_ALLOCATIONS: list[tuple[Claim, Allocation]] = []


class _Checker:
    def __init__(self, records: Records, usage: Iterable[ContainerUsage]) -> None:
        self.records = records
        self.usage = usage
        self.findings: list[Finding] = list(records.findings)
        # device -> [(claim, allocation)]
        self.on_device: dict[DeviceId, list[tuple[Claim, Allocation]]] = defaultdict(list)
        # pod key -> claims reserved for it or named by its spec/status
        self.pod_claims: dict[str, dict[str, Claim]] = {}
        self.claims_by_key = {c.key: c for c in records.claims}
        # (capacity map, consumed map) -> what the policies do not allow; both maps are held by the records
        # for the whole check, so their ids stay unique
        self._judged: dict[tuple[int, int], list[tuple[str, Decimal, str]]] = {}

    def consumer(self, claim: Claim) -> tuple[str | None, str | None]:
        """(pod, node) of a claim's first pod consumer, for findings."""
        for ref in claim.pods:
            key = f"{claim.namespace}/{ref.name}"
            pod = self.records.pods.get(key)
            return key, pod.node if pod is not None else None
        return None, None

    def add(
        self,
        kind: str,
        node: str | None,
        device: object,
        claim: str | None,
        pod: str | None,
        message: str,
        key: str | None = None,
    ) -> None:
        self.findings.append(
            Finding(kind, node, None if device is None else str(device), claim, pod, message, key)
        )

    # --- claims: unknown devices, invalid consumption, orphans ------------------------------------------

    def claims(self) -> None:
        devices, on_device, judged = self.records.devices, self.on_device, self._judged
        pods, pod_claims = self.records.pods, self.pod_claims
        for claim in self.records.claims:
            # the claim under each pod it is reserved for; live: one of those pods exists
            live = False
            for ref in claim.pods:
                key = f"{claim.namespace}/{ref.name}"
                by_pod = pod_claims.get(key)
                if by_pod is None:
                    pod_claims[key] = {claim.name: claim}
                else:
                    by_pod[claim.name] = claim
                if not live:
                    pod = pods.get(key)
                    # a pod of the same name with another uid is a new pod, not the consumer
                    live = pod is not None and (ref.uid is None or pod.uid is None or ref.uid == pod.uid)
            if not claim.allocated:
                continue
            for alloc in claim.allocations:
                device = devices.get(alloc.device)
                if device is None:
                    self._unknown_device(claim, alloc)
                    continue
                on_device[alloc.device].append((claim, alloc))
                # Devices of one model share one capacity map and claims of one size one consumed map
                # (load_slices.py, load_claims.py): each distinct pair is judged once.
                pair = (id(device.capacity), id(alloc.consumed))
                problems = judged.get(pair)
                if problems is None:
                    problems = judged[pair] = consumption_problems(alloc.consumed, device.capacity)
                if problems:
                    self._invalid(claim, device, problems)
            if not live and not claim.other_consumers:
                self._orphaned(claim)

    def _invalid(self, claim: Claim, device: Device, problems: list[tuple[str, Decimal, str]]) -> None:
        for name, amount, problem in problems:
            self.add(
                INVALID_CONSUMPTION,
                device.node,
                device.id,
                claim.key,
                self.consumer(claim)[0],
                f"ResourceClaim {claim.key} consumes {name} {fmt(amount)} of device {device.id}, "
                f"which {problem}",
            )

    def _unknown_device(self, claim: Claim, alloc: Allocation) -> None:
        pod_key, pod_node = self.consumer(claim)
        self.add(
            UNKNOWN_DEVICE,
            pod_node,
            alloc.device,
            claim.key,
            pod_key,
            f"ResourceClaim {claim.key} request {alloc.request or '?'} is allocated device "
            f"{alloc.device}, which no current ResourceSlice publishes",
        )

    def _orphaned(self, claim: Claim) -> None:
        pod_key, pod_node = self.consumer(claim)
        gone = ", ".join(f"{claim.namespace}/{r.name}" for r in claim.pods) or "no consumer at all"
        self.add(
            ORPHANED_CLAIM,
            pod_node,
            claim.allocations[0].device if len(claim.allocations) == 1 else None,
            claim.key,
            pod_key,
            f"ResourceClaim {claim.key} is allocated ({len(claim.allocations)} device(s)) but "
            f"reserved for no existing pod (reservedFor: {gone}); its capacity is held for nothing",
        )

    # --- devices: sharing and overcommitment, and the per-device totals ------------------------------------

    def devices(self) -> list[DeviceReport]:
        reports: list[DeviceReport] = []
        # capacity values per (shared) capacity map: one dict for every device of a model, never changed
        values: dict[int, dict[str, Decimal]] = {}
        for device in self.records.devices.values():
            allocs = self.on_device.get(device.id, _NO_ALLOCATIONS)
            if not device.allow_multiple and len(allocs) > 1:
                self._shared(device, allocs)
            capacity = values.get(id(device.capacity))
            if capacity is None:
                capacity = values[id(device.capacity)] = {
                    n: c.value for n, c in device.capacity.items() if c.value is not None
                }
            consumed = dict.fromkeys(capacity, _ZERO)
            for _, alloc in allocs:
                for name, amount in alloc.consumed.items():
                    if name in consumed:
                        consumed[name] += amount
            for name, total in consumed.items():
                if total > capacity[name]:
                    self._overcommitted(device, allocs, name, total, capacity[name])
            if not device.allow_multiple and any(not a.has_consumed for _, a in allocs):
                consumed = dict(capacity)  # an exclusive allocation holds the whole device
            reports.append(DeviceReport(device.node, device.id, capacity, consumed))
        return reports

    def _shared(self, device: Device, allocs: list[tuple[Claim, Allocation]]) -> None:
        claims = sorted({claim.key for claim, _ in allocs})
        for key in claims[1:]:
            self.add(
                SHARED,
                device.node,
                device.id,
                key,
                self.consumer(self.claims_by_key[key])[0],
                f"device {device.id} does not allow multiple allocations but is allocated to "
                f"{len(claims)} claims: {', '.join(claims)}",
            )

    def _overcommitted(
        self, device: Device, allocs: list[tuple[Claim, Allocation]], name: str, total: Decimal, cap: Decimal
    ) -> None:
        users = sorted(
            f"{claim.key} {fmt(alloc.consumed[name])}" for claim, alloc in allocs if name in alloc.consumed
        )
        self.add(
            OVERCOMMITTED,
            device.node,
            device.id,
            None,
            None,
            f"device {device.id}: {name} consumed {fmt(total)} > capacity {fmt(cap)} "
            f"({len(users)} allocations: {'; '.join(users)})",
        )

    # --- usage against claims --------------------------------------------------------------------------

    def claimed_memory(
        self, pod: Pod | None, pod_key: str, container: str, device: DeviceId
    ) -> tuple[list[Claim], Decimal | None]:
        """The pod's claims that hold `device` for `container`, and the memory they consumed on it.

        None memory: the allocation holds the device exclusively or names no memory (nothing to compare).
        """
        claims = self.pod_claims.get(pod_key) or _NO_CLAIMS
        refs = pod.containers.get(container) if pod is not None else None
        selected: list[tuple[Claim, str | None]] = []
        if refs and pod is not None:
            claim_names = pod.claim_names
            for ref in refs:
                name = claim_names.get(ref.claim)
                if not name:
                    continue
                claim = claims.get(name) or self.claims_by_key.get(f"{pod.namespace}/{name}")
                if claim is not None:
                    selected.append((claim, ref.request))
        if not selected:  # no container references resolved: the pod's claims, all of them
            selected = [(c, None) for c in claims.values()]
            if pod is not None:
                for name in pod.claim_names.values():
                    claim = self.claims_by_key.get(f"{pod.namespace}/{name}")
                    if claim is not None and claim.name not in claims:
                        selected.append((claim, None))
        holding: list[Claim] = []
        memory: Decimal | None = _ZERO
        for claim, request in selected:
            for alloc in claim.allocations:
                if alloc.device != device:
                    continue
                if (
                    request is not None
                    and alloc.request != request
                    and not alloc.request.startswith(request + "/")
                ):
                    continue
                if claim not in holding:
                    holding.append(claim)
                amount = alloc.consumed.get(MEMORY)
                if amount is None:
                    memory = None
                elif memory is not None:
                    memory += amount
        if not holding and not selected:
            return [], None  # not a DRA pod as far as the records tell: nothing to compare with
        return holding, memory

    def usage_over_claim(self) -> None:
        by_uuid = {d.uuid: d for d in self.records.devices.values() if d.uuid is not None}
        pods, pod_claims, claims_by_key = self.records.pods, self.pod_claims, self.claims_by_key
        for use in self.usage:
            device = by_uuid.get(use.gpu_uuid)
            used = use.memory_bytes
            if device is None or used is None:
                continue  # not a DRA device (a device-plugin GPU), or usage unknown
            pod_key = f"{use.namespace}/{use.pod}"
            pod = pods.get(pod_key)
            holding: list[Claim] | None = None
            # The usual case inline, as claimed_memory finds it: the container names one claim of its pod,
            # which holds this one device (for the request named, if any).
            refs = pod.containers.get(use.container) if pod is not None else None
            if refs is not None and len(refs) == 1:
                assert pod is not None
                ref = refs[0]
                name = pod.claim_names.get(ref.claim)
                if name:
                    claim = (pod_claims.get(pod_key) or _NO_CLAIMS).get(name) or claims_by_key.get(
                        f"{pod.namespace}/{name}"
                    )
                    if claim is not None and len(claim.allocations) == 1:
                        alloc, request = claim.allocations[0], ref.request
                        if alloc.device == device.id and (
                            request is None
                            or alloc.request == request
                            or alloc.request.startswith(request + "/")
                        ):
                            amount = alloc.consumed.get(MEMORY)
                            holding, claimed = [claim], None if amount is None else _ZERO + amount
            if holding is None:
                holding, claimed = self.claimed_memory(pod, pod_key, use.container, device.id)
            if claimed is not None and used > claimed:
                self._usage_over(use, used, device, pod_key, holding, claimed)

    def _usage_over(
        self,
        use: ContainerUsage,
        used: Decimal,
        device: Device,
        pod_key: str,
        holding: list[Claim],
        claimed: Decimal,
    ) -> None:
        if holding:
            claim: str | None = ", ".join(c.key for c in holding)
            how = f"its claim {claim} consumed {fmt(claimed)} of memory on that device"
        else:
            claim = None
            how = "none of its pod's claims is allocated that device"
        self.add(
            USAGE_OVER_CLAIM,
            device.node,
            device.id,
            claim,
            pod_key,
            f"container {pod_key}/{use.container} uses GPU memory {fmt(used)} on device "
            f"{device.id} ({use.gpu_uuid}), but {how}: enforcement is failing or bypassed",
            key=f"{pod_key}/{use.container}",
        )

    # --- nodes -----------------------------------------------------------------------------------------

    def mixed_mode(self) -> None:
        dra_nodes: dict[str, int] = defaultdict(int)
        for device in self.records.devices.values():
            if device.gpu and device.node is not None:
                dra_nodes[device.node] += 1
        for name, count in dra_nodes.items():
            node = self.records.nodes.get(name)
            if node is None or not node.device_plugin_gpus:
                continue
            plugin = ", ".join(f"{r}: {fmt(v)}" for r, v in sorted(node.device_plugin_gpus.items()))
            self.add(
                MIXED_MODE,
                name,
                None,
                None,
                None,
                f"node {name} publishes {count} DRA GPU device(s) and also has device-plugin GPU resources "
                f"allocatable ({plugin}): two schedulers each believe they own the same GPUs",
            )


def check(records: Records, usage: Iterable[ContainerUsage] = ()) -> Report:
    """Run every check; findings sorted by severity, kind, node, device, claim."""
    checker = _Checker(records, usage)
    with gc_paused():
        checker.claims()
        devices = checker.devices()
        checker.usage_over_claim()
        checker.mixed_mode()
    devices.sort(key=lambda d: (d.node or "", str(d.device)))
    return Report(sorted(checker.findings, key=Finding.sort_key), devices)
