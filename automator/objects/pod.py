"""The Pod record: the fields of a Pod the automator reads and the facts derived from them, decoded once
(`pod_record`) from the object as the API or kubectl gives it. Pure.

A malformed field does not stop the decoding: the fact it feeds carries its FieldProblem instead, and
the planner answers with today's fail-safe (node unplannable, pod protected, preemptor unresolved).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

import msgspec

from automator.objects.cache import RecordCache
from automator.objects.fields import EMPTY, as_map, item, list_field, map_field, str_field
from automator.objects.gang import GangRef, gang_ref
from automator.objects.keys import ObjectKey
from automator.objects.priority_class import PriorityClass
from automator.objects.resources import (
    CPU_AND_MEMORY,
    FieldError,
    FieldProblem,
    Requests,
    amount,
    integer,
    kept,
    parse_time,
    scaled,
    whole,
)
from automator.objects.shapes import Shapes

NOT_CREATED = datetime.max.replace(tzinfo=UTC)  # created_at of a pod without the field: sorts last

# A container's amounts, parsed at decoding: (whole counts by resource name, cpu millicores, memory bytes,
# sidecar). A FieldProblem in place of an amount: the one that failed, raised when the amount is read.
_Amounts = tuple[Mapping[str, int | FieldProblem], int | FieldProblem, int | FieldProblem, bool]


class ClaimRef(NamedTuple):
    """`containers[].resources.claims[]`: a pod-level claim name and optionally one request of it."""

    claim: str
    request: str | None


class Pod(msgspec.Struct, frozen=True):
    """An immutable Pod record; `replace` (msgspec.structs.replace) makes a changed copy."""

    key: ObjectKey
    uid: str | None = None
    resource_version: str | None = None
    labels: Mapping[str, Any] = {}
    annotations: Mapping[str, Any] = {}
    owners: tuple[tuple[str, str], ...] = ()  # (kind, name) of each ownerReference
    owner_uids: tuple[str, ...] = ()  # the uid of each ownerReference that has one (Kueue finds pods by it)
    start_time: Any = None  # status.startTime, else metadata.creationTimestamp, as given
    node_name: str = ""
    phase: Any = "unknown"  # status.phase as given ("unknown" when absent)
    terminating: bool = False  # metadata.deletionTimestamp set
    class_name: str | None = None  # spec.priorityClassName
    spec_priority: int | None = None  # spec.priority (set by admission)
    nominated_node: Any = None  # status.nominatedNodeName
    # PodScheduled=False with reason Unschedulable (the scheduler tried and failed)
    scheduler_refused: bool = False
    scheduled: datetime | None = None  # PodScheduled=True lastTransitionTime
    created: datetime = NOT_CREATED
    # What the scheduler's node selection reads, as given: nodeSelector items, required node affinity,
    # tolerations.
    node_selector: tuple[tuple[Any, Any], ...] = ()
    required_affinity: Any = None
    tolerations: Any = None
    containers: tuple[_Amounts, ...] = ()
    init_containers: tuple[_Amounts, ...] = ()
    overhead: tuple[int | FieldProblem, int | FieldProblem] = (0, 0)
    # What is malformed: the requests (the node's usage is then unknown), spec.priority or
    # spec.priorityClassName, the scheduling time, the creation time
    requests_error: FieldProblem | None = None
    priority_error: FieldProblem | None = None
    scheduled_error: FieldProblem | None = None
    created_error: FieldProblem | None = None
    shape_error: FieldProblem | None = None  # the first field of a wrong shape (objects/shapes.py)
    # What the DRA checks read: pod-level claim name -> ResourceClaim name (spec.resourceClaims, and
    # status.resourceClaimStatuses for claims made from a template), each container's claim references, and
    # the first of their fields that does not parse, which ends their reading (what was read before stays).
    claim_names: Mapping[str, str] = {}
    container_claims: Mapping[str, tuple[ClaimRef, ...]] = {}
    claims_error: FieldProblem | None = None
    gang: GangRef | None = None  # the first gang key it carries (objects/gang.py)

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def unschedulable(self) -> bool:
        """Pending, not bound, not terminating, and the scheduler said Unschedulable."""
        return (
            self.phase == "Pending" and not self.node_name and not self.terminating and self.scheduler_refused
        )

    def requests(self, gpu_resources: Iterable[str]) -> Requests:
        """Effective requests as the scheduler computes them; FieldError when a field read is malformed.

        max(sum over app containers + restartable (sidecar) init containers, the peak during init), where an
        init container's peak is its own request plus the sidecars started before it; plus spec.overhead.
        """
        if self.requests_error is not None:
            raise self.requests_error.error()
        names = tuple(gpu_resources)
        gpus = cpu = memory = 0
        for amounts in self.containers:
            g, c, m = _sum(amounts, names)
            gpus, cpu, memory = gpus + g, cpu + c, memory + m
        if self.init_containers:
            sidecars = [0, 0, 0]
            peak = [0, 0, 0]
            for amounts in self.init_containers:
                each = _sum(amounts, names)
                for j, value in enumerate(each):
                    peak[j] = max(peak[j], sidecars[j] + value)
                if amounts[3]:
                    for j, value in enumerate(each):
                        sidecars[j] += value
            gpus = max(gpus + sidecars[0], peak[0])
            cpu = max(cpu + sidecars[1], peak[1])
            memory = max(memory + sidecars[2], peak[2])
        return Requests(gpus, cpu + amount(self.overhead[0]), memory + amount(self.overhead[1]))


def _sum(amounts: _Amounts, names: tuple[str, ...]) -> tuple[int, int, int]:
    counts, cpu, memory, _ = amounts
    gpus = 0
    for name in names:
        count = counts.get(name)
        if count is not None:
            gpus += amount(count)
    return gpus, amount(cpu), amount(memory)


def _container(container: Any, field: str, i: int, shapes: Shapes) -> _Amounts:
    where = f"{field}[{i}]"
    shapes.map(container, where)
    if not isinstance(container, dict):
        raise FieldError(where, "expected a map")
    resources = shapes.map(container.get("resources"), f"{where}.resources")
    limits = shapes.map(resources.get("limits"), f"{where}.resources.limits")
    requests = shapes.map(resources.get("requests"), f"{where}.resources.requests")
    if not isinstance(container.get("resources") or EMPTY, dict):
        raise FieldError(f"{where}.resources", "expected a map")
    if not isinstance(resources.get("limits") or EMPTY, dict) or not isinstance(
        resources.get("requests") or EMPTY, dict
    ):
        raise FieldError(f"{where}.resources", "limits and requests must be maps")
    # A cpu or memory request: Kubernetes defaults a missing one to the limit (0 without either).
    return (
        _counts(limits, requests, f"{where}.resources"),
        _parsed(requests, limits, "cpu", 1000, f"{field}[{i}].resources"),
        _parsed(requests, limits, "memory", 1, f"{field}[{i}].resources"),
        container.get("restartPolicy") == "Always",
    )


def _counts(
    limits: Mapping[str, Any], requests: Mapping[str, Any], field: str
) -> Mapping[str, int | FieldProblem]:
    """Every resource but cpu and memory as a whole count. Extended resources are set as limits (a request
    alone is invalid in Kubernetes but harmless here), so a limit wins over a request of the same name."""
    counts: dict[str, int | FieldProblem] = {}
    for part, amounts in (("requests", requests), ("limits", limits)):
        for name, value in amounts.items():
            if name not in CPU_AND_MEMORY:
                counts[name] = kept(whole, value, f"{field}.{part}.{name}")
    return counts or EMPTY


def _parsed(
    requests: Mapping[str, Any], limits: Mapping[str, Any], name: str, scale: int, field: str
) -> int | FieldProblem:
    source, where = (requests, "requests") if name in requests else (limits, "limits")
    if name not in source:
        return 0
    return kept(scaled, source[name], scale, f"{field}.{where}.{name}")


def _containers(spec: Mapping[str, Any], key: str, shapes: Shapes) -> tuple[_Amounts, ...]:
    containers = spec.get(key) or []
    shapes.items(containers, f"spec.{key}")
    if not isinstance(containers, list):
        raise FieldError(f"spec.{key}", "expected a list")
    return tuple(_container(c, f"spec.{key}", i, shapes) for i, c in enumerate(containers))


def _overhead(spec: Mapping[str, Any], shapes: Shapes) -> tuple[int | FieldProblem, int | FieldProblem]:
    overhead = spec.get("overhead")
    shapes.map(overhead, "spec.overhead")
    if not overhead:
        return (0, 0)
    if not isinstance(overhead, dict):
        raise FieldError("spec.overhead", "expected a map")
    cpu, memory = (
        kept(scaled, overhead[name], scale, f"spec.overhead.{name}") if name in overhead else 0
        for name, scale in (("cpu", 1000), ("memory", 1))
    )
    return cpu, memory


def _scheduled(conditions: list[Mapping[str, Any]]) -> tuple[Any, bool]:
    """(the PodScheduled condition's time when it is True, whether it says Unschedulable)."""
    for condition in conditions:
        if condition.get("type") == "PodScheduled":
            if condition.get("status") == "True":
                return condition.get("lastTransitionTime") or None, False
            return None, condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
    return None, False


def pod_record(obj: Mapping[str, Any]) -> Pod:
    """The record of one Pod object (camelCase keys, as the API and kubectl give it)."""
    shapes = Shapes()
    meta = as_map(obj.get("metadata"))
    namespace, labels, annotations = shapes.metadata(meta)
    key = ObjectKey(str(namespace or "default"), str(meta.get("name") or ""))
    spec = shapes.map(obj.get("spec"), "spec")
    shapes.text(spec.get("nodeName"), "spec.nodeName")
    class_name = shapes.text(spec.get("priorityClassName"), "spec.priorityClassName")
    fields: dict[str, Any] = {}
    try:
        if obj.get("spec") and not isinstance(obj["spec"], dict):
            raise FieldError("spec", "expected a map")
        fields["containers"] = _containers(spec, "containers", shapes)
        fields["init_containers"] = _containers(spec, "initContainers", shapes)
        fields["overhead"] = _overhead(spec, shapes)
    except FieldError as exc:
        fields["requests_error"] = exc.found
    try:
        if spec.get("priority") is not None:
            fields["spec_priority"] = integer(spec["priority"], "spec.priority")
        if class_name is not None and not isinstance(class_name, str):
            raise FieldError("spec.priorityClassName", f"{class_name!r} is not a string")
    except FieldError as exc:
        fields["priority_error"] = exc.found
    node_selector = shapes.map(spec.get("nodeSelector"), "spec.nodeSelector")
    shapes.maps(spec.get("tolerations"), "spec.tolerations")
    affinity = shapes.map(spec.get("affinity"), "spec.affinity")
    node_affinity = shapes.map(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None:
        _required_shapes(required, shapes)
    status = shapes.map(obj.get("status"), "status")
    shapes.text(status.get("phase"), "status.phase")
    when, refused = _scheduled(shapes.maps(status.get("conditions"), "status.conditions"))
    if when is not None:
        try:
            fields["scheduled"] = parse_time(when, "status.conditions[PodScheduled].lastTransitionTime")
        except FieldError as exc:
            fields["scheduled_error"] = exc.found
    if meta.get("creationTimestamp"):
        try:
            fields["created"] = parse_time(meta["creationTimestamp"], "metadata.creationTimestamp")
        except FieldError as exc:
            fields["created_error"] = exc.found
    return Pod(
        key,
        uid=_text(meta.get("uid")),
        resource_version=_text(meta.get("resourceVersion")),
        labels=labels,
        annotations=annotations,
        owners=_owners(meta.get("ownerReferences")),
        owner_uids=_owner_uids(meta.get("ownerReferences")),
        start_time=status.get("startTime") or meta.get("creationTimestamp"),
        node_name=str(spec.get("nodeName") or ""),
        phase=status.get("phase", "unknown"),
        terminating=meta.get("deletionTimestamp") is not None,
        class_name=class_name if isinstance(class_name, str) and class_name else None,
        nominated_node=status.get("nominatedNodeName"),
        scheduler_refused=refused,
        node_selector=tuple(node_selector.items()),
        required_affinity=required,
        tolerations=spec.get("tolerations"),
        shape_error=shapes.first,
        gang=gang_ref(spec, labels, annotations),
        **fields,
        **_claims(obj),
    )


def _claims(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The claim fields of the record, read in order up to the first that does not parse."""
    names: dict[str, str] = {}
    containers: dict[str, list[ClaimRef]] = {}
    fields: dict[str, Any] = {}
    try:
        spec = map_field(obj, "spec")
        str_field(spec, "nodeName", "spec.", required=False)
        _claim_names(spec, "spec.", "resourceClaims", names.__setitem__)
        status = map_field(obj, "status")
        # from a template: the name the claim was given, unless the spec names one
        _claim_names(status, "status.", "resourceClaimStatuses", names.setdefault)
        for group in ("initContainers", "containers"):
            for i, container in enumerate(list_field(spec, group, "spec.") if spec.get(group) else ()):
                try:
                    _container_claims(container, containers)
                except FieldError as exc:
                    raise exc.found.under(f"spec.{group}[{i}].").error() from None
    except FieldError as exc:
        fields["claims_error"] = exc.found
    if names:
        fields["claim_names"] = names
    if containers:
        fields["container_claims"] = {name: tuple(refs) for name, refs in containers.items()}
    return fields


def _claim_names(
    parent: Mapping[str, Any], section: str, field: str, put: Callable[[str, str], object]
) -> None:
    """`spec.resourceClaims[]` or `status.resourceClaimStatuses[]`: pod-level name -> claim name."""
    for i, raw in enumerate(list_field(parent, field, section) if parent.get(field) else ()):
        try:
            ref = item(raw)
            local, claim = str_field(ref, "name"), str_field(ref, "resourceClaimName", required=False)
        except FieldError as exc:
            raise exc.found.under(f"{section}{field}[{i}].").error() from None
        if local is not None and claim is not None:
            put(local, claim)


def _container_claims(raw: Any, containers: dict[str, list[ClaimRef]]) -> None:
    container = item(raw)
    refs = containers.setdefault(str(str_field(container, "name")), [])
    if not container.get("resources"):
        return
    for j, claim in enumerate(list_field(map_field(container, "resources"), "claims", "resources.")):
        try:
            ref = item(claim)
            refs.append(ClaimRef(str(str_field(ref, "name")), str_field(ref, "request", required=False)))
        except FieldError as exc:
            raise exc.found.under(f"resources.claims[{j}].").error() from None


def _required_shapes(required: Any, shapes: Shapes) -> None:
    """The shapes of the required node affinity's terms, which the scheduler's matching reads."""
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = shapes.map(required, path).get("nodeSelectorTerms")
    for i, term in enumerate(shapes.maps(terms, f"{path}.nodeSelectorTerms")):
        for part in ("matchExpressions", "matchFields"):
            where = f"{path}.nodeSelectorTerms[{i}].{part}"
            for j, expression in enumerate(shapes.maps(term.get(part), where)):
                shapes.items(expression.get("values"), f"{where}[{j}].values")


def _owners(references: Any) -> tuple[tuple[str, str], ...]:
    if not references or not isinstance(references, list):
        return ()
    return tuple(
        (str(ref.get("kind") or ""), str(ref.get("name") or ""))
        for ref in references
        if isinstance(ref, dict)
    )


def _owner_uids(references: Any) -> tuple[str, ...]:
    if not references or not isinstance(references, list):
        return ()
    return tuple(
        ref["uid"]
        for ref in references
        if isinstance(ref, dict) and isinstance(ref.get("uid"), str) and ref["uid"]
    )


def _text(value: Any) -> str | None:
    return str(value) if value else None


def pod_records(pods: Iterable[Pod | Mapping[str, Any]]) -> list[Pod]:
    """Records of pods given as records or as objects."""
    return [p if isinstance(p, Pod) else pod_record(p) for p in pods]


def pod_priority(pod: Pod, classes: Mapping[str, PriorityClass], global_default: PriorityClass | None) -> int:
    """spec.priority (set by admission), else its PriorityClass value, else the globalDefault, else 0."""
    if pod.priority_error is not None:
        raise pod.priority_error.error()
    if pod.spec_priority is not None:
        return pod.spec_priority
    if pod.class_name and pod.class_name in classes:
        return classes[pod.class_name].priority()
    if global_default is not None:
        return global_default.priority()
    return 0


def created_at(pod: Pod) -> datetime:
    """When the pod was created; unknown age sorts last among equal priorities."""
    if pod.created_error is not None:
        raise pod.created_error.error()
    return pod.created


class _Version(msgspec.Struct):
    uid: Any = None
    resourceVersion: Any = None


class _Versioned(msgspec.Struct):
    """What a list item is first read for: its version (every other field skipped by the C parser)."""

    metadata: _Version | None = None


class _ListMeta(msgspec.Struct):
    continue_: Any = msgspec.field(default=None, name="continue")


class _Page(msgspec.Struct):
    """A list answer with its items left as bytes until a pod version is found not kept."""

    items: list[msgspec.Raw] | None = None
    metadata: _ListMeta | None = None


_PAGE = msgspec.json.Decoder(_Page)
_VERSIONED = msgspec.json.Decoder(_Versioned)


def _version(item: msgspec.Raw) -> tuple[str, str] | None:
    try:
        meta = _VERSIONED.decode(item).metadata
    except msgspec.MsgspecError:  # a malformed item: decoded in full, which names what is wrong
        return None
    if meta is None or type(meta.uid) is not str or type(meta.resourceVersion) is not str:
        return None
    return (meta.uid, meta.resourceVersion) if meta.uid and meta.resourceVersion else None


def pod_page_decoder(cache: RecordCache[Pod]) -> Callable[[bytes], tuple[list[Pod], str | None]]:
    """A decoder of pod list pages (the API's JSON bytes) into records and the continue token.

    An unchanged pass is mostly reading pods the previous pass decoded: each item is first read for its
    uid and resourceVersion only, and only a version the cache does not hold is decoded into a record."""

    def decode(data: bytes) -> tuple[list[Pod], str | None]:
        try:
            page = _PAGE.decode(data)
        except msgspec.MsgspecError as exc:
            raise ValueError(f"a list answer is not a JSON object with a list of items: {exc}") from None
        records = []
        for raw in page.items or ():
            key = _version(raw)
            kept = cache.get(key)
            if key is not None and kept is not None:
                cache.keep(key, kept)
            else:
                kept = decode_one_pod(raw)
                cache.put(key, kept)
            records.append(kept)
        token = page.metadata.continue_ if page.metadata is not None else None
        return records, (str(token) if token else None)

    return decode


def decode_one_pod(data: bytes | msgspec.Raw) -> Pod:
    """The record of one Pod (JSON bytes, as a get answers); ValueError when it is not a JSON object."""
    try:
        obj = msgspec.json.decode(data)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError("the answer is not an object")
    return pod_record(obj)
