"""Who owns a GPU process or device: host PID -> container -> pod (see docs/attribution.md)."""

from exporter.attribution.cgroup import CgroupOwner, classify_cgroup, parse_cgroup, read_cgroup
from exporter.attribution.kubelet import KubeletAttributor

__all__ = ["CgroupOwner", "KubeletAttributor", "classify_cgroup", "parse_cgroup", "read_cgroup"]
