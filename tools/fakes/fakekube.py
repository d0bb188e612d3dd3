"""A fake Kubernetes API server: a real HTTP server holding the cluster in memory (tests and `make demo`).

It speaks the JSON subset of the API the project's adapters call, through the official client:
- list (paged with `limit`/`continue`, `fieldSelector` with the field labels the real server supports for
  the resource, else 400; `labelSelector`), get, create, update (PUT, 409 on a stale resourceVersion),
  patch (merge, strategic merge read as merge, JSON patch) and delete (DeleteOptions preconditions) of
  Pods, Nodes, Events, Namespaces, PriorityClasses, PodDisruptionBudgets, coordination.k8s.io Leases and
  resource.k8s.io/v1 ResourceSlices, ResourceClaims and DeviceClasses (empty unless loaded);
- policy/v1 Evictions: 404 for a missing pod, 409 when `deleteOptions.preconditions` (uid,
  resourceVersion) do not match, 429 when a matching PodDisruptionBudget allows no disruption,
  `dryRun=All` answered without a change; an accepted eviction makes the pod terminating
  (deletionTimestamp = now + grace period) and it still holds its resources until it is gone;
- every error is a v1 Status with the real server's reason and code; every object has a resourceVersion;
- discovery documents, so kubectl works against it.
The API's vocabulary (resources, Status errors, selectors, patches, paths) is tools/fakes/kubeapi.py.

`FakeApiServer.step()` is the cluster's kubelet, scheduler and ReplicaSet controller (tools/fakes/fakesim.py):
terminating pods disappear after their grace period, a Deployment's ReplicaSet keeps its number of pods,
and pending pods are bound to a node where they fit. `simulate=True` runs it in
a background thread; tests call it themselves. Every request is recorded (`calls`, `requests()`,
`writes()`: method, path, query, content type and body, what the least-privilege RBAC test reads), and
`answer()`/`fail()` script an answer (any code, Status details and headers such as `Retry-After`, late by
a delay, a non-JSON body, for requests whose body contains a text: 409s, 429s, timeouts, hanging Lease
renewals). The demo and the automator's Kubernetes suites use it (docs/demo.md lists them). Not verified
against a real kube-apiserver: docs/demo.md says what differs.

Bounded: at most `max_connections` requests in flight (others get 503), a listen backlog, a socket
timeout per connection and a maximum body size.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import logging
import re
import secrets
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from tools.fakes import fakesim
from tools.fakes.fakesim import rfc3339
from tools.fakes.kubeapi import (
    BY_KIND,
    GANG_RESOURCES,
    KUEUE_RESOURCES,
    RESOURCES,
    ApiError,
    JsonObj,
    Query,
    Resource,
    check_preconditions,
    conflict,
    decode_continue,
    details,
    discovery,
    field_matcher,
    is_dry_run,
    json_patch,
    label_matcher,
    load_objects,
    merge_patch,
    not_found,
    parse_path,
)

log = logging.getLogger("fakekube")

Clock = Callable[[], float]

MAX_BODY = 4 * 1024 * 1024
MAX_CALLS = 20_000  # requests remembered (oldest dropped)
MAX_EVENTS = 5_000  # Events kept (oldest dropped), as the real server's TTL would


# --- the store -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: Query
    content_type: str
    body: Any
    code: int = 0


@dataclass
class _Scripted:
    method: str
    path: re.Pattern[str]
    code: int
    body: JsonObj | str
    headers: dict[str, str]
    times: int
    delay: float = 0.0  # seconds to wait before answering (a slow or hanging server)
    body_contains: str | None = None  # only requests whose raw body contains this text


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


@dataclass
class Store:
    """Objects by resource and (namespace, name), with a global resourceVersion."""

    clock: Clock = time.time
    objects: dict[str, dict[tuple[str, str], JsonObj]] = field(
        default_factory=lambda: {r.plural: {} for r in RESOURCES}
    )
    revision: int = 1
    deadlines: dict[tuple[str, str], float] = field(default_factory=dict)  # terminating pods

    def stamp(self, obj: JsonObj) -> JsonObj:
        self.revision += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.revision)
        return obj

    def add(self, obj: JsonObj, res: Resource | None = None) -> JsonObj:
        """Store an object as given (loading), filling uid, creationTimestamp and resourceVersion."""
        res = res or BY_KIND.get(str(obj.get("kind")))
        if res is None:
            raise ValueError(f"fakekube does not serve kind {obj.get('kind')!r}")
        obj = copy.deepcopy(obj)
        obj["apiVersion"] = res.api_version
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", rfc3339(self.clock()))
        self.objects.setdefault(res.plural, {})[_key(obj)] = self.stamp(obj)
        if res.kind == "Event":
            events = self.objects["events"]
            while len(events) > MAX_EVENTS:
                del events[next(iter(events))]
        return obj

    def get(self, res: Resource, namespace: str, name: str) -> JsonObj:
        obj = self.objects[res.plural].get((namespace if res.namespaced else "", name))
        if obj is None:
            raise not_found(res, name)
        return obj

    def remove(self, plural: str, obj: Mapping[str, Any]) -> None:
        self.objects[plural].pop(_key(obj), None)
        if plural == "pods":
            self.deadlines.pop(_key(obj), None)
        self.revision += 1

    def pods(self) -> list[JsonObj]:
        return list(self.objects["pods"].values())

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str, component: str) -> None:
        """An Event as a cluster component (scheduler, kubelet) would write it."""
        meta = obj.get("metadata") or {}
        now = rfc3339(self.clock())
        self.add(
            {
                "kind": "Event",
                "metadata": {
                    "name": f"{meta.get('name')}.{secrets.token_hex(8)}",
                    "namespace": meta.get("namespace") or "default",
                },
                "involvedObject": {
                    "apiVersion": obj.get("apiVersion", "v1"),
                    "kind": obj.get("kind", "Pod"),
                    "namespace": meta.get("namespace"),
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                },
                "type": type_,
                "reason": reason,
                "message": message,
                "source": {"component": component},
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )


def write_kubeconfig(path: Path, url: str) -> Path:
    """Write a kubeconfig for an API server at `url` (plain HTTP, no credentials)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "nobody", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "nobody"}}],
        "current-context": "fake",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class FakeApiServer:
    """The fake API server. `with FakeApiServer(objects).start() as kube: kube.url ...`"""

    def __init__(
        self,
        objects: Iterable[JsonObj] = (),
        *,
        clock: Clock = time.time,
        simulate: bool = False,
        tick: float = 0.25,
        devices: fakesim.GpuDevices | Sequence[fakesim.GpuDevices] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_connections: int = 32,
        request_timeout: float = 10.0,
        gang_apis: Iterable[str] = (),
        kueue_apis: Iterable[str] = (),
    ) -> None:
        self.store = Store(clock=clock)
        # The gang APIs served ("group/version"), and their objects by (group, version, plural): listed only.
        self.gang_apis = tuple(r for r in GANG_RESOURCES if r.api_version in set(gang_apis))
        self.gang_objects: dict[tuple[str, str, str], list[JsonObj]] = {}
        self.lock = threading.RLock()
        self.calls: deque[Call] = deque(maxlen=MAX_CALLS)
        self._scripted_answers: list[_Scripted] = []
        # The Kueue versions served ("kueue.x-k8s.io/v1beta2"...): its objects are stored whatever version
        # they were written in and read in the version asked for, as a conversion webhook would give them.
        self.kueue_apis = tuple(r for r in KUEUE_RESOURCES if r.api_version in set(kueue_apis))
        for r in KUEUE_RESOURCES:
            self.store.objects.setdefault(r.plural, {})
        gang_kinds = {(r.api_version, r.kind): r for r in GANG_RESOURCES}
        kueue_kinds = {(r.api_version, r.kind): r for r in KUEUE_RESOURCES}
        for obj in objects:
            gang = gang_kinds.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
            kueue = kueue_kinds.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
            if kueue is not None:
                self.store.add(obj, kueue)
            elif gang is None:
                self.store.add(obj)
            else:
                self.gang_objects.setdefault((gang.group, gang.version, gang.plural), []).append(obj)
        if devices is None:
            devices = []
        elif isinstance(devices, fakesim.GpuDevices):
            devices = [devices]
        self.cluster = fakesim.Cluster(self.store, list(devices))  # one per GPU node
        self.simulate, self.tick = simulate, tick
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server = _Server((host, port), _handler(self, request_timeout), max_connections)
        self.url = f"http://{host}:{self._server.server_address[1]}"

    # --- lifecycle ---

    def start(self) -> FakeApiServer:
        serve = threading.Thread(target=self._server.serve_forever, name="fakekube", daemon=True)
        self._threads.append(serve)
        if self.simulate:
            self._threads.append(threading.Thread(target=self._simulate, name="fakekube-sim", daemon=True))
        for t in self._threads:
            t.start()
        if self.simulate:
            self.step()  # the starting state is scheduled and written out before anyone asks
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._server.shutdown()
        self._server.server_close()
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> FakeApiServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _simulate(self) -> None:
        while not self._stopped.wait(self.tick):
            try:
                self.step()
            except Exception:  # the simulation must outlive a bad object
                log.exception("simulation step failed")

    def step(self) -> None:
        """One round of kubelet and scheduler (tools/fakes/fakesim.py)."""
        with self.lock:
            self.cluster.step()

    # --- inspection and scripting for tests ---

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig for this server (plain HTTP, no credentials)."""
        return write_kubeconfig(path, self.url)

    def writes(self) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.method not in ("GET", "HEAD")]

    def objects_of(self, plural: str) -> list[JsonObj]:
        with self.lock:
            return copy.deepcopy(list(self.store.objects[plural].values()))

    def pod(self, namespace: str, name: str) -> JsonObj | None:
        with self.lock:
            obj = self.store.objects["pods"].get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def put(self, obj: JsonObj) -> None:
        with self.lock:
            self.store.add(obj)

    def remove(self, plural: str, namespace: str, name: str) -> None:
        """Drop an object at once (no grace period, no Event), as if it had never been there."""
        with self.lock:
            self.store.remove(plural, {"metadata": {"namespace": namespace, "name": name}})

    def answer(
        self,
        method: str,
        path: str,
        code: int,
        body: JsonObj | str,
        times: int = 1,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
        body_contains: str | None = None,
    ) -> None:
        """Answer the next `times` requests matching method and path (a regex), and whose raw body contains
        `body_contains` when given, with this body (a str is sent as it is: not JSON), code and headers,
        `delay` seconds late (the request is recorded in `calls` on arrival). Nothing in the store changes."""
        with self.lock:
            self._scripted_answers.append(
                _Scripted(
                    method, re.compile(path), code, body, dict(headers or {}), times, delay, body_contains
                )
            )

    def fail(
        self,
        method: str,
        path: str,
        code: int,
        reason: str,
        message: str,
        times: int = 1,
        *,
        details: JsonObj | None = None,
        delay: float = 0.0,
        body_contains: str | None = None,
        **headers: str,
    ) -> None:
        """Answer the next `times` matching requests with a v1 Status of this code, reason, message and
        details (409 conflicts, 429 throttling with `Retry-After`, 5xx...); see answer()."""
        status = ApiError(code, reason, message, details).status()
        self.answer(method, path, code, status, times, headers, delay, body_contains)

    def requests(self, method: str | None = None, path: str | None = None) -> list[Call]:
        """The requests recorded so far (all, or those of this method and/or exact path), oldest first."""
        with self.lock:
            return [
                c for c in self.calls if method in (None, c.method) and path in (None, c.path)
            ]  # fmt: skip

    # --- request handling ---

    def handle(
        self, method: str, target: str, content_type: str, raw: bytes
    ) -> tuple[int, JsonObj | str, dict[str, str]]:
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        body: Any = None
        code, headers, delay = 500, {}, 0.0
        try:
            try:
                body = json.loads(raw) if raw else None
            except ValueError as e:
                raise ApiError(400, "BadRequest", f"body is not JSON: {e}") from e
            with self.lock:
                scripted = self._scripted(method, parts.path, raw)
                if scripted is not None:
                    code, answer, headers = scripted.code, copy.deepcopy(scripted.body), scripted.headers
                    delay = scripted.delay
                else:
                    code, answer = self._route(method, parts.path, query, content_type, body)
        except ApiError as e:
            code, answer, headers = e.code, e.status(), e.headers
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as e:  # a malformed request
            log.warning("%s %s: %s", method, target, e)
            code, answer = 400, ApiError(400, "BadRequest", f"{type(e).__name__}: {e}").status()
        with self.lock:
            self.calls.append(Call(method, parts.path, query, content_type, body, code))
        if delay:
            self._stopped.wait(delay)
        return code, answer, headers

    def _scripted(self, method: str, path: str, raw: bytes) -> _Scripted | None:
        for s in self._scripted_answers:
            if s.times > 0 and s.method == method and s.path.fullmatch(path):
                if s.body_contains is not None and s.body_contains.encode() not in raw:
                    continue
                s.times -= 1
                return s
        return None

    def _route(
        self, method: str, path: str, query: Query, content_type: str, body: Any
    ) -> tuple[int, JsonObj]:
        if path in ("/version", "/healthz", "/readyz", "/livez"):
            return 200, {"major": "1", "minor": "34", "gitVersion": "v1.34.0-fakekube"}
        extra = self.gang_apis + self.kueue_apis
        if method == "GET" and (found := discovery(path.rstrip("/") or "/", extra)) is not None:
            return 200, found
        if method == "GET" and (listed := self._gang_list(path)) is not None:
            return 200, listed
        res, namespace, name, sub = parse_path(path, self.kueue_apis)
        if "watch" in query and query["watch"] != ["false"]:
            raise ApiError(405, "MethodNotAllowed", "fakekube does not serve watches")
        if sub == "eviction" and res.kind == "Pod" and method == "POST" and name is not None:
            return 201, self._evict(namespace, name, body, query)
        if sub:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({sub})")
        if name is None:
            if method == "GET":
                return 200, self._list(res, namespace, query)
            if method == "POST" and (namespace or not res.namespaced):
                return 201, self._create(res, namespace, body, query)
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {res.qualified}")
        if method == "GET":
            return 200, _out(self.store.get(res, namespace, name))
        if method == "PUT":
            return 200, self._update(res, namespace, name, body, query)
        if method == "PATCH":
            return 200, self._patch(res, namespace, name, content_type, body, query)
        if method == "DELETE":
            return 200, self._delete(res, namespace, name, body or {}, query)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {res.qualified}")

    def _gang_list(self, path: str) -> JsonObj | None:
        """A cluster-wide list of a gang API served (one page), None for other paths."""
        for r in self.gang_apis:
            if path.rstrip("/") == f"/apis/{r.group}/{r.version}/{r.plural}":
                items = [_out(o) for o in self.gang_objects.get((r.group, r.version, r.plural), [])]
                meta = {"resourceVersion": str(self.store.revision)}
                return {
                    "kind": f"{r.kind}List",
                    "apiVersion": r.api_version,
                    "metadata": meta,
                    "items": items,
                }
        return None

    def _list(self, res: Resource, namespace: str, query: Query) -> JsonObj:
        matches_field = field_matcher(res, query.get("fieldSelector", [""])[0])
        matches_label = label_matcher(query.get("labelSelector", [""])[0])
        items = sorted(self.store.objects[res.plural].items())
        after = decode_continue(query.get("continue", [""])[0])
        limit = int(query.get("limit", ["0"])[0] or 0)
        out: list[JsonObj] = []
        token = ""
        last: tuple[str, str] = ("", "")
        for key, obj in items:
            if after is not None and key <= after:
                continue
            if namespace and key[0] != namespace:
                continue
            if not (matches_field(obj) and matches_label(obj)):
                continue
            if limit and len(out) == limit:
                token = base64.urlsafe_b64encode(json.dumps(list(last)).encode()).decode()
                break
            out.append({k: v for k, v in copy.deepcopy(obj).items() if k not in ("kind", "apiVersion")})
            last = key
        meta: JsonObj = {"resourceVersion": str(self.store.revision)}
        if token:
            meta["continue"] = token
        return {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": out}

    def _checked_body(self, res: Resource, namespace: str, body: Any) -> JsonObj:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        if body.get("kind") not in (None, res.kind):
            raise ApiError(400, "BadRequest", f"kind {body.get('kind')!r} sent to {res.qualified}")
        meta = body.setdefault("metadata", {})
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = namespace
        body["kind"] = res.kind
        return body

    def _create(self, res: Resource, namespace: str, body: Any, query: Query) -> JsonObj:
        obj = self._checked_body(res, namespace, body)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        if not meta.get("name"):
            raise ApiError(422, "Invalid", f"{res.kind} is invalid: metadata.name: Required value")
        if _key(obj) in self.store.objects[res.plural]:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{res.qualified} "{meta["name"]}" already exists',
                details(res, meta["name"]),
            )
        meta.pop("resourceVersion", None)
        if is_dry_run(query):
            return obj
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self.store.clock())
        return _out(self.store.add(obj))

    def _replace(self, res: Resource, current: JsonObj, new: JsonObj, query: Query) -> JsonObj:
        meta, old = new.setdefault("metadata", {}), current["metadata"]
        name = old["name"]
        if meta.get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        if meta.get("resourceVersion") and meta["resourceVersion"] != old.get("resourceVersion"):
            raise conflict(res, name, "the object has been modified; please apply your changes to the latest "
                           "version and try again")  # fmt: skip
        if meta.get("uid") and meta["uid"] != old.get("uid"):
            raise conflict(res, name, f"Precondition failed: UID in precondition: {meta['uid']}, "
                           f"UID in object meta: {old.get('uid')}")  # fmt: skip
        for kept in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp"):
            if kept in old:
                meta[kept] = old[kept]
        new["kind"], new["apiVersion"] = res.kind, res.api_version
        if is_dry_run(query):
            return new
        self.store.objects[res.plural][_key(current)] = self.store.stamp(new)
        return _out(new)

    def _update(self, res: Resource, namespace: str, name: str, body: Any, query: Query) -> JsonObj:
        current = self.store.get(res, namespace, name)
        return self._replace(res, current, self._checked_body(res, namespace, body), query)

    def _patch(
        self,
        res: Resource,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        query: Query,
    ) -> JsonObj:
        current = self.store.get(res, namespace, name)
        kind = content_type.split(";")[0].strip()
        if kind in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "a merge patch is a JSON object")
            patched = merge_patch(current, body)
        elif kind == "application/json-patch+json":
            patched = json_patch(current, body)
        else:
            raise ApiError(
                415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {kind}"
            )
        return self._replace(res, current, patched, query)

    def _delete(self, res: Resource, namespace: str, name: str, options: Any, query: Query) -> JsonObj:
        if not isinstance(options, dict):
            raise ApiError(400, "BadRequest", "DeleteOptions must be a JSON object")
        obj = self.store.get(res, namespace, name)
        check_preconditions(res, obj, options)
        if is_dry_run(query, options):
            return _out(obj)
        if res.kind != "Pod":
            self.store.remove(res.plural, obj)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": details(res, name)}  # fmt: skip
        grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds", [None])[0])
        return _out(self.cluster.terminate(obj, None if grace is None else int(grace)))

    def _evict(self, namespace: str, name: str, body: Any, query: Query) -> JsonObj:
        res = BY_KIND["Pod"]
        if not isinstance(body, dict) or body.get("kind") != "Eviction":
            raise ApiError(400, "BadRequest", "the body must be a policy/v1 Eviction")
        if (body.get("metadata") or {}).get("name") not in (None, name):
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        pod = self.store.get(res, namespace, name)
        options = body.get("deleteOptions") or {}
        check_preconditions(res, pod, options)
        dry_run = is_dry_run(query, options)
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") is None and (pod.get("status") or {}).get("phase") == "Running":
            budget = self.cluster.blocking_budget(pod)
            if budget is not None:
                raise ApiError(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget "
                                 f"{budget} needs more healthy pods to allow the eviction"}]},
                )  # fmt: skip
        if not dry_run and meta.get("deletionTimestamp") is None:
            self.cluster.spend_budget(pod)
            grace = options.get("gracePeriodSeconds")
            self.cluster.terminate(pod, None if grace is None else int(grace))
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _out(obj: JsonObj) -> JsonObj:
    return copy.deepcopy(obj)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], limit: int) -> None:
        self._slots = threading.BoundedSemaphore(limit)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
            finally:
                self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client closing its keep-alive connection is routine; anything else is worth a line.
        log.debug("connection from %s ended with an error", client_address, exc_info=True)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _handler(kube: FakeApiServer, timeout: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.settimeout(timeout)  # what StreamRequestHandler.timeout does, per server

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, ApiError(413, "RequestEntityTooLarge", "request body too large").status(), {})
                self.close_connection = True
                return
            raw = self.rfile.read(length) if length else b""
            code, body, headers = kube.handle(
                self.command, self.path, self.headers.get("Content-Type", ""), raw
            )
            self._send(code, body, headers)

        def _send(self, code: int, body: JsonObj | str, headers: Mapping[str, str]) -> None:
            # A scripted text body goes as it is (a proxy's HTML page, say), with its own Content-Type.
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            extra = dict(headers)
            self.send_response(code)
            self.send_header("Content-Type", extra.pop("Content-Type", "application/json"))
            self.send_header("Content-Length", str(len(data)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    return Handler


def main() -> int:
    """`python -m tools.fakes.fakekube --objects FILE [--port N]`: serve a cluster file until interrupted."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--objects", type=Path, required=True, help="YAML List or documents of objects")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--scenario", type=Path, help="mock exporter scenario of the GPU node to follow")
    parser.add_argument(
        "--scenario-out", type=Path, help="where to write the scenario as the cluster changes"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    devices = None
    if args.scenario:
        devices = fakesim.GpuDevices.from_file(args.scenario, args.scenario_out or args.scenario)
    kube = FakeApiServer(load_objects(args.objects), simulate=True, devices=devices, port=args.port).start()
    print(f"fakekube serving on {kube.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    kube.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
