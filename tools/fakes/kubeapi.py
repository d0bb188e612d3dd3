"""The Kubernetes API's vocabulary for the fake API server (tools/fakes/fakekube.py): the resources it serves,
Status errors, paths, discovery, field and label selectors, patches, preconditions, dry runs."""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

JsonObj = dict[str, Any]
Query = dict[str, list[str]]
Labels = Mapping[str, Any]
_COMMON_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    fields: tuple[str, ...] = ()  # field labels beyond metadata.name/namespace

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: tuple[Resource, ...] = (
    Resource(
        "", "v1", "pods", "Pod", True,
        ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
         "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"),
    ),
    Resource("", "v1", "nodes", "Node", False, ("spec.unschedulable",)),
    Resource("", "v1", "namespaces", "Namespace", False, ("status.phase",)),
    Resource(
        "", "v1", "events", "Event", True,
        ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
         "involvedObject.apiVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
         "source", "type"),
    ),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True),
    Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False,
             ("spec.nodeName", "spec.driver")),
    Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True),
    Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
    # Read by the KEDA cache to find a workload's pods (docs/keda.md); nothing reconciles them here.
    Resource("apps", "v1", "deployments", "Deployment", True),
    Resource("apps", "v1", "replicasets", "ReplicaSet", True),
    Resource("apps", "v1", "statefulsets", "StatefulSet", True),
    # KEDA's ScaledObjects declare the questions the KEDA endpoints answer (docs/keda.md).
    Resource("keda.sh", "v1alpha1", "scaledobjects", "ScaledObject", True),
    # Read (with Kueue on) to find the Jobs a Workload's job owns (docs/kueue.md); nothing runs them here.
    Resource("batch", "v1", "jobs", "Job", True),
)  # fmt: skip
# The group objects of gang scheduling (CRDs or alpha APIs): served only when a FakeApiServer is told to
# (gang_apis), as a cluster serves them only where they are installed or enabled. List only.
GANG_RESOURCES: tuple[Resource, ...] = (
    Resource("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", True),
    Resource("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup", True),
    Resource("scheduling.k8s.io", "v1alpha1", "workloads", "Workload", True),
    Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True),
    Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True),
    Resource("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", True),
)
# Kueue's kinds, per version: served only when a FakeApiServer is told to (kueue_apis), as a cluster serves
# them only where Kueue is installed. Listed, read and merge-patched like the built-in kinds.
KUEUE_RESOURCES: tuple[Resource, ...] = tuple(
    Resource("kueue.x-k8s.io", version, plural, kind, namespaced)
    for version in ("v1beta2", "v1beta1")
    for plural, kind, namespaced in (
        ("workloads", "Workload", True),
        ("clusterqueues", "ClusterQueue", False),
        ("localqueues", "LocalQueue", True),
    )
)
BY_KIND = {r.kind: r for r in RESOURCES}
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}


class ApiError(Exception):
    """An answer with a v1 Status body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: JsonObj | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details
        self.headers = dict(headers or {})

    def status(self) -> JsonObj:
        body: JsonObj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', details(res, name))


def conflict(res: Resource, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
        details(res, name),
    )


def details(res: Resource, name: str) -> JsonObj:
    return {"name": name, "group": res.group, "kind": res.plural}


def load_objects(path: Path) -> list[JsonObj]:
    """Objects of a YAML/JSON file: a v1 List, several documents, or both."""
    out: list[JsonObj] = []
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if not doc:
            continue
        items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else [doc]
        out += [item for item in items or [] if isinstance(item, dict)]
    return out


# --- selectors -------------------------------------------------------------------------------------------


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def field_matcher(res: Resource, selector: str) -> Callable[[Mapping[str, Any]], bool]:
    """`a=b,c!=d` on the field labels the real server supports for `res`; else 400, as it answers."""
    terms: list[tuple[str, bool, str]] = []
    for term in filter(None, (t.strip() for t in selector.split(","))):
        m = re.fullmatch(r"([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)", term)
        if m is None:
            raise ApiError(400, "BadRequest", f"invalid field selector: {term!r}")
        key, op, value = m.groups()
        if key not in _COMMON_FIELDS + res.fields:
            raise ApiError(400, "BadRequest", f'field label not supported: "{key}"')
        terms.append((key, op != "!=", value))
    return lambda obj: all((_field_value(obj, k) == v) == eq for k, eq, v in terms)


def _split_selector(selector: str) -> Iterator[str]:
    depth, start = 0, 0
    for i, ch in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            yield selector[start:i].strip()
            start = i + 1
    yield selector[start:].strip()


def _label_check(term: str) -> Callable[[Labels], bool]:
    if m := re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term):
        key, op, raw = m.groups()
        values = {v.strip() for v in raw.split(",")}
        return lambda lb: (lb.get(key) in values) == (op == "in")
    if m := re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", term):
        key, op, value = m.groups()
        return lambda lb: (lb.get(key) == value) == (op != "!=")
    if m := re.fullmatch(r"(!?)([^=!\s()]+)", term):
        neg, key = m.groups()
        return lambda lb: (key in lb) != bool(neg)
    raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")


def label_matcher(selector: str) -> Callable[[Mapping[str, Any]], bool]:
    """Equality- and set-based label selectors (`a=b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x)`)."""
    checks = [_label_check(term) for term in filter(None, _split_selector(selector))]
    return lambda obj: all(c((obj.get("metadata") or {}).get("labels") or {}) for c in checks)


# --- patches ---------------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: JsonObj, ops: Any) -> JsonObj:
    """RFC 6902 add, remove, replace and test (what clients use for a guarded annotation change)."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "a JSON patch is a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        parts = _pointer(str(op.get("path", "")))
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.get(part)
            if parent is None:
                raise ApiError(422, "Invalid", f"path {op.get('path')!r} does not exist")
        last, kind = parts[-1], op.get("op")
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, "Invalid", f"test failed at {op.get('path')!r}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op.get("value"))
            else:
                if kind == "replace" and last not in parent:
                    raise ApiError(422, "Invalid", f"replace of missing path {op.get('path')!r}")
                parent[last] = copy.deepcopy(op.get("value"))
        elif kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            elif parent.pop(last, None) is None:
                raise ApiError(422, "Invalid", f"remove of missing path {op.get('path')!r}")
        else:
            raise ApiError(422, "Invalid", f"unsupported JSON patch operation {kind!r}")
    return doc


def check_preconditions(res: Resource, obj: Mapping[str, Any], options: Mapping[str, Any]) -> None:
    pre = options.get("preconditions") or {}
    meta = obj.get("metadata") or {}
    name = str(meta.get("name"))
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        raise conflict(
            res,
            name,
            f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta.get('uid')}",
        )
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
        raise conflict(
            res,
            name,
            "Precondition failed: ResourceVersion in precondition: "
            f"{pre['resourceVersion']}, ResourceVersion in object meta: {meta.get('resourceVersion')}",
        )


def is_dry_run(query: Mapping[str, list[str]], options: Mapping[str, Any] | None = None) -> bool:
    values = query.get("dryRun", []) + list((options or {}).get("dryRun") or [])
    if any(v != "All" for v in values):
        raise ApiError(400, "BadRequest", f"unsupported dryRun value(s): {values}")
    return bool(values)


def decode_continue(token: str) -> tuple[str, str] | None:
    if not token:
        return None
    try:
        ns, name = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(ns), str(name)
    except (ValueError, TypeError) as e:
        raise ApiError(400, "BadRequest", f"invalid continue token: {e}") from e


_VERBS = ["get", "list", "create", "update", "patch", "delete"]


def discovery(path: str, extra: tuple[Resource, ...] = ()) -> JsonObj | None:
    """The discovery documents (/api, /apis, /api/v1, /apis/GROUP/VERSION) of the served resources (and
    `extra`, the gang APIs served), so that kubectl and the automator can talk to the fake."""
    served = RESOURCES + extra
    groups = sorted({(r.group, r.version) for r in served if r.group})
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if path == "/apis":
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                 "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}}
                for g, v in groups
            ],
        }  # fmt: skip
    for group, version in [("", "v1"), *groups]:
        if path == ("/api/v1" if not group else f"/apis/{group}/{version}"):
            resources: list[JsonObj] = [
                {"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind,
                 "verbs": _VERBS}
                for r in served
                if (r.group, r.version) == (group, version)
            ]  # fmt: skip
            if not group:
                eviction = {
                    "name": "pods/eviction",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Eviction",
                }
                resources.append({**eviction, "group": "policy", "version": "v1", "verbs": ["create"]})
            gv = f"{group}/{version}" if group else version
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
    return None


def parse_path(path: str, extra: tuple[Resource, ...] = ()) -> tuple[Resource, str, str | None, str | None]:
    """(resource, namespace, name, subresource) of /api/v1/... or /apis/group/version/... (`extra`: the
    resources served beyond RESOURCES)."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    paths = {**BY_PATH, **{(r.group, r.version, r.plural): r for r in extra}} if extra else BY_PATH
    res = paths.get((group, version, rest[0])) if rest else None
    if res is None or len(rest) > 3 or (namespace and not res.namespaced):
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return res, namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
