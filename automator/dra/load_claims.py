"""ResourceClaims -> Claim records (automator/dra/load.py's claim stage). Pure.

One reader, field by field: each field is checked inline for its usual type and read by the helpers of
fields.py otherwise, which name the field that does not parse; that becomes an `unparsable` finding and
only that field (a result, a consumer, an amount) is left out. Claims of one size consume the same shares:
one parsed `consumed` map is kept per distinct consumedCapacity, and the checks judge each (capacity map,
consumed map) pair once (checks.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from automator.dra.fields import new, quantity, unparsable_finding
from automator.dra.model import Allocation, Claim, DeviceId, Finding, PodConsumer
from automator.objects.fields import item, list_field, map_field, str_field
from automator.objects.resources import FieldError

_MAX_CONSUMED = 4096  # distinct consumedCapacity maps remembered per load
NOTHING_CONSUMED: dict[str, Decimal] = {}  # no consumedCapacity: one map for all (never changed)


class ClaimLoader:
    def __init__(self, findings: list[Finding]) -> None:
        self.findings = findings
        # one DeviceId per device named by allocations (the claims sharing a device name the same one)
        self.device_ids: dict[tuple[str, str, str], DeviceId] = {}
        # consumedCapacity's (name, text) pairs -> the parsed map, shared by the claims (never changed)
        self.consumed: dict[tuple[tuple[Any, Any], ...], dict[str, Decimal]] = {}

    def claim(self, obj: Mapping[str, Any], namespace: str, name: str) -> Claim:
        claim = Claim(namespace, name, allocated=False)
        key = claim.key
        label = f"ResourceClaim {key}"
        try:
            status = obj.get("status")
            if type(status) is not dict:
                status = map_field(obj, "status")
            allocation = status.get("allocation")
            results: Any = ()
            if allocation is not None:
                claim.allocated = True
                devices = allocation.get("devices") if type(allocation) is dict else None
                results = devices.get("results") if type(devices) is dict else None
                if type(results) is not list:
                    try:
                        devices = map_field(item(allocation), "devices", ".")
                        results = list_field(devices, "results", ".devices.")
                    except FieldError as exc:
                        raise exc.found.under("status.allocation").error() from None
            reserved = status.get("reservedFor")
            if reserved is not None and type(reserved) is not list:
                reserved = list_field(status, "reservedFor", "status.")
        except FieldError as exc:
            self.findings.append(unparsable_finding(exc.found, label, claim=key))
            return claim
        allocations = claim.allocations
        for i, raw in enumerate(results):
            alloc = self._allocation(raw, i, label, key)
            if alloc is not None:
                allocations.append(alloc)
        for i, raw in enumerate(reserved or ()):
            if type(raw) is dict:
                resource, consumer, uid = raw.get("resource"), raw.get("name"), raw.get("uid")
            else:
                resource = consumer = uid = None
            if not (type(resource) is str and resource and type(consumer) is str and consumer) or not (
                uid is None or type(uid) is str
            ):
                try:
                    ref = item(raw)
                    resource, consumer = str_field(ref, "resource"), str_field(ref, "name")
                    uid = str_field(ref, "uid", required=False)
                except FieldError as exc:
                    self.findings.append(
                        unparsable_finding(exc.found.under(f"status.reservedFor[{i}]."), label, claim=key)
                    )
                    claim.other_consumers += 1  # unreadable consumer: assume it exists, claim not orphaned
                    continue
            if resource == "pods" and not raw.get("apiGroup"):
                claim.pods.append(new(PodConsumer, (consumer, uid or None)))
            else:
                claim.other_consumers += 1
        return claim

    def _allocation(self, raw: Any, index: int, label: str, claim: str) -> Allocation | None:
        """One `status.allocation.devices.results[]` entry; None when it names no device."""
        if type(raw) is dict:
            driver, pool, device = raw.get("driver"), raw.get("pool"), raw.get("device")
            request, consumed_raw = raw.get("request"), raw.get("consumedCapacity")
        else:
            driver = pool = device = request = consumed_raw = None
        if not (
            type(driver) is str
            and driver
            and type(pool) is str
            and pool
            and type(device) is str
            and device
            and (request is None or type(request) is str)
            and (consumed_raw is None or type(consumed_raw) is dict)
        ):
            try:
                result = item(raw)
                driver, pool = str_field(result, "driver"), str_field(result, "pool")
                device = str_field(result, "device")
                request = str_field(result, "request", required=False)
                consumed_raw = result.get("consumedCapacity")
                map_field(result, "consumedCapacity")
            except FieldError as exc:
                path = f"status.allocation.devices.results[{index}]."
                self.findings.append(unparsable_finding(exc.found.under(path), label, claim=claim))
                return None
            assert driver is not None and pool is not None and device is not None
        key = (driver, pool, device)
        device_id = self.device_ids.get(key)
        if device_id is None:
            device_id = self.device_ids[key] = DeviceId(*key)
        if consumed_raw is None:
            consumed = NOTHING_CONSUMED
        else:
            consumed = self._consumed(consumed_raw, index, label, device_id, claim)
        return new(Allocation, (request or "", device_id, consumed, consumed_raw is not None))

    def _consumed(
        self, raw: Mapping[Any, Any], index: int, label: str, device_id: DeviceId, claim: str
    ) -> dict[str, Decimal]:
        """The amounts that parse. Only maps of quantity texts are shared: `1`, `1.0` and `true` are equal
        keys of a tuple but neither the same amount nor all quantities."""
        try:
            key = tuple(raw.items())
            consumed = self.consumed.get(key)
        except TypeError:  # an unhashable amount (a map, a list): not a quantity, never shared
            key, consumed = (), None
        if consumed is not None:
            return consumed
        consumed = {}
        texts = True
        for cap_name, amount in raw.items():
            if type(amount) is not str or type(cap_name) is not str:
                texts = False
            try:
                # negative amounts parse here and are judged by the invalid-consumption check
                consumed[str(cap_name)] = quantity(amount, "", negative=True)
            except FieldError as exc:
                texts = False
                path = f"status.allocation.devices.results[{index}].consumedCapacity.{cap_name}"
                self.findings.append(
                    unparsable_finding(exc.found.under(path), label, device=str(device_id), claim=claim)
                )
        if texts and len(self.consumed) < _MAX_CONSUMED:
            self.consumed[key] = consumed
        return consumed
