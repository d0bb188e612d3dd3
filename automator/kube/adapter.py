"""The reclaim automator's Kubernetes adapter: cluster reads for the planner, and its writes.

Reads hand the planner and the KEDA cache records (automator/objects/), each page of the API's JSON
(`_preload_content=False`, the shape `kubectl get -o json` and the snapshot file have) decoded straight
into them; the planner's pods only when pending or on a node with GPUs, kept across passes by version.
The DRA check reads whole objects (managedFields dropped). Writes: policy/v1 Evictions with a uid
precondition (so PodDisruptionBudgets and graceful termination are honoured, and a pod recreated under the
same name is never evicted), a JSON merge patch of the automator's own annotations, and core/v1 Events
(what `kubectl describe pod` shows). Every call has a timeout. The KEDA cache and the DRA check read
through the public list methods.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from automator.kube.client import (
    ACTIVE_PODS,
    JSON_HEADERS,
    TRANSPORT_ERRORS,
    api_call,
    list_all,
    objects_of,
    records_of,
    retry_after,
    status_message,
)
from automator.kube.kueue import kueue_version, list_kueue, patch_workload
from automator.objects.cache import RecordCache
from automator.objects.cluster import ClusterState
from automator.objects.gang import GANG_APIS, GroupObject, group_object
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.kueue import KUEUE_GROUP, NO_KUEUE, KueueObjects
from automator.objects.node import Node, node_record
from automator.objects.pdb import pdb_record
from automator.objects.pod import Pod, decode_one_pod, pod_page_decoder, pod_record
from automator.objects.priority_class import priority_class_record
from automator.objects.resources import FieldError
from automator.objects.workload import WorkloadObject, workload_record
from automator.ports import EvictionOutcome, EvictionResult, KubernetesUnavailable
from steward_common.conventions import COMPONENT, DEFAULT_GPU_RESOURCE, REPORTING_COMPONENT
from steward_common.gc_pause import gc_paused

log = logging.getLogger(__name__)

MAX_EVENT_MESSAGE = 1024  # events.k8s.io's limit; core/v1 has none but long messages help nobody

_OUTCOMES = {
    404: EvictionOutcome.NOT_FOUND,
    409: EvictionOutcome.CONFLICT,
}
# The Eviction API's 429 for a PodDisruptionBudget carries this cause (policy/v1 DisruptionBudgetCause);
# older servers only say so in the message. Any other 429 is throttling (API Priority and Fairness).
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"

# The apps/v1 kinds the KEDA cache reads per namespace (docs/keda.md).
AppsKind = Literal["ReplicaSet", "Deployment", "StatefulSet"]


def is_pdb_refusal(body: JsonObj, message: str) -> bool:
    """A 429 from the Eviction API that names a disruption budget (not API throttling)."""
    causes = (body.get("details") or {}).get("causes") or []
    if any(isinstance(c, dict) and c.get("reason") == DISRUPTION_BUDGET_CAUSE for c in causes):
        return True
    return "disruption budget" in message.lower()


def _refusal(e: ApiException) -> EvictionResult:
    """What an Eviction answered with an error status means."""
    message = status_message(e)
    status = int(e.status or 0)
    if status == 429:
        try:
            parsed = json.loads(e.body or "{}")
        except ValueError:
            parsed = {}
        pdb = is_pdb_refusal(parsed if isinstance(parsed, dict) else {}, message)
        outcome = EvictionOutcome.REFUSED_PDB if pdb else EvictionOutcome.THROTTLED
        return EvictionResult(outcome, 429, message, None if pdb else retry_after(e))
    if status == 0:  # the client's own errors (no HTTP answer)
        return EvictionResult(EvictionOutcome.UNKNOWN, None, str(e))
    if status >= 500:
        # The API server's own timeout (504) or a proxy's 502/503: the delete may still commit.
        return EvictionResult(EvictionOutcome.UNKNOWN, status, message)
    return EvictionResult(_OUTCOMES.get(status, EvictionOutcome.ERROR), e.status, message)


class KubernetesAdapter:
    """List, evict, patch and record Events through the official client; every call has a timeout."""

    def __init__(
        self,
        api: client.ApiClient,
        identity: str = COMPONENT,
        request_timeout: float = 30.0,
        gpu_resources: tuple[str, ...] = (DEFAULT_GPU_RESOURCE,),
        write_timeout: float | None = None,
        kueue: bool = False,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.scheduling = client.SchedulingV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.discovery = client.ApisApi(api)
        self.batch = client.BatchV1Api(api)
        self.gang_apis_missing: set[str] | None = None  # logged when it changes
        # Kueue's objects are listed only when --kueue is not off; the version read, logged when it changes
        self.kueue = kueue
        self.kueue_version_read: str | None = ""
        self.identity = identity
        self.timeout = request_timeout
        # Pod records by version across passes: a pass that lists an unchanged pod does not decode it again.
        self.pod_records = RecordCache[Pod]()
        # A write must end before a lease checked just before it can pass to another replica.
        self.write_timeout = min(request_timeout, write_timeout or request_timeout)
        self.gpu_resources = gpu_resources

    # --- reads ---

    def nodes(self) -> list[JsonObj]:
        """Every Node, as `kubectl get -o json` shows it (managedFields dropped)."""
        return list(list_all("nodes", self.core.list_node, objects_of("Node", "v1"), self.timeout))

    def active_pods(self) -> list[JsonObj]:
        """Every pod not finished (Succeeded, Failed), whole (managedFields dropped)."""
        call, decode = self.core.list_pod_for_all_namespaces, objects_of("Pod", "v1")
        return list(list_all("pods", call, decode, self.timeout, field_selector=ACTIVE_PODS))

    def pods_in(self, namespace: str) -> list[Pod]:
        """The records of one namespace's pods."""
        call, decode = self.core.list_namespaced_pod, records_of(pod_record)
        return list(list_all(f"pods in {namespace}", call, decode, self.timeout, namespace=namespace))

    def apps_objects(self, namespace: str, kind: AppsKind) -> list[WorkloadObject]:
        """The records of one namespace's ReplicaSets, Deployments or StatefulSets (apps/v1)."""
        call = {
            "ReplicaSet": self.apps.list_namespaced_replica_set,
            "Deployment": self.apps.list_namespaced_deployment,
            "StatefulSet": self.apps.list_namespaced_stateful_set,
        }[kind]
        what, decode = f"{kind.lower()}s in {namespace}", records_of(workload_record)
        return list(list_all(what, call, decode, self.timeout, namespace=namespace))

    def _gpu_node(self, node: Node) -> bool:
        try:
            return node.offers(self.gpu_resources).gpus > 0
        except FieldError:
            return True  # unreadable: keep it, the planner reports it

    def snapshot(self) -> ClusterState:
        """What the planner reads: Nodes, pending pods and pods on GPU nodes (records), classes, PDBs."""
        with gc_paused():  # tens of thousands of records, no cycles: a collection would walk them all
            nodes = list(list_all("nodes", self.core.list_node, records_of(node_record), self.timeout))
            gpu_nodes = {n.name for n in nodes if self._gpu_node(n)}
            served = self._served()
            self.pod_records.start()
            listed = list_all(
                "pods",
                self.core.list_pod_for_all_namespaces,
                pod_page_decoder(self.pod_records),
                self.timeout,
                field_selector=ACTIVE_PODS,
            )
            # Pending pods (preemptors) and pods on GPU nodes (victims, or using that node's cpu/memory).
            pods = [p for p in listed if not p.node_name or p.node_name in gpu_nodes]
            self.pod_records.finish()
            classes = self.scheduling.list_priority_class, records_of(priority_class_record)
            pdbs = self.policy.list_pod_disruption_budget_for_all_namespaces, records_of(pdb_record)
            return ClusterState(
                nodes=nodes,
                pods=pods,
                priority_classes=list(list_all("priorityclasses", *classes, self.timeout)),
                pdbs=list(list_all("poddisruptionbudgets", *pdbs, self.timeout)),
                groups=self.group_objects(served),
                kueue=self.kueue_objects(served) if self.kueue else NO_KUEUE,
            )

    def _served(self) -> set[str]:
        """The group/versions the API server serves (discovery: /apis)."""
        with api_call("discover APIs"):
            groups = self.discovery.get_api_versions(_request_timeout=self.timeout).groups or []
        return {v.group_version for g in groups for v in g.versions or []}

    def group_objects(self, served: set[str] | None = None) -> list[GroupObject]:
        """The gang group objects (PodGroups, Workloads) of every API the cluster serves, newest version of
        each first; an API not served is skipped (logged when that changes), not an error."""
        served = self._served() if served is None else served
        records: list[GroupObject] = []
        listed: set[tuple[str, str]] = set()
        for group, version, plural, kind in GANG_APIS:
            if (group, plural) in listed or f"{group}/{version}" not in served:
                continue
            listed.add((group, plural))
            api_version = f"{group}/{version}"

            def record(item: JsonObj, kind: str = kind, api_version: str = api_version) -> GroupObject | None:
                return group_object({**item, "kind": kind, "apiVersion": api_version})

            call = partial(self.custom.list_cluster_custom_object, group, version, plural)
            found = list_all(f"{plural}.{group}", call, records_of(record), self.timeout)
            records.extend(r for r in found if r is not None)
        missing = {f"{plural}.{group}" for group, _, plural, _ in GANG_APIS if (group, plural) not in listed}
        if missing != self.gang_apis_missing:
            self.gang_apis_missing = missing
            if missing:
                log.info("gang group objects not served, skipped: %s", ", ".join(sorted(missing)))
        return records

    def kueue_objects(self, served: set[str] | None = None) -> KueueObjects:
        """Kueue's Workloads, ClusterQueues and LocalQueues (v1beta2, else v1beta1) and the batch Jobs; a
        cluster that serves no Kueue API has none (one log line when that changes), not an error."""
        version = kueue_version(self._served() if served is None else served)
        if version != self.kueue_version_read:
            self.kueue_version_read = version
            if version is None:
                log.info("Kueue (%s) not served, skipped: no Workload to read", KUEUE_GROUP)
            else:
                log.info("Kueue read as %s/%s", KUEUE_GROUP, version)
        if version is None:
            return NO_KUEUE
        return list_kueue(self.custom, self.batch, version, self.timeout)

    def patch_workload(
        self, workload: ObjectKey, api_version: str, patch: JsonObj, uid: str | None = None
    ) -> None:
        """A JSON merge patch of a Kueue Workload (the automator's annotations, or spec.active)."""
        patch_workload(self.custom, workload, api_version, patch, uid, self.write_timeout)

    def workload_event(
        self, workload: ObjectKey, api_version: str, uid: str | None, type_: str, reason: str, message: str
    ) -> None:
        """A core/v1 Event on a Kueue Workload (what `kubectl describe workload` shows)."""
        self.event(workload, type_, reason, message, uid, api_version=api_version, kind="Workload")

    def get_pod(self, pod: ObjectKey) -> Pod | None:
        """The record of one pod, None when it does not exist."""
        try:
            resp = self.core.read_namespaced_pod(
                pod.name, pod.namespace, _preload_content=False, _request_timeout=self.timeout
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise KubernetesUnavailable(f"get pod {pod}: {e.status} {status_message(e)}") from e
        except TRANSPORT_ERRORS as e:
            raise KubernetesUnavailable(f"get pod {pod}: {e}") from e
        try:
            return decode_one_pod(resp.data)
        except ValueError as e:
            raise KubernetesUnavailable(f"get pod {pod}: {e}") from e

    # --- writes ---

    def evict(self, pod: ObjectKey, uid: str | None = None, dry_run: bool = False) -> EvictionResult:
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
                _headers=JSON_HEADERS,
                _preload_content=False,
                _request_timeout=self.write_timeout,
            )
        except ApiException as e:
            return _refusal(e)
        except TRANSPORT_ERRORS as e:
            # A timeout or a reset: the server may have accepted it. The caller reads the pod.
            return EvictionResult(EvictionOutcome.UNKNOWN, None, str(e))
        return EvictionResult(EvictionOutcome.OK, 201)

    def annotate_preemptor(
        self, pod: ObjectKey, annotations: Mapping[str, str | None], uid: str | None = None
    ) -> None:
        meta: JsonObj = {"annotations": dict(annotations)}
        if uid:
            meta["uid"] = uid  # a precondition: the patch fails (409) if the pod was replaced
        with api_call(f"patch pod {pod}"):
            self.core.patch_namespaced_pod(
                pod.name,
                pod.namespace,
                {"metadata": meta},
                _content_type="application/merge-patch+json",
                _preload_content=False,
                _request_timeout=self.write_timeout,
            )

    def event(
        self,
        pod: ObjectKey,
        type_: str,
        reason: str,
        message: str,
        uid: str | None = None,
        api_version: str = "v1",
        kind: str = "Pod",
    ) -> None:
        """A core/v1 Event on a pod, or another object of `kind` (uid included: `kubectl describe` selects
        Events by it)."""
        now = datetime.now(UTC).replace(microsecond=0)
        body = client.CoreV1Event(
            api_version="v1",
            kind="Event",
            # client-go names Events <object>.<unique hex>; random bits avoid clashes between replicas.
            metadata=client.V1ObjectMeta(name=f"{pod.name}.{secrets.token_hex(8)}", namespace=pod.namespace),
            involved_object=client.V1ObjectReference(
                api_version=api_version, kind=kind, namespace=pod.namespace, name=pod.name, uid=uid
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
        with api_call(f"event {reason} on {pod}"):
            self._post_event(pod.namespace, body)

    def create_event(self, body: JsonObj) -> bool:
        """Create a core/v1 Event from a ready body (metadata.name and namespace set); False when one of
        that name already exists (409: written by an earlier pass, process or replica)."""
        meta = body["metadata"]
        try:
            with api_call(f"event {body.get('reason')} {meta['namespace']}/{meta['name']}"):
                self._post_event(meta["namespace"], body)
        except KubernetesUnavailable as e:
            if isinstance(e.__cause__, ApiException) and e.__cause__.status == 409:
                return False
            raise
        return True

    def _post_event(self, namespace: str, body: JsonObj | client.CoreV1Event) -> None:
        self.core.create_namespaced_event(
            namespace,
            body,
            _headers=JSON_HEADERS,
            _preload_content=False,
            _request_timeout=self.write_timeout,
        )
