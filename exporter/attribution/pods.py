"""Container id / pod UID -> namespace, pod, container, from the pods-list JSON the Kubernetes API
returns for this node (pure; attribution/kubeapi.py fetches it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.model import ContainerRef

# A static pod runs under the UID the kubelet derived from its manifest (the config hash); the API
# object is the mirror pod, with its own UID and that hash in this annotation. The cgroup shows the hash.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_STATUS_LISTS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")


@dataclass(frozen=True)
class PodIndex:
    """What the pods on this node tell about their containers. Both maps hold immutable facts (a
    container id or pod UID never changes owner), so an old index is incomplete but never wrong."""

    containers: dict[str, ContainerRef] = field(default_factory=dict)  # container id -> ref
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod UID -> (namespace, name)


def strip_runtime(container_id: str) -> str:
    """`containerd://<id>`, `cri-o://<id>`, `docker://<id>` -> `<id>`."""
    _, sep, rest = container_id.partition("://")
    return rest if sep else container_id


def index_pods(pods: Iterable[Mapping[str, Any]]) -> PodIndex:
    """Builds the index from pod objects as the API serialises them (camelCase keys)."""
    index = PodIndex()
    for pod in pods:
        meta = pod.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            continue
        uid_field = meta.get("uid")
        pod_uid = uid_field.lower() if isinstance(uid_field, str) else ""
        uids = [uid_field, (meta.get("annotations") or {}).get(MIRROR_ANNOTATION)]
        for uid in uids:
            if isinstance(uid, str) and uid:
                index.pods[uid.lower()] = (namespace, name)
        status = pod.get("status") or {}
        for key in _STATUS_LISTS:
            for cs in status.get(key) or []:
                cid, cname = cs.get("containerID"), cs.get("name")
                # A container not started yet has no id; it cannot own a process either.
                if isinstance(cid, str) and cid and isinstance(cname, str):
                    index.containers[strip_runtime(cid)] = ContainerRef(namespace, name, cname, pod_uid)
    return index
