"""ResourceClaims -> Claim records (automator/dra/load.py's claim stage). Pure.

Most claims have the usual shape: every field present with its type, consumed amounts as quantity strings.
`ClaimLoader.claim` reads those with inline type checks, and keeps one parsed `consumed` map per distinct
consumedCapacity (thousands of claims consume the same shares), which the checks judge once per device
model. Anything else goes through `_read_claim`, which reads field by field and turns what does not parse
into `unparsable` findings: both make the same records from what they both accept.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from automator.dra.fields import (
    Unparsable,
    item,
    list_field,
    map_field,
    new,
    parse_text,
    quantity,
    str_field,
    unparsable_finding,
)
from automator.dra.model import Allocation, Claim, DeviceId, Finding, PodConsumer

_MAX_CONSUMED = 4096  # distinct consumedCapacity maps remembered per load
NOTHING_CONSUMED: dict[str, Decimal] = {}  # no consumedCapacity: one map for all (never changed)


class ClaimLoader:
    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        # one DeviceId per device named by allocations (thousands of claims name the same devices)
        self.device_ids: dict[tuple[str, str, str], DeviceId] = {}
        # consumedCapacity's (name, text) pairs -> the parsed map, shared by the claims (never changed)
        self.consumed: dict[tuple[tuple[str, str], ...], dict[str, Decimal]] = {}

    def claim(self, obj: Mapping[str, Any], namespace: str, name: str) -> Claim:
        claim = self._usual_claim(obj, namespace, name)
        return claim if claim is not None else self._read_claim(obj, namespace, name)

    def device_id(self, driver: str, pool: str, device: str) -> DeviceId:
        key = (driver, pool, device)
        device_id = self.device_ids.get(key)
        if device_id is None:
            device_id = self.device_ids[key] = DeviceId(driver, pool, device)
        return device_id

    # --- the usual shape -------------------------------------------------------------------------------

    def _usual_claim(self, obj: Mapping[str, Any], namespace: str, name: str) -> Claim | None:
        """The claim when every field it reads has the usual shape and parses; None for _read_claim.

        One function with inline type checks (no call per field or per result): most of a large check's
        claims take this path. It records no finding, so giving up anywhere changes nothing."""
        status = obj.get("status")
        if type(status) is not dict:
            return None
        allocation, reserved = status.get("allocation"), status.get("reservedFor")
        claim = Claim(namespace, name, allocation is not None)
        if allocation is not None:
            devices = allocation.get("devices") if type(allocation) is dict else None
            results = devices.get("results") if type(devices) is dict else None
            if type(results) is not list or not self._usual_results(results, claim.allocations):
                return None
        if reserved is not None:
            if type(reserved) is not list:
                return None
            for ref in reserved:
                if type(ref) is not dict:
                    return None
                resource, consumer, uid = ref.get("resource"), ref.get("name"), ref.get("uid")
                if not (
                    type(resource) is str
                    and resource
                    and type(consumer) is str
                    and consumer
                    and type(uid) is str
                    and uid
                ):
                    return None
                if resource == "pods" and not ref.get("apiGroup"):
                    claim.pods.append(new(PodConsumer, (consumer, uid)))
                else:
                    claim.other_consumers += 1
        return claim

    def _usual_results(self, results: list[Any], allocations: list[Allocation]) -> bool:
        """`status.allocation.devices.results` of the usual shape into `allocations`; False otherwise."""
        ids, shared = self.device_ids, self.consumed
        for result in results:
            if type(result) is not dict:
                return False
            driver, pool, device = result.get("driver"), result.get("pool"), result.get("device")
            request, raw = result.get("request", ""), result.get("consumedCapacity")
            if not (
                type(driver) is str
                and driver
                and type(pool) is str
                and pool
                and type(device) is str
                and device
                and type(request) is str
            ):
                return False
            if raw is None:
                consumed: dict[str, Decimal] | None = NOTHING_CONSUMED
            elif type(raw) is dict:
                try:
                    consumed = shared.get(tuple(raw.items()))
                except TypeError:  # an unhashable amount (a map, a list): not a quantity
                    return False
                if consumed is None:
                    consumed = self.usual_consumed(raw)
                    if consumed is None:
                        return False
            else:
                return False
            key = (driver, pool, device)
            device_id = ids.get(key)
            if device_id is None:
                device_id = ids[key] = DeviceId(driver, pool, device)
            allocations.append(new(Allocation, (request, device_id, consumed, raw is not None)))
        return True

    def usual_consumed(self, raw: Any) -> dict[str, Decimal] | None:
        """The parsed consumedCapacity, shared with every identical one; None unless all are strings."""
        if raw is None:
            return {}
        if type(raw) is not dict:
            return None
        key = tuple(raw.items())
        try:
            consumed = self.consumed.get(key)
        except TypeError:  # an unhashable amount (a map, a list): not a quantity
            return None
        if consumed is not None:
            return consumed
        consumed = {}
        for cap_name, amount in key:
            if type(cap_name) is not str or type(amount) is not str:
                return None
            try:
                # negative amounts parse here and are judged by the invalid-consumption check
                consumed[cap_name] = parse_text(amount, True)
            except ValueError:
                return None
        if len(self.consumed) < _MAX_CONSUMED:
            self.consumed[key] = consumed
        return consumed

    # --- field by field, with findings -----------------------------------------------------------------

    def _read_claim(self, obj: Mapping[str, Any], namespace: str, name: str) -> Claim:
        claim = Claim(namespace, name, allocated=False)
        key = claim.key
        label = f"ResourceClaim {key}"
        try:
            status = map_field(obj, "status")
            allocation = status.get("allocation")
            if allocation is not None:
                claim.allocated = True
                try:
                    devices = map_field(item(allocation), "devices", ".")
                    results = list_field(devices, "results", ".devices.")
                except Unparsable as exc:
                    raise exc.under("status.allocation") from None
            else:
                results = []
            reserved = list_field(status, "reservedFor", "status.")
        except Unparsable as exc:
            self.findings.append(unparsable_finding(exc, label, claim=key))
            return claim
        for i, raw in enumerate(results):
            alloc = self._read_allocation(raw, i, label, key)
            if alloc is not None:
                claim.allocations.append(alloc)
        for i, raw in enumerate(reserved):
            try:
                ref = item(raw)
                resource, consumer = str_field(ref, "resource"), str_field(ref, "name")
                uid = str_field(ref, "uid", required=False)
            except Unparsable as exc:
                self.findings.append(
                    unparsable_finding(exc.under(f"status.reservedFor[{i}]."), label, claim=key)
                )
                claim.other_consumers += 1  # unreadable consumer: assume it exists, claim it is not orphaned
                continue
            assert consumer is not None
            if resource == "pods" and not ref.get("apiGroup"):
                claim.pods.append(PodConsumer(consumer, uid))
            else:
                claim.other_consumers += 1
        return claim

    def _read_allocation(self, raw: Any, index: int, label: str, claim: str) -> Allocation | None:
        """One `status.allocation.devices.results[]` entry; None when it names no device."""
        try:
            result = item(raw)
            driver, pool = str_field(result, "driver"), str_field(result, "pool")
            device = str_field(result, "device")
            request = str_field(result, "request", required=False) or ""
            consumed_raw = result.get("consumedCapacity")
            consumed_map = map_field(result, "consumedCapacity")
        except Unparsable as exc:
            path = f"status.allocation.devices.results[{index}]."
            self.findings.append(unparsable_finding(exc.under(path), label, claim=claim))
            return None
        assert driver is not None and pool is not None and device is not None
        device_id = self.device_id(driver, pool, device)
        consumed: dict[str, Decimal] = {}
        for cap_name, amount in consumed_map.items():
            try:
                # negative amounts parse here and are judged by the invalid-consumption check
                consumed[str(cap_name)] = quantity(amount, "", negative=True)
            except Unparsable as exc:
                path = f"status.allocation.devices.results[{index}].consumedCapacity.{cap_name}"
                self.findings.append(
                    unparsable_finding(exc.under(path), label, device=str(device_id), claim=claim)
                )
        return Allocation(request, device_id, consumed, consumed_raw is not None)
