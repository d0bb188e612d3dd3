"""A small cluster's kube-state-metrics and GPU Steward history as OpenMetrics text (for promtool's backfill),
built from a few facts so that every answer of a backtest over it is known by construction.

Times are seconds after F, the window's start; kube-state-metrics samples every 30 s on the step grid,
recorded GPU activity every 30 s at 15 s past (never on a step).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from steward_common.series import POD_ACTIVITY

SCRAPE = 30
END = 4 * 3600 + 600  # the data run 10 minutes past the window's end (4 h)


@dataclass
class Pod:
    ns: str
    name: str
    gpus: int
    cls: str
    created: int
    node: str  # where it runs (from `bound`); pending before
    bound: int | None  # None: never bound
    ended: int | None = None  # phase Succeeded from then on
    owner: tuple[str, str] = ("<none>", "<none>")
    # (from, to, activity) of its recorded GPU activity; nothing outside them
    activity: list[tuple[int, int, float]] = field(default_factory=list)
    # its labels and annotations as kube-state-metrics exports them (label_<key>, annotation_<key>,
    # sanitized), for the keys its allow-lists name
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def uid(self) -> str:
        return f"uid-{self.ns}-{self.name}"


def _labels(**labels: str) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


class OpenMetrics:
    def __init__(self, f: int) -> None:
        self.f = f
        self.families: dict[str, list[str]] = {}

    def series(self, name: str, labels: dict[str, str], points: Iterable[tuple[int, float]]) -> None:
        rows = self.families.setdefault(name, [])
        text = _labels(**labels)
        rows += [f"{name}{{{text}}} {v} {self.f + t}" for t, v in points]

    def text(self) -> str:
        lines: list[str] = []
        for name, rows in self.families.items():
            lines.append(f"# TYPE {name} gauge")
            lines += rows
        return "\n".join(lines) + "\n# EOF\n"


def _times(start: int, end: int, offset: int = 0) -> range:
    return range(start + offset, end, SCRAPE)


def build(f: int, nodes: dict[str, int], pods: list[Pod], gap: tuple[int, int] | None) -> str:
    om = OpenMetrics(f)
    for node, gpus in nodes.items():
        for resource, unit, value in (
            ("nvidia_com_gpu", "integer", gpus),
            ("cpu", "core", 64),
            ("memory", "byte", 2**39),
        ):
            om.series(
                "kube_node_status_allocatable",
                {"node": node, "resource": resource, "unit": unit},
                ((t, value) for t in _times(0, END)),
            )
        for status, value in (("true", 1), ("false", 0), ("unknown", 0)):
            om.series(
                "kube_node_status_condition",
                {"node": node, "condition": "Ready", "status": status},
                ((t, value) for t in _times(0, END)),
            )
    for pod in pods:
        _pod(om, pod, gap)
    return om.text()


def _pod(om: OpenMetrics, pod: Pod, gap: tuple[int, int] | None) -> None:
    ident = {"namespace": pod.ns, "pod": pod.name, "uid": pod.uid}
    alive = _times(pod.created, END)
    info = {
        **ident,
        "priority_class": pod.cls,
        "created_by_kind": pod.owner[0],
        "created_by_name": pod.owner[1],
    }
    bound = pod.bound if pod.bound is not None else END
    om.series("kube_pod_info", {**info, "node": ""}, ((t, 1) for t in alive if t < bound))
    om.series("kube_pod_info", {**info, "node": pod.node}, ((t, 1) for t in alive if t >= bound))
    om.series("kube_pod_created", ident, ((t, om.f + pod.created) for t in alive))
    for metric, prefix, keys in (
        ("kube_pod_labels", "label_", pod.labels),
        ("kube_pod_annotations", "annotation_", pod.annotations),
    ):
        if keys:
            exported = {prefix + re.sub(r"[^a-zA-Z0-9_]", "_", k): v for k, v in keys.items()}
            om.series(metric, {**ident, **exported}, ((t, 1) for t in alive))
    ended = pod.ended if pod.ended is not None else END

    def phase(t: int) -> str:
        return "Pending" if t < bound else "Running" if t < ended else "Succeeded"

    for name in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        om.series(
            "kube_pod_status_phase", {**ident, "phase": name}, ((t, int(phase(t) == name)) for t in alive)
        )
    om.series("kube_pod_status_unschedulable", ident, ((t, 1) for t in alive if t < bound))
    om.series("kube_pod_start_time", ident, ((t, om.f + bound) for t in alive if t >= bound))
    om.series("kube_pod_status_scheduled_time", ident, ((t, om.f + bound) for t in alive if t >= bound))
    for metric in ("kube_pod_container_resource_requests", "kube_pod_container_resource_limits"):
        for resource, unit, value in (
            ("nvidia_com_gpu", "integer", pod.gpus),
            ("cpu", "core", 1),
            ("memory", "byte", 2**30),
        ):
            labels = {**ident, "container": "main", "resource": resource, "unit": unit}
            om.series(metric, labels, ((t, value) for t in alive))
    points = [
        (t, value)
        for start, stop, value in pod.activity
        for t in _times(start, stop, SCRAPE // 2)
        if gap is None or not gap[0] <= t < gap[1]
    ]
    if points:
        om.series(POD_ACTIVITY, {"namespace": pod.ns, "pod": pod.name}, points)
