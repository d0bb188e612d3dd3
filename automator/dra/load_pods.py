"""Pods and Nodes -> Pod and Node records (automator/dra/load.py's last stage). Pure.

One reader per kind, field by field: each field is checked inline for its usual type, and read by the
helpers of automator/dra/fields.py otherwise, which raise Unparsable naming the field (or accept what they
allow). The first field of a pod that does not parse ends its reading: one `unparsable` finding, the pod
kept with what was read.
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
    quantity,
    str_field,
    unparsable_finding,
)
from automator.dra.load_slices import DEVICE_PLUGIN_GPU
from automator.dra.model import ContainerClaimRef, Finding, Node, Pod


def read_pod(obj: Mapping[str, Any], namespace: str, name: str, findings: list[Finding]) -> Pod:
    """The pod's record; the first field that does not parse is one `unparsable` finding."""
    uid = obj["metadata"].get("uid")
    pod = Pod(namespace, name, uid if isinstance(uid, str) else None, None, {}, {})
    try:
        spec = obj.get("spec")
        if type(spec) is not dict:
            spec = map_field(obj, "spec")
        node = spec.get("nodeName")
        pod.node = (
            node
            if (type(node) is str and node != "")
            else str_field(spec, "nodeName", "spec.", required=False)
        )
        refs = spec.get("resourceClaims")
        if refs:
            _claim_names(pod, refs, spec, "spec.", "resourceClaims", False)
        status = obj.get("status")
        if type(status) is not dict:
            status = map_field(obj, "status")
        refs = status.get("resourceClaimStatuses")
        if refs:
            _claim_names(pod, refs, status, "status.", "resourceClaimStatuses", True)  # from a template
        for group in ("initContainers", "containers"):
            containers = spec.get(group)
            if containers:
                _containers(pod, containers, spec, group)
    except Unparsable as exc:
        key = f"{namespace}/{name}"
        findings.append(unparsable_finding(exc, f"Pod {key}", node=pod.node, pod=key))
    return pod


def _claim_names(
    pod: Pod, refs: Any, parent: Mapping[str, Any], section: str, field: str, from_status: bool
) -> None:
    """`spec.resourceClaims[]` or `status.resourceClaimStatuses[]`: pod-level name -> claim name."""
    if type(refs) is not list:
        refs = list_field(parent, field, section)
    names = pod.claim_names
    for i, raw in enumerate(refs):
        if type(raw) is dict:
            local, claim_name = raw.get("name"), raw.get("resourceClaimName")
        else:
            local = claim_name = None
        if not ((type(local) is str and local != "") and (type(claim_name) is str and claim_name != "")):
            try:
                ref = item(raw)
                local = str_field(ref, "name")
                claim_name = str_field(ref, "resourceClaimName", required=False)
            except Unparsable as exc:
                raise exc.under(f"{section}{field}[{i}].") from None
        if local is not None and claim_name is not None:
            if from_status:
                names.setdefault(local, claim_name)
            else:
                names[local] = claim_name


def _containers(pod: Pod, containers: Any, spec: Mapping[str, Any], group: str) -> None:
    if type(containers) is not list:
        containers = list_field(spec, group, "spec.")
    for i, raw in enumerate(containers):
        try:
            container = raw if type(raw) is dict else item(raw)
            cname = container.get("name")
            if not (type(cname) is str and cname != ""):
                cname = str_field(container, "name")
            assert cname is not None
            refs = pod.containers.setdefault(cname, [])
            resources = container.get("resources")
            if not resources:
                continue
            claims = resources.get("claims") if type(resources) is dict else None
            if type(claims) is not list:
                if claims is None and type(resources) is dict:
                    continue
                claims = list_field(map_field(container, "resources"), "claims", "resources.")
            _container_claims(refs, claims)
        except Unparsable as exc:
            raise exc.under(f"spec.{group}[{i}].") from None


def _container_claims(refs: list[ContainerClaimRef], claims: list[Any]) -> None:
    """`containers[].resources.claims[]`: a pod-level claim name and optionally one request of it."""
    for j, raw in enumerate(claims):
        try:
            ref = raw if type(raw) is dict else item(raw)
            local, request = ref.get("name"), ref.get("request")
            if not (type(local) is str and local != "") or (
                request is not None and not (type(request) is str and request != "")
            ):
                local = str_field(ref, "name")
                request = str_field(ref, "request", required=False)
        except Unparsable as exc:
            raise exc.under(f"resources.claims[{j}].") from None
        assert local is not None
        refs.append(new(ContainerClaimRef, (local, request)))


def load_node(obj: Mapping[str, Any], label: str, name: str, findings: list[Finding]) -> Node:
    gpus: dict[str, Decimal] = {}
    try:
        allocatable = map_field(map_field(obj, "status", ""), "allocatable", "status.")
    except Unparsable as exc:
        findings.append(unparsable_finding(exc, label, node=name))
        allocatable = {}
    for resource, raw in allocatable.items():
        if not DEVICE_PLUGIN_GPU.fullmatch(str(resource)):
            continue
        try:
            amount = quantity(raw, f"status.allocatable.{resource}")
        except Unparsable as exc:
            findings.append(unparsable_finding(exc, label, node=name))
            continue
        if amount > 0:
            gpus[str(resource)] = amount
    return Node(name, gpus)
