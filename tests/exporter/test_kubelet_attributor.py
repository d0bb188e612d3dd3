"""The composite attributor: caching and refresh on a fake clock, degradation, the PodResources fallback."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from exporter.attribution.allocations import (
    ContainerDevices,
    ContainerResources,
    PodResources,
    sole_gpu_container,
)
from exporter.attribution.kubelet import KubeletAttributor
from exporter.model import Attribution, ContainerRef
from exporter.ports import Attributor, PodResourcesError
from tests.fakeclock import FakeClock

NODE = "gpu-node-3"
UID = "0b3f5c2e-8d1a-4f6b-9c7e-1a2b3c4d5e6f"
UID2 = "c1d2e3f4-a5b6-4c7d-8e9f-a0b1c2d3e4f5"
CID_OLD = "a" * 64
CID_NEW = "b" * 64
CID_SIDE = "c" * 64
CID_OTHER = "d" * 64
GPU_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
GPU_B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"


class RawResponse:
    """What CoreV1Api returns with _preload_content=False: a body to read and a connection to release."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()
        self.released = False

    def release_conn(self) -> None:
        self.released = True


class FakeCoreV1:
    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.calls = 0
        self.selectors: list[str] = []
        self.error: Exception | None = None

    def list_pod_for_all_namespaces(self, field_selector: str, **kwargs: Any) -> RawResponse:
        self.calls += 1
        self.selectors.append(field_selector)
        if self.error is not None:
            raise self.error
        return RawResponse({"items": self.pods})


class FakeKubelet:
    def __init__(self) -> None:
        self.pods: list[PodResources] = []
        self.calls = 0
        self.error: Exception | None = None

    def __call__(self) -> list[PodResources]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.pods


def pod(name: str, uid: str, containers: dict[str, str], namespace: str = "ml") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "status": {
            "containerStatuses": [
                {"name": n, "containerID": f"containerd://{cid}" if cid else None}
                for n, cid in containers.items()
            ]
        },
    }


def gpu_pod(name: str, containers: dict[str, list[str]], namespace: str = "ml") -> PodResources:
    return PodResources(
        name,
        namespace,
        tuple(
            ContainerResources(c, (ContainerDevices("nvidia.com/gpu", tuple(ids)),) if ids else ())
            for c, ids in containers.items()
        ),
    )


def cgroup(uid: str, cid: str) -> str:
    pod_slice = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    return f"0::/kubepods.slice/kubepods-burstable.slice/{pod_slice}/cri-containerd-{cid}.scope\n"


def write_proc(root: Path, cgroups: dict[int, str]) -> None:
    for pid, text in cgroups.items():
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "cgroup").write_text(text)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api() -> FakeCoreV1:
    return FakeCoreV1()


@pytest.fixture
def kubelet() -> FakeKubelet:
    return FakeKubelet()


def make(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1 | None, kubelet: FakeKubelet, **kw: Any
) -> KubeletAttributor:
    return KubeletAttributor(
        kw.pop("node_name", NODE),
        proc_root=str(tmp_path),
        refresh_seconds=30.0,
        kube_client=api,
        podresources_lister=kubelet,
        clock=clock,
        **kw,
    )


def test_is_an_attributor(tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet) -> None:
    attributor: Attributor = make(tmp_path, clock, api, kubelet)
    assert set(attributor.status()) == {"proc", "podresources", "kubernetes_api"}


def test_refresh_queries_once_per_interval(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    attributor = make(tmp_path, clock, api, kubelet)
    attributor.refresh()
    assert (api.calls, kubelet.calls) == (1, 1)
    assert api.selectors == [f"spec.nodeName={NODE}"]
    clock.now += 29.9
    attributor.refresh()
    attributor.allocations()
    attributor.attribute([])
    assert (api.calls, kubelet.calls) == (1, 1)
    clock.now += 0.1
    attributor.refresh()
    assert (api.calls, kubelet.calls) == (2, 2)


def test_first_use_without_refresh_fills_the_cache(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    kubelet.pods = [gpu_pod("p", {"main": [GPU_A]})]
    attributor = make(tmp_path, clock, api, kubelet)
    assert attributor.allocations() == {GPU_A: [ContainerRef("ml", "p", "main")]}
    assert kubelet.calls == 1


def test_unknown_container_forces_one_early_refresh(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    api.pods = [pod("old", UID, {"main": CID_OLD})]
    write_proc(tmp_path, {1: cgroup(UID, CID_OLD), 2: cgroup(UID2, CID_NEW)})
    attributor = make(tmp_path, clock, api, kubelet)
    attributor.refresh()
    assert attributor.attribute([1]) == {1: Attribution("container", ContainerRef("ml", "old", "main"))}
    assert api.calls == 1

    # A pod started after the last refresh: its container id is unknown, so the API is asked at once.
    api.pods.append(pod("new", UID2, {"worker": CID_NEW}))
    clock.now += 5
    assert attributor.attribute([2]) == {2: Attribution("container", ContainerRef("ml", "new", "worker"))}
    assert api.calls == 2
    # The forced refresh restarted the interval.
    clock.now += 29
    attributor.refresh()
    assert api.calls == 2


def test_an_id_the_api_never_reports_forces_only_one_refresh(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    api.pods = [pod("old", UID, {"main": CID_OLD})]
    write_proc(tmp_path, {7: cgroup(UID, CID_OTHER)})  # e.g. a sandbox, never in containerStatuses
    attributor = make(tmp_path, clock, api, kubelet)
    attributor.refresh()
    for _ in range(5):
        clock.now += 1
        assert attributor.attribute([7]) == {7: Attribution("unresolved")}
    assert api.calls == 2


def test_host_and_vanished_processes(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    write_proc(tmp_path, {10: "0::/system.slice/ollama.service\n", 11: "0::/user.slice/user-1000.slice\n"})
    attributor = make(tmp_path, clock, api, kubelet)
    assert attributor.attribute([10, 11, 12]) == {
        10: Attribution("host"),
        11: Attribution("host"),
        12: Attribution("unresolved"),
    }
    assert attributor.status()["proc"] is True


def test_conmon_and_pod_level_processes_are_unresolved_not_host(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    slice_ = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice"
    write_proc(tmp_path, {20: f"0::{slice_}/crio-conmon-{CID_OLD}.scope\n", 21: f"0::{slice_}\n"})
    api.pods = [pod("old", UID, {"main": CID_OLD})]
    attributor = make(tmp_path, clock, api, kubelet)
    assert attributor.attribute([20, 21]) == {20: Attribution("unresolved"), 21: Attribution("unresolved")}


def test_proc_unavailable_when_no_process_is_readable(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    attributor = make(tmp_path, clock, api, kubelet)
    assert attributor.attribute([1, 2]) == {1: Attribution("unresolved"), 2: Attribution("unresolved")}
    assert attributor.status()["proc"] is False  # no hostPID: NVML's PIDs are not in this /proc
    write_proc(tmp_path, {1: "0::/init.scope\n"})
    attributor.attribute([1, 2])
    assert attributor.status()["proc"] is True


def test_proc_status_does_not_flap_between_refresh_and_attribute(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    attributor = make(tmp_path, clock, api, kubelet)
    with caplog.at_level(logging.INFO, logger="exporter.attribution.kubelet"):
        for _ in range(3):
            attributor.refresh()
            attributor.attribute([1])
            assert attributor.status()["proc"] is False
            clock.now += 30
    assert [r.getMessage() for r in caplog.records if "proc" in r.getMessage()] == [
        "attribution source proc unavailable: no process readable in "
        f"{tmp_path} (is the pod running with hostPID?)"
    ]


def test_an_unknown_id_may_force_again_after_a_long_while(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    write_proc(tmp_path, {7: cgroup(UID, CID_OTHER)})
    attributor = make(tmp_path, clock, api, kubelet)
    attributor.attribute([7])
    assert api.calls == 2  # the first fill, then one forced by the unknown id
    for _ in range(9):
        clock.now += 30
        attributor.refresh()
        attributor.attribute([7])
    assert api.calls == 11  # regular refreshes only
    clock.now += 30
    attributor.refresh()
    attributor.attribute([7])
    assert api.calls == 13  # the entry expired after 300 s: one more forced refresh


def test_missing_proc_root(tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet) -> None:
    attributor = KubeletAttributor(
        NODE, proc_root=str(tmp_path / "none"), kube_client=api, podresources_lister=kubelet, clock=clock
    )
    attributor.refresh()
    assert attributor.status()["proc"] is False
    assert attributor.attribute([1]) == {1: Attribution("unresolved")}


def test_sources_failing_never_raise_and_are_reported(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    api.error = client.ApiException(status=403, reason="Forbidden")
    kubelet.error = PodResourcesError("socket missing")
    attributor = make(tmp_path, clock, api, kubelet)
    attributor.refresh()
    assert attributor.status() == {"proc": True, "podresources": False, "kubernetes_api": False}
    assert attributor.allocations() == {}
    # Anything unexpected from a source is contained too.
    api.error = RuntimeError("bug")
    kubelet.error = OSError("bug")
    clock.now += 30
    attributor.refresh()
    assert attributor.status() == {"proc": True, "podresources": False, "kubernetes_api": False}


def test_stale_allocations_are_dropped_but_the_pod_index_is_kept(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    api.pods = [pod("p", UID, {"main": CID_OLD})]
    kubelet.pods = [gpu_pod("p", {"main": [GPU_A]})]
    write_proc(tmp_path, {1: cgroup(UID, CID_OLD)})
    attributor = make(tmp_path, clock, api, kubelet)
    attributor.refresh()
    assert attributor.allocations() == {GPU_A: [ContainerRef("ml", "p", "main")]}

    api.error = client.ApiException(status=503)
    kubelet.error = PodResourcesError("kubelet restarting")
    clock.now += 30
    attributor.refresh()
    # The pod may be gone: an allocation nobody can confirm must not read as "allocated and idle".
    assert attributor.allocations() == {}
    # A container id never changes owner, so the last answer still names the process.
    assert attributor.attribute([1]) == {1: Attribution("container", ContainerRef("ml", "p", "main"))}
    assert attributor.status() == {"proc": True, "podresources": False, "kubernetes_api": False}

    api.error = kubelet.error = None
    clock.now += 30
    attributor.refresh()
    assert attributor.status() == {"proc": True, "podresources": True, "kubernetes_api": True}
    assert attributor.allocations() == {GPU_A: [ContainerRef("ml", "p", "main")]}


def test_state_changes_are_logged_once(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    kubelet.error = PodResourcesError("socket missing")
    attributor = make(tmp_path, clock, api, kubelet)
    with caplog.at_level(logging.INFO, logger="exporter.attribution.kubelet"):
        for _ in range(3):
            attributor.refresh()
            clock.now += 30
        kubelet.error = None
        attributor.refresh()
        clock.now += 30
        attributor.refresh()
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert messages == [
        (logging.WARNING, "attribution source podresources unavailable: socket missing"),
        (logging.INFO, "attribution source podresources available again"),
    ]


def test_without_node_name_the_api_is_never_asked(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    attributor = make(tmp_path, clock, api, kubelet, node_name=None)
    attributor.refresh()
    assert api.calls == 0
    assert attributor.status()["kubernetes_api"] is False


def test_api_disabled_by_configuration(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    attributor = make(tmp_path, clock, api, kubelet, use_kube_api=False)
    write_proc(tmp_path, {1: cgroup(UID, CID_OLD)})
    assert attributor.attribute([1]) == {1: Attribution("unresolved")}
    assert api.calls == 0
    assert attributor.status()["kubernetes_api"] is False


def test_accepts_a_client_returning_model_objects(
    tmp_path: Path, clock: FakeClock, kubelet: FakeKubelet
) -> None:
    class ModelCoreV1:
        def list_pod_for_all_namespaces(self, field_selector: str, **kwargs: Any) -> client.V1PodList:
            return client.V1PodList(
                items=[
                    client.V1Pod(
                        metadata=client.V1ObjectMeta(name="m", namespace="ns", uid=UID),
                        status=client.V1PodStatus(
                            container_statuses=[
                                client.V1ContainerStatus(
                                    name="c",
                                    container_id=f"containerd://{CID_OLD}",
                                    image="i",
                                    image_id="i",
                                    ready=True,
                                    restart_count=0,
                                )
                            ]
                        ),
                    )
                ]
            )

    write_proc(tmp_path, {1: cgroup(UID, CID_OLD)})
    attributor = KubeletAttributor(
        NODE, proc_root=str(tmp_path), kube_client=ModelCoreV1(), podresources_lister=kubelet, clock=clock
    )
    assert attributor.attribute([1]) == {1: Attribution("container", ContainerRef("ns", "m", "c"))}


# --- the PodResources fallback: pod known by UID, container id not named by the API ----------------


def test_fallback_names_the_only_gpu_container_of_the_pod(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    # The API knows the pod (by UID) but its status does not carry the new container id yet.
    api.pods = [pod("p", UID, {"main": None, "sidecar": CID_SIDE})]  # type: ignore[dict-item]
    kubelet.pods = [gpu_pod("p", {"main": [GPU_A], "sidecar": []})]
    write_proc(tmp_path, {1: cgroup(UID, CID_NEW), 2: cgroup(UID, CID_SIDE)})
    attributor = make(tmp_path, clock, api, kubelet)
    assert attributor.attribute([1, 2]) == {
        1: Attribution("container", ContainerRef("ml", "p", "main")),
        2: Attribution("container", ContainerRef("ml", "p", "sidecar")),  # the API's own answer
    }


def test_fallback_while_the_api_is_down_uses_the_last_known_pod_uid(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    api.pods = [pod("p", UID, {"main": CID_OLD})]
    kubelet.pods = [gpu_pod("p", {"main": [GPU_A]})]
    attributor = make(tmp_path, clock, api, kubelet)
    attributor.refresh()
    api.error = client.ApiException(status=403)
    clock.now += 30
    attributor.refresh()
    # The container restarted with a new id while the API is unavailable.
    write_proc(tmp_path, {1: cgroup(UID, CID_NEW)})
    assert attributor.attribute([1]) == {1: Attribution("container", ContainerRef("ml", "p", "main"))}
    assert attributor.status()["kubernetes_api"] is False


def test_fallback_refuses_to_guess_between_gpu_containers(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    api.pods = [pod("p", UID, {})]
    kubelet.pods = [gpu_pod("p", {"a": [GPU_A], "b": [GPU_B]})]
    write_proc(tmp_path, {1: cgroup(UID, CID_NEW)})
    attributor = make(tmp_path, clock, api, kubelet)
    assert attributor.attribute([1]) == {1: Attribution("unresolved")}
    # Knowing the process's GPU settles it.
    assert attributor.attribute([1], devices={1: [GPU_B]}) == {
        1: Attribution("container", ContainerRef("ml", "p", "b"))
    }


def test_fallback_needs_the_pod_uid_known(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    kubelet.pods = [gpu_pod("p", {"main": [GPU_A]})]
    write_proc(tmp_path, {1: cgroup(UID, CID_NEW)})
    attributor = make(tmp_path, clock, api, kubelet)
    assert attributor.attribute([1]) == {1: Attribution("unresolved")}


def test_sole_gpu_container_rule() -> None:
    pods = [
        gpu_pod("p", {"a": [f"{GPU_A}::0"], "b": [f"{GPU_A}::1"], "c": [GPU_B], "d": []}),
        gpu_pod("q", {"x": [GPU_A]}),
        PodResources(
            "r", "ml", (ContainerResources("n", (ContainerDevices("example.com/nic", ("eth0",)),)),)
        ),
    ]
    assert sole_gpu_container(pods, "ml", "p", None) is None  # a, b and c all hold GPUs
    assert sole_gpu_container(pods, "ml", "p", [GPU_A]) is None  # replicas of GPU_A: a and b
    assert sole_gpu_container(pods, "ml", "p", [GPU_B]) == ContainerRef("ml", "p", "c")
    assert sole_gpu_container(pods, "ml", "q", None) == ContainerRef("ml", "q", "x")
    assert sole_gpu_container(pods, "other", "q", None) is None
    assert sole_gpu_container(pods, "ml", "r", None) is None  # a NIC is not a GPU


def test_allocated_gpu_without_processes_still_names_its_pod(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    kubelet.pods = [gpu_pod("idle", {"main": [GPU_A]}), gpu_pod("busy", {"main": [GPU_B]}, namespace="prod")]
    attributor = make(tmp_path, clock, api, kubelet)
    attributor.refresh()
    assert attributor.attribute([]) == {}
    assert attributor.allocations() == {
        GPU_A: [ContainerRef("ml", "idle", "main")],
        GPU_B: [ContainerRef("prod", "busy", "main")],
    }


def test_no_early_refresh_while_the_api_fails(
    tmp_path: Path, clock: FakeClock, api: FakeCoreV1, kubelet: FakeKubelet
) -> None:
    api.error = client.ApiException(status=504, reason="Gateway Timeout")
    write_proc(tmp_path, {1: cgroup(UID, CID_NEW), 2: cgroup(UID2, CID_OTHER)})
    attributor = make(tmp_path, clock, api, kubelet)
    attributor.refresh()
    assert attributor.attribute([1, 2]) == {1: Attribution("unresolved"), 2: Attribution("unresolved")}
    assert (api.calls, kubelet.calls) == (1, 1)
