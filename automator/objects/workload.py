"""The record of a Deployment, ReplicaSet or StatefulSet: what the KEDA cache reads of one to find a
workload's pods (its namespace, name and owners), decoded once (`workload_record`). Pure."""

from __future__ import annotations

import msgspec

from automator.objects.keys import JsonObj, ObjectKey


class WorkloadObject(msgspec.Struct, frozen=True):
    namespace: str
    name: str
    owners: tuple[tuple[str, str], ...] = ()  # (kind, name) of each ownerReference: a ReplicaSet's Deployment


def workload_record(obj: JsonObj) -> WorkloadObject:
    """The record of one apps/v1 object (as the API and kubectl give it)."""
    key = ObjectKey.of(obj)
    references = (obj.get("metadata") or {}).get("ownerReferences")
    owners = tuple(
        (str(ref.get("kind") or ""), str(ref.get("name") or ""))
        for ref in (references if isinstance(references, list) else ())
        if isinstance(ref, dict)
    )
    return WorkloadObject(key.namespace, key.name, owners)
