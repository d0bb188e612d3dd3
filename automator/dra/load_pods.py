"""Pods and Nodes -> Pod and Node records (automator/dra/load.py's last stage). Pure.

Each field is read with a fast check of the common shape; anything else goes through the helpers of
automator/dra/fields.py, which raise Unparsable naming the field (or accept what they allow). The first field
of a pod that does not parse ends its reading: one `unparsable` finding, the pod kept with what was read.
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


def load_pod(obj: Mapping[str, Any], namespace: str, name: str, findings: list[Finding]) -> Pod:
    pod = usual_pod(obj, namespace, name)
    return pod if pod is not None else read_pod(obj, namespace, name, findings)


def usual_pod(obj: Mapping[str, Any], namespace: str, name: str) -> Pod | None:
    """The pod when every field read has the usual shape; None for read_pod, which reads field by field.

    One function with inline type checks (no call per field): most of a large check's pods take this
    path. It records no finding, so giving up anywhere changes nothing."""
    spec, status = obj.get("spec"), obj.get("status")
    if type(spec) is not dict or type(status) is not dict:
        return None
    uid, node = obj["metadata"].get("uid"), spec.get("nodeName")
    if node is not None and not (type(node) is str and node):
        return None
    names: dict[str, str] = {}
    for from_status, refs in (
        (False, spec.get("resourceClaims")),
        (True, status.get("resourceClaimStatuses")),  # from a template: the spec's name wins
    ):
        if not refs:
            continue
        if type(refs) is not list:
            return None
        for ref in refs:
            local = ref.get("name") if type(ref) is dict else None
            if not (type(local) is str and local):
                return None
            claim_name = ref.get("resourceClaimName")
            if not (type(claim_name) is str and claim_name):
                if claim_name is None:
                    continue  # from a template, named in the status
                return None
            if not from_status or local not in names:
                names[local] = claim_name
    containers: dict[str, list[ContainerClaimRef]] = {}
    for group in (spec.get("initContainers"), spec.get("containers")):
        if group and not (type(group) is list and _usual_containers(group, containers)):
            return None
    return Pod(namespace, name, uid if isinstance(uid, str) else None, node, names, containers)


def _usual_containers(group: list[Any], containers: dict[str, list[ContainerClaimRef]]) -> bool:
    for container in group:
        cname = container.get("name") if type(container) is dict else None
        if not (type(cname) is str and cname):
            return False
        refs = containers.get(cname)
        if refs is None:
            refs = containers[cname] = []
        resources = container.get("resources")
        if not resources:
            continue
        claims = resources.get("claims") if type(resources) is dict else False
        if claims is None:
            continue
        if type(claims) is not list:
            return False
        for ref in claims:
            local = ref.get("name") if type(ref) is dict else None
            request = ref.get("request") if local else None
            if not (type(local) is str and local and (request is None or (type(request) is str and request))):
                return False
            refs.append(new(ContainerClaimRef, (local, request)))
    return True


def read_pod(obj: Mapping[str, Any], namespace: str, name: str, findings: list[Finding]) -> Pod:
    """Field by field: the first field that does not parse is one `unparsable` finding."""
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
