"""The DRA capacity check's Kubernetes adapter (docs/dra.md): reads of resource.k8s.io/v1 and the core kinds,
and its Events, through the KubernetesAdapter's ApiClient, paging and timeout."""

from __future__ import annotations

import json

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from automator.kube.adapter import KubernetesAdapter
from automator.kube.client import api_call, list_all, objects_of
from automator.objects.keys import JsonObj
from automator.ports import KubernetesUnavailable

DRA_GROUP_VERSION = "resource.k8s.io/v1"


class DraKubernetesAdapter:
    """What the DRA check reads and writes."""

    def __init__(self, kube: KubernetesAdapter) -> None:
        self.kube = kube
        self.resource = client.ResourceV1Api(kube.api)

    def dra_available(self) -> bool:
        """Whether the API server serves resource.k8s.io/v1 (Kubernetes 1.34+); 404 means it does not."""
        try:
            with api_call(f"discover {DRA_GROUP_VERSION}", ValueError):
                resp = self.resource.get_api_resources(
                    _preload_content=False, _request_timeout=self.kube.timeout
                )
                body = json.loads(resp.data)
        except KubernetesUnavailable as e:
            if isinstance(e.__cause__, ApiException) and e.__cause__.status == 404:
                return False
            raise
        return any(r.get("name") == "resourceslices" for r in body.get("resources") or [])

    def resource_objects(self) -> list[JsonObj]:
        """ResourceSlices, ResourceClaims and DeviceClasses, as `kubectl get -o json` shows them."""
        timeout, v1, api = self.kube.timeout, DRA_GROUP_VERSION, self.resource
        return [
            *list_all("resourceslices", api.list_resource_slice, objects_of("ResourceSlice", v1), timeout),
            *list_all(
                "resourceclaims",
                api.list_resource_claim_for_all_namespaces,
                objects_of("ResourceClaim", v1),
                timeout,
            ),
            *list_all("deviceclasses", api.list_device_class, objects_of("DeviceClass", v1), timeout),
        ]

    def dra_objects(self) -> list[JsonObj]:
        """ResourceSlices, ResourceClaims, DeviceClasses, active Pods and Nodes, as `kubectl get -o json`."""
        return [*self.resource_objects(), *self.kube.active_pods(), *self.kube.nodes()]

    def dra_event(self, body: JsonObj) -> bool:
        """Create a core/v1 Event from a ready body (automator/dra/report.py); False when one of that name
        already exists (409: written by an earlier pass, process or replica)."""
        return self.kube.create_event(body)
