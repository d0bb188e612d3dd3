"""kube-state-metrics' series of a simulated cluster (tools/fakes/ksm.py): names and labels as
kube-state-metrics documents them, values as it writes them, a pod's lifecycle in the fake cluster changing
them, and both ways into a real Prometheus: scraped from /metrics and backfilled with promtool."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakeclock import FakeClock
from tests.tools.fakes.test_fakekube import pod as fake_pod
from tools.fakes import ksm
from tools.fakes.fakekube import FakeApiServer
from tools.fakes.promserver import start_prometheus

GPU = "nvidia.com/gpu"
T0 = 1_800_000_000.0

# The label names of each family, from kube-state-metrics' docs/metrics/workload/pod-metrics.md,
# cluster/node-metrics.md and policy/poddisruptionbudget-metrics.md (its own tables, not this module).
POD = {"namespace", "pod", "uid"}
NODE = {"node"}
PDB = {"namespace", "poddisruptionbudget"}
DOCUMENTED = {
    "kube_pod_info": POD | {"host_ip", "pod_ip", "node", "created_by_kind", "created_by_name",
                            "priority_class", "host_network"},
    "kube_pod_created": POD,
    "kube_pod_start_time": POD,
    "kube_pod_deletion_timestamp": POD,
    "kube_pod_owner": POD | {"owner_kind", "owner_name", "owner_is_controller"},
    "kube_pod_status_phase": POD | {"phase"},
    "kube_pod_status_scheduled": POD | {"condition"},
    "kube_pod_status_scheduled_time": POD,
    "kube_pod_status_unschedulable": POD,
    "kube_pod_container_resource_requests": POD | {"resource", "unit", "container", "node"},
    "kube_pod_container_resource_limits": POD | {"resource", "unit", "container", "node"},
    "kube_node_info": NODE | {"kernel_version", "os_image", "container_runtime_version", "kubelet_version",
                              "kubeproxy_version", "provider_id", "pod_cidr", "system_uuid", "internal_ip"},
    "kube_node_status_allocatable": NODE | {"resource", "unit"},
    "kube_node_spec_unschedulable": NODE,
    "kube_node_spec_taint": NODE | {"key", "value", "effect"},
    "kube_node_status_condition": NODE | {"condition", "status"},
    "kube_poddisruptionbudget_status_current_healthy": PDB,
    "kube_poddisruptionbudget_status_desired_healthy": PDB,
    "kube_poddisruptionbudget_status_pod_disruptions_allowed": PDB,
    "kube_poddisruptionbudget_status_expected_pods": PDB,
}  # fmt: skip

Sample = tuple[dict[str, str], float]


def node(name: str = "gpu-1", **spec: Any) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name},
        "spec": spec,
        "status": {
            "allocatable": {GPU: "8", "cpu": "95500m", "memory": "1000Gi", "pods": "110",
                            "ephemeral-storage": "100Gi", "example.com/unknown-thing": "1"},
            "conditions": [{"type": "Ready", "status": "True"},
                           {"type": "MemoryPressure", "status": "False"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
            "nodeInfo": {"kubeletVersion": "v1.34.0", "kernelVersion": "6.1.0", "osImage": "Debian 12",
                         "containerRuntimeVersion": "containerd://1.7", "systemUUID": "abc"},
        },
    }  # fmt: skip


def pod(name: str, gpus: int, node_name: str | None, **meta: Any) -> dict[str, Any]:
    """The fake cluster tests' pod, with a second container and requests that differ from its limits."""
    out = fake_pod(name, gpus, node_name, **meta)
    out["spec"].update(priorityClassName="research-low", terminationGracePeriodSeconds=10, containers=[
        {"name": "main", "resources": {"limits": {GPU: str(gpus), "memory": "64Gi"},
                                       "requests": {"cpu": "1500m", "memory": "32Gi"}}},
        {"name": "sidecar", "resources": {"requests": {"cpu": "100m", "pods": "1"}}},
    ])  # fmt: skip
    return out


def scrape(
    kube: FakeApiServer, allowlist: tuple[str, ...] | None = ksm.ALL_LABELS
) -> dict[str, list[Sample]]:
    """What a scrape of the /metrics endpoint over `kube` reads: family -> (labels, value) samples."""
    server = ksm.KsmServer(ksm.of_fake(kube), labels_allowlist=allowlist).start()
    try:
        with urllib.request.urlopen(server.url, timeout=10) as r:
            text = r.read().decode()
    finally:
        server.stop()
    return {
        f.name: [(dict(s.labels), s.value) for s in f.samples] for f in text_string_to_metric_families(text)
    }


def of(samples: dict[str, list[Sample]], family: str, **labels: str) -> list[Sample]:
    return [(ls, v) for ls, v in samples.get(family, []) if all(ls.get(k) == v for k, v in labels.items())]


def value(samples: dict[str, list[Sample]], family: str, **labels: str) -> float:
    (found,) = of(samples, family, **labels)
    return found[1]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def kube(clock: FakeClock) -> Iterator[FakeApiServer]:
    server = FakeApiServer(clock=clock).start()
    try:
        yield server
    finally:
        server.stop()


def test_every_family_has_the_documented_name_and_labels(kube: FakeApiServer) -> None:
    kube.put(node(taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]))
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "api-7d4b9c",
        "uid": "rs",
        "controller": True,
    }
    kube.put(pod("running", 2, "gpu-1", labels={"app": "trainer"}, ownerReferences=[owner],
                 deletionTimestamp="2027-01-15T08:00:10Z"))  # fmt: skip
    pending = pod("waiting", 2, None)
    pending["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    kube.put(pending)
    bound = pod("bound", 1, "gpu-1")
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2027-01-15T06:59:59Z"}
    bound["status"].update(startTime="2027-01-15T07:00:00Z", conditions=[scheduled])
    kube.put(bound)
    kube.put({"kind": "PodDisruptionBudget", "metadata": {"name": "trainers", "namespace": "ml"},
              "spec": {"selector": {"matchLabels": {"app": "trainer"}}},
              "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
                         "expectedPods": 3}})  # fmt: skip
    samples = scrape(kube)
    assert set(DOCUMENTED) <= set(samples)  # every one the backtest reads is there
    for family, labels in DOCUMENTED.items():
        assert samples[family], family
        assert all(set(ls) == labels for ls, _ in samples[family]), (family, samples[family][0][0])
    # kube_pod_labels: the defaults and one label_ per allowed pod label
    assert {frozenset(ls) for ls, _ in samples["kube_pod_labels"]} >= {frozenset(POD | {"label_app"})}


def test_values_follow_kube_state_metrics_conventions(kube: FakeApiServer) -> None:
    kube.put(node(unschedulable=True))
    kube.put(pod("p", 2, "gpu-1", creationTimestamp="2027-01-15T07:00:00Z"))
    s = scrape(kube)
    # Resources: sanitized names, units, cpu in cores, a container's requests defaulting to its limits.
    req = "kube_pod_container_resource_requests"
    assert value(s, req, pod="p", container="main", resource="nvidia_com_gpu", unit="integer") == 2
    assert value(s, req, pod="p", container="main", resource="cpu", unit="core") == 1.5
    assert value(s, req, pod="p", container="main", resource="memory", unit="byte") == 32 * 2**30
    assert value(s, req, pod="p", container="sidecar", resource="cpu") == 0.1
    assert not of(s, req, resource="pods")  # a container's pods request is not one kube-state-metrics writes
    lim = "kube_pod_container_resource_limits"
    assert {ls["resource"]: v for ls, v in of(s, lim, pod="p")} == {"nvidia_com_gpu": 2, "memory": 64 * 2**30}
    assert all(ls["node"] == "gpu-1" for ls, _ in of(s, req))
    alloc = {(ls["resource"], ls["unit"]): v for ls, v in of(s, "kube_node_status_allocatable", node="gpu-1")}
    assert alloc == {("nvidia_com_gpu", "integer"): 8, ("cpu", "core"): 95.5,
                     ("memory", "byte"): 1000 * 2**30, ("pods", "integer"): 110,
                     ("ephemeral_storage", "byte"): 100 * 2**30,
                     ("example_com_unknown_thing", "integer"): 1}  # fmt: skip
    # State series: one per state, 1 for the one that holds.
    phases = {ls["phase"]: v for ls, v in of(s, "kube_pod_status_phase", pod="p")}
    assert phases == {"Pending": 0, "Succeeded": 0, "Failed": 0, "Unknown": 0, "Running": 1}
    conditions = {(ls["condition"], ls["status"]): v for ls, v in of(s, "kube_node_status_condition")}
    assert conditions == {("Ready", "true"): 1, ("Ready", "false"): 0, ("Ready", "unknown"): 0,
                          ("MemoryPressure", "true"): 0, ("MemoryPressure", "false"): 1,
                          ("MemoryPressure", "unknown"): 0}  # fmt: skip
    assert value(s, "kube_node_spec_unschedulable", node="gpu-1") == 1
    assert not of(s, "kube_node_spec_taint")
    # Times in unix seconds; what is not set is absent, not 0.
    assert value(s, "kube_pod_created", pod="p") == T0 - 3600  # T0 is 2027-01-15T08:00:00Z
    for absent in ("kube_pod_start_time", "kube_pod_deletion_timestamp", "kube_pod_status_scheduled",
                   "kube_pod_status_unschedulable", "kube_pod_status_scheduled_time"):  # fmt: skip
        assert not of(s, absent, pod="p"), absent
    # No owner: one kube_pod_owner series with empty owner labels; info labels of the node.
    assert of(s, "kube_pod_owner", pod="p") == [
        ({"namespace": "ml", "pod": "p", "uid": "uid-p", "owner_kind": "", "owner_name": "",
          "owner_is_controller": ""}, 1.0)]  # fmt: skip
    (info,) = of(s, "kube_node_info")
    assert (info[0]["kubelet_version"], info[0]["internal_ip"], info[0]["kubeproxy_version"]) == (
        "v1.34.0", "10.0.0.7", "deprecated")  # fmt: skip


def evict(kube: FakeApiServer, name: str) -> None:
    body = json.dumps({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}).encode()
    req = urllib.request.Request(f"{kube.url}/api/v1/namespaces/ml/pods/{name}/eviction", data=body,
                                 method="POST", headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 201


def test_a_pods_lifecycle_in_the_fake_cluster_changes_its_series(
    kube: FakeApiServer, clock: FakeClock
) -> None:
    kube.put(node())
    kube.put(pod("holder", 8, "gpu-1", labels={"app": "batch"}))
    kube.put(pod("urgent", 2, None))
    kube.put({"kind": "PodDisruptionBudget", "metadata": {"name": "batch", "namespace": "ml"},
              "spec": {"selector": {"matchLabels": {"app": "batch"}}},
              "status": {"disruptionsAllowed": 1, "currentHealthy": 1, "desiredHealthy": 0,
                         "expectedPods": 1}})  # fmt: skip
    kube.step()  # no room: the scheduler marks it unschedulable
    s = scrape(kube)
    assert value(s, "kube_pod_status_phase", pod="urgent", phase="Pending") == 1
    assert value(s, "kube_pod_status_unschedulable", pod="urgent") == 1
    assert value(s, "kube_pod_status_scheduled", pod="urgent", condition="false") == 1
    assert value(s, "kube_pod_info", pod="urgent", node="") == 1
    assert not of(s, "kube_pod_start_time", pod="urgent")
    budget = "kube_poddisruptionbudget_status_pod_disruptions_allowed"
    assert value(s, budget, poddisruptionbudget="batch") == 1

    evict(kube, "holder")  # terminating for its 10 s grace period, still holding its GPUs
    s = scrape(kube)
    assert value(s, "kube_pod_deletion_timestamp", pod="holder") == T0 + 10
    assert value(s, budget, poddisruptionbudget="batch") == 0  # the eviction spent it
    assert value(s, "kube_pod_status_unschedulable", pod="urgent") == 1

    clock.now = T0 + 11
    kube.step()  # the kubelet removes it; the scheduler binds the waiting pod
    s = scrape(kube)
    assert not [ls for family in s.values() for ls, _ in family if ls.get("pod") == "holder"]
    assert value(s, "kube_pod_status_phase", pod="urgent", phase="Running") == 1
    assert value(s, "kube_pod_status_phase", pod="urgent", phase="Pending") == 0
    assert value(s, "kube_pod_status_scheduled", pod="urgent", condition="true") == 1
    assert value(s, "kube_pod_status_scheduled_time", pod="urgent") == T0 + 11
    assert value(s, "kube_pod_start_time", pod="urgent") == T0 + 11
    assert not of(s, "kube_pod_status_unschedulable", pod="urgent")
    assert value(s, "kube_pod_info", pod="urgent", node="gpu-1") == 1
    req = of(s, "kube_pod_container_resource_requests", pod="urgent", resource="nvidia_com_gpu")
    assert [(ls["node"], v) for ls, v in req] == [("gpu-1", 2)]


def test_pod_labels_follow_the_allowlist(kube: FakeApiServer) -> None:
    labels = {"app.kubernetes.io/name": "x", "app.kubernetes.io/part-of": "y", "teamName": "z",
              "a.b": "1", "a_b": "2"}  # fmt: skip
    kube.put(pod("p", 1, "gpu-1", labels=labels))
    assert "kube_pod_labels" not in scrape(kube, None)  # kube-state-metrics' default: none
    (everything,) = of(scrape(kube), "kube_pod_labels", pod="p")
    assert {k: v for k, v in everything[0].items() if k.startswith("label_")} == {
        "label_app_kubernetes_io_name": "x", "label_app_kubernetes_io_part_of": "y", "label_team_name": "z",
        "label_a_b_conflict1": "1", "label_a_b_conflict2": "2"}  # fmt: skip
    (some,) = of(scrape(kube, ("app.kubernetes.io/*", "missing")), "kube_pod_labels", pod="p")
    assert sorted(k for k in some[0] if k.startswith("label_")) == [
        "label_app_kubernetes_io_name", "label_app_kubernetes_io_part_of"]  # fmt: skip


def test_bad_input_names_the_field() -> None:
    bad = pod("p", 1, "gpu-1", creationTimestamp="yesterday")
    with pytest.raises(ValueError, match=r"metadata\.creationTimestamp"):
        ksm.families(ksm.Snapshot(pods=[bad]))
    bad = pod("p", 1, "gpu-1")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    with pytest.raises(ValueError, match=r"spec\.containers\[main\]\.resources\.requests\.cpu"):
        ksm.families(ksm.Snapshot(pods=[bad]))
    n = node()
    n["status"]["allocatable"]["memory"] = "-"
    with pytest.raises(ValueError, match=r"status\.allocatable\.memory"):
        ksm.families(ksm.Snapshot(nodes=[n]))
    pdb = {"metadata": {"name": "b", "namespace": "ml"}, "status": {"expectedPods": "three"}}
    with pytest.raises(ValueError, match=r"status\.expectedPods"):
        ksm.families(ksm.Snapshot(pdbs=[pdb]))


def _prometheus_binaries() -> None:
    for binary in ("prometheus", "promtool"):
        if shutil.which(binary) is None:
            pytest.skip(f"{binary} not installed (make deps)")


@pytest.mark.integration
def test_prometheus_scrapes_it_as_kube_state_metrics(kube: FakeApiServer, tmp_path: Path) -> None:
    _prometheus_binaries()
    kube.put(node())
    kube.put(pod("p", 2, "gpu-1"))
    server = ksm.KsmServer(ksm.of_fake(kube)).start()
    prom = start_prometheus(tmp_path, {ksm.JOB: [server.target]})
    try:
        (running,) = prom.wait_for('kube_pod_status_phase{phase="Running"} == 1', timeout=30)
        assert running["metric"]["job"] == "kube-state-metrics" and running["metric"]["pod"] == "p"
        (gpus,) = prom.query('kube_pod_container_resource_requests{resource="nvidia_com_gpu"}')
        assert gpus["value"][1] == "2" and gpus["metric"]["unit"] == "integer"
        info = prom.query("kube_pod_info")[0]["metric"]
        assert "host_ip" not in info  # an empty label is no label once stored
    finally:
        prom.stop()
        server.stop()


@pytest.mark.integration
def test_openmetrics_backfills_a_history_that_promtool_accepts(tmp_path: Path) -> None:
    _prometheus_binaries()
    start = time.time() // 60 * 60 - 3600
    pending = pod("p", 2, None)
    running = pod("p", 2, "gpu-1")
    history = [(start + t, ksm.Snapshot(pods=[pending if t < 60 else running], nodes=[node()]))
               for t in range(0, 120, 15)]  # fmt: skip
    text = ksm.openmetrics(reversed(history))
    assert text.endswith("# EOF\n") and text.count("# TYPE kube_pod_status_phase gauge") == 1
    (tmp_path / "history.om").write_text(text)
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "history.om"),
                    str(tmp_path / "data")], check=True, capture_output=True)  # fmt: skip
    prom = start_prometheus(tmp_path, {}, extra_flags=("--query.lookback-delta=15s",))
    try:
        query = "kube_pod_status_phase == 1"
        assert [r["metric"]["phase"] for r in prom.query(query, at=start + 30)] == ["Pending"]
        assert [r["metric"]["phase"] for r in prom.query(query, at=start + 90)] == ["Running"]
        assert prom.query("kube_pod_status_unschedulable", at=start + 90) == []
        assert [r["metric"]["node"] for r in prom.query("kube_pod_info", at=start + 90)] == ["gpu-1"]
    finally:
        prom.stop()
