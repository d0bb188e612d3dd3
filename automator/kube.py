"""Kubernetes adapter: the only code that talks to the API server.

Reads hand the planner plain records of the fields it uses, in the shape the API's JSON gives them
(camelCase dicts, `_preload_content=False`), the same shape `kubectl get -o json` and the snapshot file have;
pods only when pending or on a node with GPUs, in pages. Writes: policy/v1 Evictions with a uid precondition
(so PodDisruptionBudgets and graceful termination are honoured, and a pod recreated under the same name is
never evicted), a JSON merge patch of the automator's own annotations, and core/v1 Events (what
`kubectl describe pod` shows). Every call has a timeout, the Lease renewals included (LeaderElector).
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from automator.conventions import COMPONENT, DEFAULT_GPU_RESOURCE, REPORTING_COMPONENT
from automator.model import ClusterState, JsonObj, PodKey
from automator.ports import EvictionOutcome, EvictionResult, KubernetesUnavailable
from automator.records import record
from automator.resources import FieldError, node_allocatable

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
}
# The Eviction API's 429 for a PodDisruptionBudget carries this cause (policy/v1 DisruptionBudgetCause);
# older servers only say so in the message. Any other 429 is throttling (API Priority and Fairness).
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"


def is_pdb_refusal(body: JsonObj, message: str) -> bool:
    """A 429 from the Eviction API that names a disruption budget (not API throttling)."""
    causes = (body.get("details") or {}).get("causes") or []
    if any(isinstance(c, dict) and c.get("reason") == DISRUPTION_BUDGET_CAUSE for c in causes):
        return True
    return "disruption budget" in message.lower()


def _retry_after(e: ApiException) -> float | None:
    headers = e.headers or {}
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An ApiClient from a kubeconfig file, or the pod's service account when none is given."""
    cfg = client.Configuration()
    # No hidden retries: a call's time is bounded by its own timeout; the next pass or round tries again.
    cfg.retries = False
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
    """List, evict, patch and record Events through the official client; every call has a timeout."""

    def __init__(
        self,
        api: client.ApiClient,
        identity: str = COMPONENT,
        request_timeout: float = 30.0,
        gpu_resources: tuple[str, ...] = (DEFAULT_GPU_RESOURCE,),
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.scheduling = client.SchedulingV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.identity = identity
        self.timeout = request_timeout
        self.gpu_resources = gpu_resources

    def _list(
        self,
        what: str,
        call: Callable[..., Any],
        kind: str,
        api_version: str,
        keep: Callable[[JsonObj], JsonObj | None] | None = None,
        **kwargs: Any,
    ) -> list[JsonObj]:
        """Every page of a list; `keep` turns each item into the record kept (None: dropped)."""
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
                (item.get("metadata") or {}).pop("managedFields", None)
                kept = keep(item) if keep is not None else item
                if kept is not None:
                    items.append(kept)
            token = (body.get("metadata") or {}).get("continue") or None
            if token is None:
                return items

    def _gpu_node(self, node: JsonObj) -> bool:
        try:
            return node_allocatable(node, self.gpu_resources).gpus > 0
        except FieldError:
            return True  # unreadable: keep it, the planner reports it

    def snapshot(self) -> ClusterState:
        nodes = self._list("nodes", self.core.list_node, "Node", "v1")
        gpu_nodes = {str((n.get("metadata") or {}).get("name")) for n in nodes if self._gpu_node(n)}

        def keep_pod(pod: JsonObj) -> JsonObj | None:
            bound = (pod.get("spec") or {}).get("nodeName")
            # Pending pods (preemptors) and pods on GPU nodes (victims, or using that node's cpu/memory).
            return record(pod) if not bound or bound in gpu_nodes else None

        return ClusterState(
            nodes=nodes,
            pods=self._list(
                "pods",
                self.core.list_pod_for_all_namespaces,
                "Pod",
                "v1",
                keep=keep_pod,
                field_selector=ACTIVE_PODS,
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

    def get_pod(self, pod: PodKey) -> JsonObj | None:
        try:
            resp = self.core.read_namespaced_pod(
                pod.name, pod.namespace, _preload_content=False, _request_timeout=self.timeout
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise KubernetesUnavailable(f"get pod {pod}: {e.status} {_status_message(e)}") from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise KubernetesUnavailable(f"get pod {pod}: {e}") from e
        try:
            obj = json.loads(resp.data)
        except ValueError as e:
            raise KubernetesUnavailable(f"get pod {pod}: {e}") from e
        if not isinstance(obj, dict):
            raise KubernetesUnavailable(f"get pod {pod}: the answer is not an object")
        obj.setdefault("kind", "Pod")  # so record() keeps only a pod's fields
        obj.setdefault("apiVersion", "v1")
        return record(obj)

    def evict(self, pod: PodKey, uid: str | None = None, dry_run: bool = False) -> EvictionResult:
        body: JsonObj = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        }
        options: JsonObj = {}
        if uid:
            options["preconditions"] = {"uid": uid}
        if dry_run:
            options["dryRun"] = ["All"]
        if options:
            body["deleteOptions"] = options
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
            message = _status_message(e)
            status = int(e.status or 0)
            if status == 429:
                try:
                    parsed = json.loads(e.body or "{}")
                except ValueError:
                    parsed = {}
                pdb = is_pdb_refusal(parsed if isinstance(parsed, dict) else {}, message)
                outcome = EvictionOutcome.REFUSED_PDB if pdb else EvictionOutcome.THROTTLED
                return EvictionResult(outcome, 429, message, None if pdb else _retry_after(e))
            if status == 0:  # the client's own errors (no HTTP answer)
                return EvictionResult(EvictionOutcome.UNKNOWN, None, str(e))
            return EvictionResult(_OUTCOMES.get(status, EvictionOutcome.ERROR), e.status, message)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            # A timeout or a reset: the server may have accepted it. The caller reads the pod.
            return EvictionResult(EvictionOutcome.UNKNOWN, None, str(e))
        return EvictionResult(EvictionOutcome.OK, 201)

    def annotate_preemptor(self, pod: PodKey, annotations: Mapping[str, str], uid: str | None = None) -> None:
        meta: JsonObj = {"annotations": dict(annotations)}
        if uid:
            meta["uid"] = uid  # a precondition: the patch fails (409) if the pod was replaced
        with _call(f"patch pod {pod}"):
            self.core.patch_namespaced_pod(
                pod.name,
                pod.namespace,
                {"metadata": meta},
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


def _micro_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """A Lease-based election in a daemon thread, every call with a timeout; `is_leader` fences the writes.

    The replica is leader only while its last successful renewal (timed from the start of the call) is
    younger than renew_deadline, whatever its thread is doing: a renewal that hangs makes it a follower
    before the lease (lease_duration > renew_deadline) can go to another replica. Another holder's lease is
    judged expired by this replica's own monotonic clock (lease_duration after the record last changed),
    so clock skew between replicas does not matter. Updates use the Lease's resourceVersion.
    """

    def __init__(
        self,
        api: client.ApiClient,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15,
        renew_deadline: float = 10,
        retry_period: float = 2,
        on_change: Callable[[bool], None] | None = None,
        request_timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.coordination = client.CoordinationV1Api(api)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_duration, self.renew_deadline, self.retry_period = (
            lease_duration,
            renew_deadline,
            retry_period,
        )
        # Each call must end well within the renew deadline.
        self.request_timeout = request_timeout or max(0.5, (renew_deadline - retry_period) / 2)
        self._clock = clock
        self._renewed_at: float | None = None
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._leading = False
        self._stopped = threading.Event()
        self._on_change = on_change
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        renewed = self._renewed_at
        return (
            not self._stopped.is_set()
            and renewed is not None
            and self._clock() - renewed < self.renew_deadline
        )

    def _set(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        log.info(
            "%s %s lease %s/%s", self.identity, "holds" if leading else "lost", self.namespace, self.name
        )
        if self._on_change is not None:
            self._on_change(leading)

    def _record(self, now: datetime, lease: JsonObj | None) -> JsonObj:
        spec = (lease or {}).get("spec") or {}
        mine = spec.get("holderIdentity") == self.identity
        record: JsonObj = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": spec.get("acquireTime") if mine and spec.get("acquireTime") else _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if mine or lease is None else 1),
        }
        return record

    def try_acquire_or_renew(self) -> bool:
        """One round: read the Lease, then create, take over or renew it. True when this replica holds it."""
        started = self._clock()
        now = datetime.now(UTC)
        t = self.request_timeout
        try:
            resp = self.coordination.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=t
            )
            lease: JsonObj | None = json.loads(resp.data)
        except ApiException as e:
            if e.status != 404:
                raise
            lease = None
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._record(now, None),
            }
            self.coordination.create_namespaced_lease(
                self.namespace, body, _preload_content=False, _request_timeout=t
            )
            self._renewed_at = started
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        observed = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if observed != self._observed:
            self._observed, self._observed_at = observed, started
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and started - self._observed_at < duration:
            return False  # held by another replica whose lease has not expired (by our clock)
        lease["spec"] = self._record(now, lease)
        self.coordination.replace_namespaced_lease(
            self.name, self.namespace, lease, _preload_content=False, _request_timeout=t
        )
        self._renewed_at = started
        return True

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                self.try_acquire_or_renew()
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as e:
                log.warning("lease %s/%s: %s", self.namespace, self.name, e)
            except Exception:  # the election must outlive anything
                log.exception("leader election round failed")
            self._set(self.is_leader)
            self._stopped.wait(self.retry_period)
        self._set(False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop acting now; the lease expires, it is not released."""
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
