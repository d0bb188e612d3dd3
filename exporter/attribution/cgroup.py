"""Which Kubernetes pod and container a host process belongs to, from /proc/<pid>/cgroup.

The parsing is pure (text in, ids out); `read_cgroup` is the only I/O. Layouts handled:

- cgroup v2: one line `0::/path`; cgroup v1: one line per controller (`4:memory:/path`), hybrid: both.
- systemd driver: `.../kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, _ for ->.slice/
  cri-containerd-<id>.scope` (also `crio-<id>.scope`, `docker-<id>.scope`; Guaranteed pods sit directly
  under `kubepods.slice` as `kubepods-pod<uid>.slice`).
- cgroupfs driver: `/kubepods/burstable/pod<uid>/<id>` (CRI-O: `crio-<id>`).

Paths are matched by segment anywhere in the line rather than from the root: with a private cgroup
namespace (the default for containers on cgroup v2) the exporter sees other processes' paths relative to
its own cgroup, e.g. `0::/../../kubepods-besteffort-pod<uid>.slice/cri-containerd-<id>.scope`, and kind
nests everything under `/kubelet.slice/kubelet-kubepods.slice/...`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

# A pod UID as it appears in a cgroup name: a UUID (systemd writes `_` for `-`) or, for static pods,
# the 32-hex config hash the kubelet uses as their UID.
_UID = (
    r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}|[0-9a-fA-F]{32}"
)
# systemd driver: `kubepods-pod<uid>.slice`, `kubepods-burstable-pod<uid>.slice`, kind's
# `kubelet-kubepods-besteffort-pod<uid>.slice`.
_SYSTEMD_POD = re.compile(rf"(?:[\w-]*-)?kubepods(?:-[a-z]+)?-pod(?P<uid>{_UID})\.slice")
# cgroupfs driver: the bare `pod<uid>` directory (its parents are checked for `kubepods`).
_CGROUPFS_POD = re.compile(rf"pod(?P<uid>{_UID})")
# The container's own cgroup, the pod cgroup's direct child: `<runtime>-<id>.scope` under systemd,
# `<id>` or `crio-<id>` under cgroupfs. CRI-O's monitor process lives in `crio-conmon-<id>.scope`: ids
# have no `-`, so `conmon-<id>` cannot match and conmon is never taken for the container.
_CONTAINER = re.compile(
    r"(?:cri-containerd|containerd|crio|cri-o|docker)-(?P<scoped>[0-9A-Za-z]+)(?:\.scope)?"
    r"|(?P<bare>[0-9A-Za-z]+)"
)
# All three are used with fullmatch: `$` would also match before a trailing newline.


@dataclass(frozen=True)
class CgroupOwner:
    """What one /proc/<pid>/cgroup says about its process.

    `kubepods` is true for anything under the kubelet's pod cgroups, even where no container could be
    named (a pod-level cgroup, a conmon scope): such a process is in Kubernetes, not on the host.
    """

    kubepods: bool
    pod_uid: str | None = None
    container_id: str | None = None


def _parse_path(path: str) -> CgroupOwner:
    segments = [s for s in path.split("/") if s]
    kubepods = any("kubepods" in s for s in segments)
    if not kubepods:
        return CgroupOwner(kubepods=False)
    for i, segment in enumerate(segments):
        uid: str | None = None
        match = _SYSTEMD_POD.fullmatch(segment)
        if match:
            uid = match.group("uid")
        else:
            match = _CGROUPFS_POD.fullmatch(segment)
            # `pod<uid>` counts only below a kubepods directory, so an unrelated `pod...` name does not.
            if match and any("kubepods" in s for s in segments[:i]):
                uid = match.group("uid")
        if uid is None:
            continue
        uid = uid.replace("_", "-").lower()
        # The container cgroup is the pod cgroup's direct child; deeper levels (a container that made
        # its own sub-cgroups, e.g. systemd inside a pod) still belong to it.
        child = segments[i + 1] if i + 1 < len(segments) else ""
        container = _CONTAINER.fullmatch(child)
        container_id = (container.group("scoped") or container.group("bare")) if container else None
        return CgroupOwner(True, uid, container_id)
    return CgroupOwner(kubepods=True)


def classify_cgroup(text: str) -> CgroupOwner:
    """Reads the whole file text; the most specific line wins (v1 controllers may disagree, e.g.
    a hybrid host whose `0::/` line is just `/`)."""
    best = CgroupOwner(kubepods=False)
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        owner = _parse_path(parts[2])
        if owner.container_id is not None:
            return owner
        if (owner.pod_uid is not None and best.pod_uid is None) or (owner.kubepods and not best.kubepods):
            best = owner
    return best


def parse_cgroup(text: str) -> tuple[str, str] | None:
    """(pod UID, container id) of a process in a Kubernetes container, else None."""
    owner = classify_cgroup(text)
    if owner.pod_uid is None or owner.container_id is None:
        return None
    return owner.pod_uid, owner.container_id


def read_cgroup(proc_root: str, pid: int) -> str | None:
    """The text of <proc_root>/<pid>/cgroup, or None when the process is gone or unreadable."""
    if pid <= 0:
        return None
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        # FileNotFoundError / ProcessLookupError: the process exited; PermissionError: no access.
        return None
