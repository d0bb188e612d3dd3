"""kube-state-metrics' series for a simulated cluster: the demo's fake cluster (tools/fakes/fakekube.py) and
tests that backfill history.

A simulation, not product code: it plays what kube-state-metrics would export for the Pods, Nodes and
PodDisruptionBudgets it is given, so that the backtest (automator/backtest/) can read a cluster's history
from Prometheus where no cluster runs. Names, labels and value conventions are kube-state-metrics' own
(its docs/metrics/workload/pod-metrics.md, cluster/node-metrics.md, policy/poddisruptionbudget-metrics.md
and the stores in internal/store/ that write them):

- every pod series carries `namespace`, `pod` and `uid`; every node series `node`; every PDB series
  `namespace` and `poddisruptionbudget`;
- state series come as one series per possible state, 1 for the one that holds and 0 for the others
  (`kube_pod_status_phase` over the five phases once the pod has a phase; `kube_pod_status_scheduled` and
  `kube_node_status_condition` over true/false/unknown for each condition present);
- series for what is not set are absent, not 0: `kube_pod_start_time` without `status.startTime`,
  `kube_pod_deletion_timestamp` unless terminating, `kube_pod_status_unschedulable` and
  `kube_pod_status_scheduled_time` unless PodScheduled is False, respectively True;
- resource names are sanitized into the `resource` label (`nvidia.com/gpu` -> `nvidia_com_gpu`) with a
  `unit`: `core` for cpu, `byte` for memory and storage, `integer` for pods and extended resources; cpu in
  cores to the millicore, a container's bytes and counts as whole numbers rounded up;
- `kube_pod_labels` exists only when the labels allowlist names pods (`--metric-labels-allowlist`, empty by
  default in kube-state-metrics): `label_` + the key sanitized and in snake case.

A container's requests default to its limits where unset, as the API server's defaulting writes the pod
kube-state-metrics reads. Rendered with prometheus_client: `KsmCollector` for a live `/metrics`
(`KsmServer`), `openmetrics()` for history that `promtool tsdb create-blocks-from openmetrics` backfills.
A series that ends in backfilled history has no staleness marker (text cannot carry one): a query within
Prometheus' lookback delta (5 minutes unless `--query.lookback-delta`) after it still finds its last sample.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from threading import Thread
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector

from steward_common.quantity import parse_quantity

if TYPE_CHECKING:
    from tools.fakes.fakekube import FakeApiServer

JsonObj = dict[str, Any]
JOB = "kube-state-metrics"  # the scrape job's name, as kube-state-metrics' own manifests name it
ALL_LABELS = ("*",)  # --metric-labels-allowlist=pods=[*]

PHASES = ("Pending", "Succeeded", "Failed", "Unknown", "Running")  # kube-state-metrics' order
CONDITION_STATUSES = ("True", "False", "Unknown")
# What kube-state-metrics documents for each family (its HELP text).
HELP = {
    "kube_pod_info": "Information about pod.",
    "kube_pod_created": "Unix creation timestamp",
    "kube_pod_start_time": "Start time in unix timestamp for a pod.",
    "kube_pod_deletion_timestamp": "Unix deletion timestamp",
    "kube_pod_owner": "Information about the Pod's owner.",
    "kube_pod_labels": "Kubernetes labels converted to Prometheus labels.",
    "kube_pod_status_phase": "The pods current phase.",
    "kube_pod_status_scheduled": "Describes the status of the scheduling process for the pod.",
    "kube_pod_status_scheduled_time": "Unix timestamp when pod moved into scheduled status",
    "kube_pod_status_unschedulable": "Describes the unschedulable status for the pod.",
    "kube_pod_container_resource_requests": "The number of requested request resource by a container.",
    "kube_pod_container_resource_limits": "The number of requested limit resource by a container.",
    "kube_node_info": "Information about a cluster node.",
    "kube_node_status_allocatable": "The allocatable for different resources of a node that are available "
    "for scheduling.",
    "kube_node_spec_unschedulable": "Whether a node can schedule new pods.",
    "kube_node_spec_taint": "The taint of a cluster node.",
    "kube_node_status_condition": "The condition of a cluster node.",
    "kube_poddisruptionbudget_status_current_healthy": "Current number of healthy pods",
    "kube_poddisruptionbudget_status_desired_healthy": "Minimum desired number of healthy pods",
    "kube_poddisruptionbudget_status_pod_disruptions_allowed": "Number of pod disruptions that are currently "
    "allowed",
    "kube_poddisruptionbudget_status_expected_pods": "Total number of pods counted by this disruption budget",
}
_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_CAPS = re.compile(r"([a-z0-9])([A-Z])")
_BYTES = ("memory", "storage", "ephemeral-storage")
_MAX_MILLI = (2**63 - 1) // 1000  # resource.MaxMilliValue: beyond it a quantity is read as a whole number


@dataclass(frozen=True)
class Snapshot:
    """The objects kube-state-metrics would have listed at one time."""

    pods: Sequence[Mapping[str, Any]] = ()
    nodes: Sequence[Mapping[str, Any]] = ()
    pdbs: Sequence[Mapping[str, Any]] = ()


def of_fake(api: FakeApiServer) -> Callable[[], Snapshot]:
    """What the fake API server holds, read under its lock as one consistent list."""

    def snapshot() -> Snapshot:
        with api.lock:
            return Snapshot(
                api.objects_of("pods"), api.objects_of("nodes"), api.objects_of("poddisruptionbudgets")
            )

    return snapshot


def sanitize(name: str) -> str:
    """A resource name as a label value (nvidia.com/gpu -> nvidia_com_gpu)."""
    return _INVALID.sub("_", name)


def label_name(key: str) -> str:
    """A label key as kube_pod_labels names it: app.kubernetes.io/name -> label_app_kubernetes_io_name."""
    return "label_" + _CAPS.sub(r"\1_\2", sanitize(key)).lower()


def _seconds(text: Any, what: str) -> float:
    try:
        return float(math.floor(datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()))
    except ValueError as e:
        raise ValueError(f"{what}: not an RFC 3339 time: {text!r}") from e


def _quantity(text: Any, what: str) -> Decimal:
    try:
        return parse_quantity(str(text))
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from e


def _cores(q: Decimal) -> float:
    """convertValueToFloat64: milli-units rounded up, in whole units."""
    whole = math.ceil(q)
    if whole > _MAX_MILLI:
        return float(whole)
    return math.ceil(q * 1000) / 1000


def _extended(name: str) -> bool:
    """A domain-prefixed resource outside kubernetes.io (nvidia.com/gpu), as the API server defines them."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _resource(name: str, node: bool) -> tuple[str, str] | None:
    """(unit, rounding) of a resource as kube-state-metrics writes it for a container or a node (which
    alone counts `pods`); None for one it skips."""
    if name == "cpu":
        return "core", "milli"
    if name in _BYTES or name.startswith(("hugepages-", "attachable-volumes-")):
        return "byte", "whole"
    if name == "pods":
        return ("integer", "whole") if node else None
    if _extended(name):
        return "integer", "whole"
    return None


class _Families:
    """Families by name, in kube-state-metrics' order; samples may carry a timestamp (backfill)."""

    def __init__(self) -> None:
        self.by_name: dict[str, Metric] = {name: Metric(name, help_, "gauge") for name, help_ in HELP.items()}
        self.at: float | None = None

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        self.by_name[name].add_sample(name, dict(labels), value, timestamp=self.at)

    def __iter__(self) -> Iterator[Metric]:
        return iter(self.by_name.values())


def _pod(out: _Families, pod: Mapping[str, Any], allowlist: Sequence[str] | None) -> None:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    base = {"namespace": str(meta.get("namespace") or ""), "pod": str(meta.get("name") or ""),
            "uid": str(meta.get("uid") or "")}  # fmt: skip
    node = str(spec.get("nodeName") or "")
    owners = list(meta.get("ownerReferences") or [])
    controller: Mapping[str, Any] = next((o for o in owners if o.get("controller")), {})
    out.add("kube_pod_info", {**base, "host_ip": str(status.get("hostIP") or ""),
                              "pod_ip": str(status.get("podIP") or ""), "node": node,
                              "created_by_kind": str(controller.get("kind") or ""),
                              "created_by_name": str(controller.get("name") or ""),
                              "priority_class": str(spec.get("priorityClassName") or ""),
                              "host_network": "true" if spec.get("hostNetwork") else "false"}, 1)  # fmt: skip
    if meta.get("creationTimestamp"):
        out.add("kube_pod_created", base, _seconds(meta["creationTimestamp"], "metadata.creationTimestamp"))
    if status.get("startTime"):
        out.add("kube_pod_start_time", base, _seconds(status["startTime"], "status.startTime"))
    if meta.get("deletionTimestamp"):
        out.add("kube_pod_deletion_timestamp", base,
                _seconds(meta["deletionTimestamp"], "metadata.deletionTimestamp"))  # fmt: skip
    for o in owners or [{}]:
        is_controller = "" if not o else ("true" if o.get("controller") else "false")
        out.add("kube_pod_owner", {**base, "owner_kind": str(o.get("kind") or ""),
                                   "owner_name": str(o.get("name") or ""),
                                   "owner_is_controller": is_controller}, 1)  # fmt: skip
    if allowlist:
        out.add("kube_pod_labels", {**base, **_labels(meta.get("labels") or {}, allowlist)}, 1)
    phase = status.get("phase")
    if phase:
        for p in PHASES:
            out.add("kube_pod_status_phase", {**base, "phase": p}, float(p == phase))
    for c in status.get("conditions") or []:
        if c.get("type") != "PodScheduled":
            continue
        for s in CONDITION_STATUSES:
            held = float(c.get("status") == s)
            out.add("kube_pod_status_scheduled", {**base, "condition": s.lower()}, held)
        if c.get("status") == "True" and c.get("lastTransitionTime"):
            when = _seconds(c["lastTransitionTime"], "status.conditions[PodScheduled].lastTransitionTime")
            out.add("kube_pod_status_scheduled_time", base, when)
        if c.get("status") == "False":
            out.add("kube_pod_status_unschedulable", base, 1)
    for container in spec.get("containers") or []:
        res = container.get("resources") or {}
        limits = dict(res.get("limits") or {})
        # The API server's defaulting: a resource limited but not requested is requested at its limit.
        requests = {**limits, **(res.get("requests") or {})}
        for family, amounts in (("kube_pod_container_resource_requests", requests),
                                ("kube_pod_container_resource_limits", limits)):  # fmt: skip
            for name, amount in sorted(amounts.items()):
                kind = _resource(str(name), node=False)
                if kind is None:
                    continue
                where = "requests" if family.endswith("requests") else "limits"
                q = _quantity(amount, f"spec.containers[{container.get('name')}].resources.{where}.{name}")
                value = _cores(q) if kind[1] == "milli" else float(math.ceil(q))
                out.add(family, {**base, "container": str(container.get("name") or ""), "node": node,
                                 "resource": sanitize(str(name)), "unit": kind[0]}, value)  # fmt: skip


def _labels(labels: Mapping[str, Any], allowlist: Sequence[str]) -> dict[str, str]:
    """createPrometheusLabelKeysValues: the allowed keys (a leading `*` allows all, `*` in a key is a
    wildcard), sorted, sanitized; a name two keys share gets `_conflictN` suffixes."""
    if allowlist[0] == "*":
        allowed = dict(labels)
    else:
        allowed = {}
        for pattern in allowlist:
            rx = re.compile("^" + ".*".join(map(re.escape, pattern.split("*"))) + "$")
            allowed.update({k: v for k, v in labels.items() if rx.match(str(k))})
    names: dict[str, list[str]] = {}
    for key in sorted(allowed):
        names.setdefault(label_name(str(key)), []).append(str(key))
    out: dict[str, str] = {}
    for name, keys in names.items():
        if len(keys) == 1:
            out[name] = str(allowed[keys[0]])
        else:
            out.update({f"{name}_conflict{i}": str(allowed[k]) for i, k in enumerate(keys, 1)})
    return out


def _node(out: _Families, node: Mapping[str, Any]) -> None:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    base = {"node": str(meta.get("name") or "")}
    info = status.get("nodeInfo") or {}
    internal = [a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"]
    out.add("kube_node_info", {**base, "kernel_version": str(info.get("kernelVersion") or ""),
                               "os_image": str(info.get("osImage") or ""),
                               "container_runtime_version": str(info.get("containerRuntimeVersion") or ""),
                               "kubelet_version": str(info.get("kubeletVersion") or ""),
                               "kubeproxy_version": "deprecated",
                               "provider_id": str(spec.get("providerID") or ""),
                               "pod_cidr": str(spec.get("podCIDR") or ""),
                               "system_uuid": str(info.get("systemUUID") or ""),
                               "internal_ip": str(internal[-1] if internal else "")}, 1)  # fmt: skip
    for name, amount in sorted((status.get("allocatable") or {}).items()):
        kind = _resource(str(name), node=True)
        if kind is not None:
            out.add("kube_node_status_allocatable",
                    {**base, "resource": sanitize(str(name)), "unit": kind[0]},
                    _cores(_quantity(amount, f"status.allocatable.{name}")))  # fmt: skip
    out.add("kube_node_spec_unschedulable", base, float(bool(spec.get("unschedulable"))))
    for t in spec.get("taints") or []:
        out.add("kube_node_spec_taint", {**base, "key": str(t.get("key") or ""),
                                         "value": str(t.get("value") or ""),
                                         "effect": str(t.get("effect") or "")}, 1)  # fmt: skip
    for c in status.get("conditions") or []:
        for s in CONDITION_STATUSES:
            out.add("kube_node_status_condition",
                    {**base, "condition": str(c.get("type") or ""), "status": s.lower()},
                    float(c.get("status") == s))  # fmt: skip


def _pdb(out: _Families, pdb: Mapping[str, Any]) -> None:
    meta, status = pdb.get("metadata") or {}, pdb.get("status") or {}
    base = {"namespace": str(meta.get("namespace") or ""), "poddisruptionbudget": str(meta.get("name") or "")}
    for family, key in (("kube_poddisruptionbudget_status_current_healthy", "currentHealthy"),
                        ("kube_poddisruptionbudget_status_desired_healthy", "desiredHealthy"),
                        ("kube_poddisruptionbudget_status_pod_disruptions_allowed", "disruptionsAllowed"),
                        ("kube_poddisruptionbudget_status_expected_pods", "expectedPods")):  # fmt: skip
        try:
            count = int(status.get(key) or 0)
        except (TypeError, ValueError) as e:
            raise ValueError(f"status.{key}: not a whole number: {status.get(key)!r}") from e
        out.add(family, base, float(count))


def _render(out: _Families, snapshot: Snapshot, allowlist: Sequence[str] | None) -> None:
    for pod in snapshot.pods:
        _pod(out, pod, allowlist)
    for node in snapshot.nodes:
        _node(out, node)
    for pdb in snapshot.pdbs:
        _pdb(out, pdb)


def families(snapshot: Snapshot, labels_allowlist: Sequence[str] | None = ALL_LABELS) -> list[Metric]:
    """The families kube-state-metrics would export for these objects now; `labels_allowlist` is the pods'
    entry of --metric-labels-allowlist (None: kube-state-metrics' default, no kube_pod_labels)."""
    out = _Families()
    _render(out, snapshot, labels_allowlist)
    return [m for m in out if m.samples]


class KsmCollector(Collector):
    """A prometheus_client collector rendering what `source` returns at each scrape."""

    def __init__(self, source: Callable[[], Snapshot], labels_allowlist: Sequence[str] | None = ALL_LABELS):
        self.source, self.labels_allowlist = source, labels_allowlist

    def collect(self) -> Iterable[Metric]:
        return families(self.source(), self.labels_allowlist)


def openmetrics(
    history: Iterable[tuple[float, Snapshot]], labels_allowlist: Sequence[str] | None = ALL_LABELS
) -> str:
    """OpenMetrics text of these (unix time, snapshot) samples, for `promtool tsdb create-blocks-from
    openmetrics`: each family once, each series' samples together and in time order, `# EOF` last."""
    out = _Families()
    for at, snapshot in sorted(history, key=lambda h: h[0]):
        out.at = at
        _render(out, snapshot, labels_allowlist)
    registry = CollectorRegistry(auto_describe=False)
    ordered = []
    for m in out:
        if not m.samples:
            continue
        m.samples.sort(key=lambda s: (sorted(s.labels.items()), s.timestamp or 0.0))
        ordered.append(m)
    registry.register(_Fixed(ordered))
    text: bytes = generate_latest(registry)  # type: ignore[no-untyped-call]
    return text.decode()


class _Fixed(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics


@dataclass
class KsmServer:
    """An HTTP /metrics with kube-state-metrics' series of `source`, scraped as job `kube-state-metrics`."""

    source: Callable[[], Snapshot]
    port: int = 0
    host: str = "127.0.0.1"
    labels_allowlist: Sequence[str] | None = ALL_LABELS
    _server: WSGIServer | None = None
    _thread: Thread | None = None

    def start(self) -> KsmServer:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(KsmCollector(self.source, self.labels_allowlist))
        self._server, self._thread = start_http_server(self.port, self.host, registry)
        self.port = int(self._server.server_address[1])
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
