"""A `kubectl get -o json` List of the five DRA kinds read straight into records: `dra-check`'s fast path.

msgspec decodes the file into the typed Structs below, in C, checking on the way the types the loader's
usual-shape readers check one by one (a name is a non-empty string, a list is a list, ...), and building
only the fields the loader reads. ResourceClaims and Pods then become records with no type check left to
do; ResourceSlices, DeviceClasses and Nodes (few) become the small dicts the loader reads. Pure.

What the types let through but the records need more of (a name or namespace missing, a consumed amount
that is not a quantity) goes to the loader's general reader, object by object, with its `unparsable`
findings. A file the types do not describe (another kind, a field of another shape, YAML, nested Lists)
gives None, and the caller reads it with the general reader (automator/dra/load.py), which reports or
accepts it as it always did: what this reader accepts, it reads the same
(tests/automator/test_dra_read_typed.py holds the two to the same records).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec

from automator.dra.fields import new
from automator.dra.load_claims import NOTHING_CONSUMED, ClaimLoader
from automator.dra.model import Allocation, Claim, ContainerClaimRef, DeviceId, Pod, PodConsumer
from automator.dra.read_json import json_bytes

Name = Annotated[str, msgspec.Meta(min_length=1)]


class _Meta(msgspec.Struct):
    name: Any = None
    namespace: Any = None
    uid: Any = None


class _Result(msgspec.Struct):
    driver: Name
    pool: Name
    device: Name
    request: str | None = ""
    consumedCapacity: dict[str, Any] | None = None


class _Results(msgspec.Struct):
    results: list[_Result]


class _Allocation(msgspec.Struct):
    devices: _Results


class _Consumer(msgspec.Struct):
    resource: Name
    name: Name
    uid: str | None = None
    apiGroup: Any = None


class _ClaimStatus(msgspec.Struct):
    allocation: _Allocation | None = None
    reservedFor: list[_Consumer] | None = None


class _PodClaim(msgspec.Struct):
    name: Name
    resourceClaimName: str | None = None


class _ContainerClaim(msgspec.Struct):
    name: Name
    request: str | None = None


class _Resources(msgspec.Struct):
    claims: list[_ContainerClaim] | None = None


class _Container(msgspec.Struct):
    name: Name
    resources: _Resources | None = None


class _PodSpec(msgspec.Struct):
    nodeName: str | None = None
    resourceClaims: list[_PodClaim] | None = None
    initContainers: list[_Container] | None = None
    containers: list[_Container] | None = None


class _PodStatus(msgspec.Struct):
    resourceClaimStatuses: list[_PodClaim] | None = None


class _NodeStatus(msgspec.Struct):
    allocatable: Any = None


class _Object(msgspec.Struct, tag_field="kind"):
    metadata: _Meta | None = None


class _Claim(_Object, tag="ResourceClaim"):
    status: _ClaimStatus | None = None


class _Pod(_Object, tag="Pod"):
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


class _Slice(_Object, tag="ResourceSlice"):
    spec: Any = None


class _DeviceClass(_Object, tag="DeviceClass"):
    spec: Any = None


class _Node(_Object, tag="Node"):
    status: _NodeStatus | None = None


class _List(msgspec.Struct):
    kind: Any = None
    items: list[_Claim | _Pod | _Slice | _DeviceClass | _Node] | msgspec.UnsetType | None = msgspec.UNSET


_DECODER = msgspec.json.Decoder(_List)
TypedClaim, TypedPod = _Claim, _Pod
Objects = list[_Claim | _Pod | _Slice | _DeviceClass | _Node]


def typed_objects(data: bytes) -> Objects | None:
    """The List's objects, or None when the types do not describe the document (see the module)."""
    try:
        doc = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # the general reader reports it
        return None
    if not (isinstance(doc.kind, str) and doc.kind.endswith("List")) or doc.items is msgspec.UNSET:
        return None  # one object, or a `*List` without items: an object as the general reader sees it
    return doc.items or []


def as_dict(obj: _Claim | _Pod | _Slice | _DeviceClass | _Node) -> dict[str, Any]:
    """The object as the general reader would have it, of the fields decoded (for the loader's `add`)."""
    if type(obj) is _Slice or type(obj) is _DeviceClass:  # many devices in a slice: not copied again
        meta = obj.metadata
        fields = None if meta is None else {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid}
        return {
            "kind": "ResourceSlice" if type(obj) is _Slice else "DeviceClass",
            "metadata": fields,
            "spec": obj.spec,
        }
    out: dict[str, Any] = msgspec.to_builtins(obj)
    return out


def pod_record(obj: _Pod, namespace: str, name: str) -> Pod:
    """The record `load_pods.usual_pod` makes of the same object (the types checked what it checks)."""
    spec, status = obj.spec, obj.status
    names: dict[str, str] = {}
    for from_status, pod_claims in (
        (False, spec.resourceClaims if spec is not None else None),
        (True, status.resourceClaimStatuses if status is not None else None),
    ):
        for pod_claim in pod_claims or ():
            claim_name = pod_claim.resourceClaimName
            if claim_name and (not from_status or pod_claim.name not in names):
                names[pod_claim.name] = claim_name  # from a template (status): the spec's name wins
    containers: dict[str, list[ContainerClaimRef]] = {}
    if spec is not None:
        for group in (spec.initContainers, spec.containers):
            for container in group or ():
                held = containers.get(container.name)
                if held is None:
                    held = containers[container.name] = []
                resources = container.resources
                if resources is not None and resources.claims is not None:
                    for ref in resources.claims:
                        held.append(new(ContainerClaimRef, (ref.name, ref.request or None)))
    uid = obj.metadata.uid if obj.metadata is not None else None
    node = (spec.nodeName or None) if spec is not None else None
    return Pod(namespace, name, uid if isinstance(uid, str) else None, node, names, containers)


class ClaimRecords:
    """Claim records as `ClaimLoader._usual_claim` makes them, sharing its interned device ids and consumed
    maps (`usual_consumed`: None for an amount that is not a quantity string)."""

    def __init__(self, loader: ClaimLoader) -> None:
        self._ids, self._consumed = loader.device_ids, loader.usual_consumed

    def claim(self, obj: _Claim, namespace: str, name: str) -> Claim | None:
        """The record, or None when a consumed amount needs the general reader (not a quantity)."""
        status = obj.status
        allocation = status.allocation if status is not None else None
        claim = Claim(namespace, name, allocation is not None)
        if allocation is not None:
            ids, shared, allocations = self._ids, self._consumed, claim.allocations
            for result in allocation.devices.results:
                raw = result.consumedCapacity
                consumed = NOTHING_CONSUMED if raw is None else shared(raw)  # one map per distinct one
                if consumed is None:
                    return None
                key = (result.driver, result.pool, result.device)
                device_id = ids.get(key)
                if device_id is None:
                    device_id = ids[key] = DeviceId(*key)
                allocations.append(
                    new(Allocation, (result.request or "", device_id, consumed, raw is not None))
                )
        if status is not None and status.reservedFor is not None:
            for ref in status.reservedFor:
                if ref.resource == "pods" and not ref.apiGroup:
                    claim.pods.append(new(PodConsumer, (ref.name, ref.uid or None)))
                else:
                    claim.other_consumers += 1
        return claim


def read_typed(path: Path) -> tuple[Objects, str] | None:
    """(the objects, where the List is) of a JSON List file the types describe; None otherwise (YAML is
    told by content and not decoded here at all)."""
    data = json_bytes(path)
    if data is None:
        return None
    objects = typed_objects(data)
    return None if objects is None else (objects, f"{path} document 0")
