"""Kubernetes adapter: the only code that talks to the API server.

Reads hand the planner the objects as the API's JSON gives them (camelCase dicts, `_preload_content=False`),
the same shape `kubectl get -o json` and the snapshot file have. Writes: policy/v1 Evictions (so
PodDisruptionBudgets and graceful termination are honoured), a JSON merge patch for the cooldown annotation,
and core/v1 Events (what `kubectl describe pod` shows).
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from automator.conventions import COMPONENT, LAST_RECLAIM_ANNOTATION, REPORTING_COMPONENT
from automator.model import ClusterState, JsonObj, PodKey
from automator.ports import EvictionOutcome, EvictionResult, KubernetesUnavailable
from automator.resources import rfc3339

log = logging.getLogger(__name__)

PAGE_SIZE = 500
# Finished pods hold nothing; leaving them out keeps a big cluster's list small.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
MAX_EVENT_MESSAGE = 1024  # events.k8s.io's limit; core/v1 has none but long messages help nobody


# This client version drops _content_type on POST; the header itself always goes through.
_JSON = {"Content-Type": "application/json"}

_OUTCOMES = {
    404: EvictionOutcome.NOT_FOUND,
    409: EvictionOutcome.CONFLICT,
    429: EvictionOutcome.REFUSED_PDB,
}


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An ApiClient from a kubeconfig file, or the pod's service account when none is given."""
    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)


def _status_message(e: ApiException) -> str:
    """The Status message the API server sent, else the HTTP reason."""
    try:
        body = json.loads(e.body or "")
        return str(body.get("message") or e.reason)
    except (ValueError, AttributeError):
        return str(e.reason)


@contextmanager
def _call(what: str, *also: type[Exception]) -> Iterator[None]:
    """Turn a failed API call (or one of `also`) into KubernetesUnavailable naming the call."""
    transport: tuple[type[Exception], ...] = (urllib3.exceptions.HTTPError, OSError, *also)
    try:
        yield
    except ApiException as e:
        raise KubernetesUnavailable(f"{what}: {e.status} {_status_message(e)}") from e
    except transport as e:
        raise KubernetesUnavailable(f"{what}: {e}") from e


class KubernetesAdapter:
    """List, evict, patch and record Events through the official client."""

    def __init__(
        self, api: client.ApiClient, identity: str = COMPONENT, request_timeout: float = 30.0
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.scheduling = client.SchedulingV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.identity = identity
        self.timeout = request_timeout

    def _list(
        self, what: str, call: Callable[..., Any], kind: str, api_version: str, **kwargs: Any
    ) -> list[JsonObj]:
        items: list[JsonObj] = []
        token: str | None = None
        while True:
            with _call(f"list {what}", ValueError):  # ValueError: a body that is not JSON
                resp = call(
                    limit=PAGE_SIZE,
                    _continue=token,
                    _preload_content=False,
                    _request_timeout=self.timeout,
                    **kwargs,
                )
                body = json.loads(resp.data)
            for item in body.get("items") or []:
                # List items carry no kind/apiVersion; add them so objects look like `kubectl get -o json`.
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", api_version)
                items.append(item)
            token = (body.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    def snapshot(self) -> ClusterState:
        return ClusterState(
            nodes=self._list("nodes", self.core.list_node, "Node", "v1"),
            pods=self._list(
                "pods", self.core.list_pod_for_all_namespaces, "Pod", "v1", field_selector=ACTIVE_PODS
            ),
            priority_classes=self._list(
                "priorityclasses",
                self.scheduling.list_priority_class,
                "PriorityClass",
                "scheduling.k8s.io/v1",
            ),
            pdbs=self._list(
                "poddisruptionbudgets",
                self.policy.list_pod_disruption_budget_for_all_namespaces,
                "PodDisruptionBudget",
                "policy/v1",
            ),
        )

    def evict(self, pod: PodKey) -> EvictionResult:
        body = client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=client.V1ObjectMeta(name=pod.name, namespace=pod.namespace),
        )
        try:
            self.core.create_namespaced_pod_eviction(
                pod.name,
                pod.namespace,
                body,
                _headers=_JSON,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except ApiException as e:
            outcome = _OUTCOMES.get(int(e.status or 0), EvictionOutcome.ERROR)
            return EvictionResult(outcome, e.status, _status_message(e))
        except (urllib3.exceptions.HTTPError, OSError) as e:
            return EvictionResult(EvictionOutcome.ERROR, None, str(e))
        return EvictionResult(EvictionOutcome.OK, 201)

    def annotate_preemptor(self, pod: PodKey, when: datetime) -> None:
        body = {"metadata": {"annotations": {LAST_RECLAIM_ANNOTATION: rfc3339(when)}}}
        with _call(f"patch pod {pod}"):
            self.core.patch_namespaced_pod(
                pod.name,
                pod.namespace,
                body,
                _content_type="application/merge-patch+json",
                _preload_content=False,
                _request_timeout=self.timeout,
            )

    def event(self, pod: PodKey, type_: str, reason: str, message: str, uid: str | None = None) -> None:
        """A core/v1 Event on a pod (uid included: `kubectl describe` selects Events by it)."""
        now = datetime.now(UTC).replace(microsecond=0)
        body = client.CoreV1Event(
            api_version="v1",
            kind="Event",
            # client-go names Events <object>.<unique hex>; random bits avoid clashes between replicas.
            metadata=client.V1ObjectMeta(name=f"{pod.name}.{secrets.token_hex(8)}", namespace=pod.namespace),
            involved_object=client.V1ObjectReference(
                api_version="v1", kind="Pod", namespace=pod.namespace, name=pod.name, uid=uid
            ),
            type=type_,
            reason=reason,
            message=message[:MAX_EVENT_MESSAGE],
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=REPORTING_COMPONENT,
            reporting_instance=self.identity,
        )
        with _call(f"event {reason} on {pod}"):
            self.core.create_namespaced_event(
                pod.namespace,
                body,
                _headers=_JSON,
                _preload_content=False,
                _request_timeout=self.timeout,
            )


class _Stopped(Exception):
    """Raised inside the election loop once stop() was called, to unwind the library's blocking run()."""


class _StoppableLock:
    """The client's LeaseLock, pointed at our ApiClient, refusing to talk once the elector is stopped."""

    def __init__(
        self, api: client.ApiClient, name: str, namespace: str, identity: str, stopped: threading.Event
    ):
        self._lock = LeaseLock(name, namespace, identity)
        # LeaseLock builds its API object from the global default client: point it at ours.
        self._lock.api_instance = client.CoordinationV1Api(api)
        self.name, self.namespace, self.identity = name, namespace, identity
        self._stopped = stopped

    def _check(self) -> None:
        if self._stopped.is_set():
            raise _Stopped

    def get(self, name: str, namespace: str) -> Any:
        self._check()
        return self._lock.get(name, namespace)

    def create(self, name: str, namespace: str, election_record: Any) -> Any:
        self._check()
        return self._lock.create(name, namespace, election_record)

    def update(self, name: str, namespace: str, updated_record: Any) -> Any:
        self._check()
        return self._lock.update(name, namespace, updated_record)


class LeaderElector:
    """Runs the client's LeaseLock election in a daemon thread; `is_leader` says whether to run passes.

    The library's run() returns when renewing fails; we then campaign again. A replica that cannot renew
    within renew_deadline (< lease_duration) stops acting before another one can take the lease.
    """

    def __init__(
        self,
        api: client.ApiClient,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: int = 15,
        renew_deadline: int = 10,
        retry_period: int = 2,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not lease_duration > renew_deadline > 1.2 * retry_period >= 1.2:
            raise ValueError("need lease_duration > renew_deadline > 1.2 * retry_period, retry_period >= 1")
        self.api = api
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration, self.renew_deadline, self.retry_period = (
            lease_duration,
            renew_deadline,
            retry_period,
        )
        self._leading = threading.Event()
        self._stopped = threading.Event()
        self._on_change = on_change
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set() and not self._stopped.is_set()

    def _set(self, leading: bool) -> None:
        if leading == self._leading.is_set():
            return
        if leading:
            self._leading.set()
        else:
            self._leading.clear()
        log.info(
            "%s %s lease %s/%s", self.identity, "holds" if leading else "lost", self.namespace, self.name
        )
        if self._on_change is not None:
            self._on_change(leading)

    def _config(self) -> Any:
        return electionconfig.Config(
            lock=_StoppableLock(self.api, self.name, self.namespace, self.identity, self._stopped),
            lease_duration=self.lease_duration,
            renew_deadline=self.renew_deadline,
            retry_period=self.retry_period,
            onstarted_leading=lambda: self._set(True),
            onstopped_leading=lambda: self._set(False),
        )

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                leaderelection.LeaderElection(self._config()).run()
            except _Stopped:
                break
            except Exception:  # the election must outlive API hiccups
                log.exception("leader election failed; campaigning again")
            self._set(False)
            self._stopped.wait(self.retry_period)
        self._set(False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop acting now; the thread ends at its next lease call (the lease expires, it is not released)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout)


# --- DRA capacity check (docs/dra.md): reads of resource.k8s.io/v1 and the core kinds, and its Events -----

DRA_GROUP_VERSION = "resource.k8s.io/v1"


class DraKubernetesAdapter:
    """What the DRA check reads and writes, through the KubernetesAdapter's ApiClient, paging and timeout."""

    def __init__(self, kube: KubernetesAdapter) -> None:
        self.kube = kube
        self.resource = client.ResourceV1Api(kube.api)

    def dra_available(self) -> bool:
        """Whether the API server serves resource.k8s.io/v1 (Kubernetes 1.34+); 404 means it does not."""
        try:
            with _call(f"discover {DRA_GROUP_VERSION}", ValueError):
                resp = self.resource.get_api_resources(
                    _preload_content=False, _request_timeout=self.kube.timeout
                )
                body = json.loads(resp.data)
        except KubernetesUnavailable as e:
            if isinstance(e.__cause__, ApiException) and e.__cause__.status == 404:
                return False
            raise
        return any(r.get("name") == "resourceslices" for r in body.get("resources") or [])

    def dra_objects(self) -> list[JsonObj]:
        """ResourceSlices, ResourceClaims, DeviceClasses, active Pods and Nodes, as `kubectl get -o json`."""
        kube, v1 = self.kube, DRA_GROUP_VERSION
        return [
            *kube._list("resourceslices", self.resource.list_resource_slice, "ResourceSlice", v1),
            *kube._list(
                "resourceclaims", self.resource.list_resource_claim_for_all_namespaces, "ResourceClaim", v1
            ),
            *kube._list("deviceclasses", self.resource.list_device_class, "DeviceClass", v1),
            *kube._list(
                "pods", kube.core.list_pod_for_all_namespaces, "Pod", "v1", field_selector=ACTIVE_PODS
            ),
            *kube._list("nodes", kube.core.list_node, "Node", "v1"),
        ]

    def dra_event(self, body: JsonObj) -> bool:
        """Create a core/v1 Event from a ready body (automator/dra/report.py); False when one of that name
        already exists (409: written by an earlier pass, process or replica)."""
        namespace = body["metadata"]["namespace"]
        what = f"event {body.get('reason')} {namespace}/{body['metadata']['name']}"
        try:
            self.kube.core.create_namespaced_event(
                namespace,
                body,
                _headers=_JSON,
                _preload_content=False,
                _request_timeout=self.kube.timeout,
            )
        except ApiException as e:
            if e.status == 409:
                return False
            raise KubernetesUnavailable(f"{what}: {e.status} {_status_message(e)}") from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise KubernetesUnavailable(f"{what}: {e}") from e
        return True
