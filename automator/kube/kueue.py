"""Kueue's objects through the KubernetesAdapter's ApiClient (docs/kueue.md): Workloads, ClusterQueues and
LocalQueues of kueue.x-k8s.io, the newest version the cluster serves (v1beta2, else v1beta1), and the
batch/v1 Jobs that tie a Workload to its pods; `list` only. The one write is a JSON merge patch of a
Workload (the automator's annotations, or spec.active), with the Workload's uid as its precondition.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from kubernetes import client

from automator.kube.client import api_call, list_all, records_of
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.kueue import (
    KUEUE_GROUP,
    KUEUE_KINDS,
    KUEUE_VERSIONS,
    KueueObjects,
    job_record,
    kueue_objects,
    kueue_record,
)

MERGE_PATCH = "application/merge-patch+json"


def kueue_version(served: set[str]) -> str | None:
    """The Kueue API version to read: the newest the cluster serves, None when it serves none."""
    return next((v for v in KUEUE_VERSIONS if f"{KUEUE_GROUP}/{v}" in served), None)


def list_kueue(
    custom: client.CustomObjectsApi, batch: client.BatchV1Api, version: str, timeout: float
) -> KueueObjects:
    """Every Workload, ClusterQueue and LocalQueue of that version, and every batch Job, as records."""
    records: list[object] = []
    api_version = f"{KUEUE_GROUP}/{version}"
    for plural, kind, _ in KUEUE_KINDS:

        def record(item: JsonObj, kind: str = kind) -> object:
            return kueue_record({**item, "kind": kind, "apiVersion": api_version})

        call = partial(custom.list_cluster_custom_object, KUEUE_GROUP, version, plural)
        records.extend(list_all(f"{plural}.{KUEUE_GROUP}", call, records_of(record), timeout))
    records.extend(list_all("jobs.batch", batch.list_job_for_all_namespaces, records_of(job_record), timeout))
    return kueue_objects((r for r in records if r is not None), served=True)


def patch_workload(
    custom: client.CustomObjectsApi,
    key: ObjectKey,
    api_version: str,
    patch: JsonObj,
    uid: str | None,
    timeout: float,
) -> None:
    """A JSON merge patch of one Workload; with uid, the patch fails (409) if the Workload was replaced."""
    body = dict(patch)
    if uid:
        body["metadata"] = {**(body.get("metadata") or {}), "uid": uid}
    version = api_version.rpartition("/")[2]
    call: Callable[..., object] = custom.patch_namespaced_custom_object
    with api_call(f"patch workload {key}"):
        call(
            KUEUE_GROUP,
            version,
            key.namespace,
            "workloads",
            key.name,
            body,
            _content_type=MERGE_PATCH,
            _preload_content=False,
            _request_timeout=timeout,
        )
