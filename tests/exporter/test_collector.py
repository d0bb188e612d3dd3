"""Per-container rules, the snapshot, and what a scrape serves (via a fresh CollectorRegistry)."""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.dcgm_compat import dcgm_families
from exporter.exposition import ExporterCollector
from exporter.loop import CollectionLoop
from exporter.model import Attribution, ContainerRef, GpuSample, ProcessSample
from exporter.view import GpuView, gpu_view
from tests.fakeclock import FakeClock

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
A = ContainerRef("ns", "a", "main")
B = ContainerRef("ns", "b", "main")
OWN_A = Attribution("container", A)
OWN_B = Attribution("container", B)


def gpu(
    index: int = 0, utilization: float | None = 0.8, processes: Sequence[ProcessSample] = (), **kw: object
) -> GpuSample:
    sample = GpuSample(
        index,
        f"GPU-{index}",
        "M",
        utilization=utilization,
        memory_used_bytes=100,
        memory_total_bytes=1000,
        processes=list(processes),
    )
    for k, v in kw.items():
        setattr(sample, k, v)
    return sample


def proc(pid: int, sm: float | None, mem: int | None = 10, owner: Attribution | None = None) -> ProcessSample:
    return ProcessSample(pid, sm, mem, owner)


def usage(view: GpuView) -> dict[str, tuple[float | None, int | None, int]]:
    return {c.ref.pod: (c.utilization, c.memory_used_bytes, c.processes) for c in view.containers}


# --- gpu_view: the per-container rules ---


def test_whole_gpu_single_container_gets_device_utilization() -> None:
    view = gpu_view(gpu(utilization=0.8, processes=[proc(1, 0.5, owner=OWN_A)]), {}, [A])
    assert usage(view) == {"a": (0.8, 10, 1)}


def test_allocated_container_without_process_is_idle_not_absent() -> None:
    view = gpu_view(gpu(utilization=0.0), {}, [A])
    assert usage(view) == {"a": (0.0, 0, 0)}
    assert view.allocations == (A,)


def test_shared_gpu_splits_by_process_and_caps_at_one() -> None:
    procs = [proc(1, 0.6, owner=OWN_A), proc(2, 0.7, owner=OWN_A), proc(3, 0.1, 30)]
    view = gpu_view(gpu(utilization=1.0, processes=procs), {3: OWN_B}, [A, B])
    assert usage(view) == {"a": (1.0, 20, 2), "b": (0.1, 30, 1)}


def test_foreign_process_on_a_whole_gpu_switches_to_process_sums() -> None:
    procs = [proc(1, 0.3, owner=OWN_A), proc(2, 0.2, owner=Attribution("host"))]
    view = gpu_view(gpu(utilization=0.55, processes=procs), {}, [A])
    assert usage(view) == {"a": (0.3, 10, 1)}
    assert [(u.reason, u.utilization, u.processes) for u in view.unattributed] == [("host", 0.2, 1)]


def test_unknown_owner_is_unresolved_not_dropped() -> None:
    view = gpu_view(gpu(processes=[proc(7, 0.4), proc(8, 0.1, owner=Attribution("host"))]), {}, [])
    assert view.containers == ()
    assert [(u.reason, u.utilization, u.memory_used_bytes) for u in view.unattributed] == [
        ("host", 0.1, 10),
        ("unresolved", 0.4, 10),
    ]


def test_unresolved_process_on_a_shared_gpu_makes_the_split_unknown() -> None:
    procs = [proc(1, 0.0, owner=OWN_A), proc(9, 0.9, 50)]  # pid 9: owner not found
    view = gpu_view(gpu(utilization=0.9, processes=procs), {}, [A, B])
    assert usage(view) == {"a": (None, None, 1), "b": (None, None, 0)}  # not "idle"
    assert [(u.reason, u.utilization) for u in view.unattributed] == [("unresolved", 0.9)]


def test_unresolved_process_on_a_whole_gpu_keeps_the_device_utilization() -> None:
    view = gpu_view(gpu(utilization=0.7, processes=[proc(9, 0.7)]), {}, [A])
    assert usage(view) == {"a": (0.7, None, 0)}


def test_unknown_process_values_are_withheld_not_zeroed() -> None:
    procs = [proc(1, None, None, owner=OWN_A), proc(2, 0.1, owner=OWN_B)]
    view = gpu_view(gpu(processes=procs), {}, [A, B])
    assert usage(view) == {"a": (None, None, 1), "b": (0.1, 10, 1)}


@pytest.mark.parametrize(
    "broken",
    [
        {"lost": True, "ok": False, "utilization": None},
        {"utilization": None, "ok": False, "errors": {"utilization": "Unknown"}},
        {"ok": False, "errors": {"processes": "NoPermission"}},
        {"ok": False, "errors": {"graphics_processes": "Unknown"}},
    ],
)
def test_no_container_series_when_the_gpu_read_failed(broken: dict[str, Any]) -> None:
    view = gpu_view(gpu(**broken), {}, [A])
    assert not view.known and view.containers == () and view.unattributed == ()
    assert view.allocations == (A,)  # who holds it is still known


# --- the loop and the scrape ---


class FakeSource:
    name = "fake"

    def __init__(self, samples: list[GpuSample]) -> None:
        self.samples = samples
        self.calls = 0
        self.fail = False
        self.collected = threading.Event()

    def collect(self) -> list[GpuSample]:
        self.calls += 1
        if self.calls >= 2:
            self.collected.set()
        if self.fail:
            raise RuntimeError("driver gone")
        return self.samples

    def close(self) -> None:
        pass


class FakeAttributor:
    def __init__(self) -> None:
        self.owners = {2: OWN_B}
        self.allocated = {"GPU-0": [A], "GPU-1": [B]}
        self.broken = False
        self.refreshed = 0

    def refresh(self) -> None:
        self.refreshed += 1

    def attribute(
        self, pids: Sequence[int], devices: Mapping[int, Collection[str]] | None = None
    ) -> dict[int, Attribution]:
        if self.broken:
            raise OSError("no /proc")
        return {p: self.owners.get(p, Attribution("unresolved")) for p in pids}

    def allocations(self) -> dict[str, list[ContainerRef]]:
        if self.broken:
            raise OSError("no socket")
        return self.allocated

    def status(self) -> dict[str, bool]:
        return {"proc": not self.broken, "podresources": not self.broken}


def setup(
    samples: list[GpuSample], compat: bool = False
) -> tuple[CollectionLoop, CollectorRegistry, FakeClock]:
    clock = FakeClock(100.0)
    loop = CollectionLoop(
        FakeSource(samples),
        FakeAttributor(),
        "node-1",
        10.0,
        [dcgm_families] if compat else [],
        clock=clock,
        wall_clock=lambda: 1.7e9,
    )
    registry = CollectorRegistry()
    registry.register(ExporterCollector(loop, "fake"))
    return loop, registry, clock


def dev(index: int) -> dict[str, str]:
    return {"node": "node-1", "gpu": str(index), "uuid": f"GPU-{index}", "model": "M"}


def pod(ref: ContainerRef) -> dict[str, str]:
    return {"namespace": ref.namespace, "pod": ref.pod, "container": ref.container}


def node_samples() -> list[GpuSample]:
    return [
        gpu(0, 0.0, temperature_celsius=40.0, power_watts=75.5, energy_joules=1234.0),
        gpu(1, 0.9, [proc(2, 0.9, 500)]),
        gpu(2, None, lost=True, ok=False, errors={"device": "GpuIsLost"}),
    ]


def test_scrape_serves_the_snapshot() -> None:
    loop, registry, _ = setup(node_samples())
    loop.attributor.allocated["GPU-2"] = [A]  # type: ignore[attr-defined]
    loop.collect_once()
    get = registry.get_sample_value
    assert get("gpu_steward_gpu_utilization_ratio", dev(0)) == 0.0
    assert get("gpu_steward_gpu_temperature_celsius", dev(0)) == 40.0
    assert get("gpu_steward_gpu_power_watts", dev(0)) == 75.5
    assert get("gpu_steward_gpu_energy_joules_total", dev(0)) == 1234.0
    assert get("gpu_steward_gpu_temperature_celsius", dev(1)) is None  # not read -> absent, not 0
    assert get("gpu_steward_gpu_allocation", dev(0) | pod(A)) == 1
    assert get("gpu_steward_container_gpu_utilization_ratio", dev(0) | pod(A)) == 0.0
    assert get("gpu_steward_container_gpu_processes", dev(0) | pod(A)) == 0.0
    assert get("gpu_steward_container_gpu_utilization_ratio", dev(1) | pod(B)) == 0.9
    assert get("gpu_steward_container_gpu_memory_used_bytes", dev(1) | pod(B)) == 500
    # the lost GPU: reported, allocation kept, no container series
    assert get("gpu_steward_gpu_lost", dev(2)) == 1
    assert get("gpu_steward_gpu_collection_success", dev(2)) == 0
    assert get("gpu_steward_gpu_collection_success", dev(0)) == 1
    assert get("gpu_steward_gpu_allocation", dev(2) | pod(A)) == 1
    assert get("gpu_steward_container_gpu_utilization_ratio", dev(2) | pod(A)) is None
    assert get("gpu_steward_gpu_read_errors_total", dev(2) | {"field": "device", "error": "GpuIsLost"}) == 1
    assert (
        get("gpu_steward_exporter_build_info", {"node": "node-1", "version": "0.1.0", "source": "fake"}) == 1
    )
    assert get("gpu_steward_exporter_attribution_available", {"node": "node-1", "source": "proc"}) == 1
    assert get("gpu_steward_exporter_last_collection_timestamp_seconds", {"node": "node-1"}) == 1.7e9
    assert loop.attributor.refreshed == 1  # type: ignore[attr-defined]


def test_scrape_never_calls_the_source_and_age_is_computed_at_scrape_time() -> None:
    loop, registry, clock = setup(node_samples())
    loop.collect_once()
    source = loop.source
    assert isinstance(source, FakeSource)
    assert registry.get_sample_value("gpu_steward_exporter_snapshot_age_seconds", {"node": "node-1"}) == 0
    clock.now += 7
    generate_latest(registry)
    assert registry.get_sample_value("gpu_steward_exporter_snapshot_age_seconds", {"node": "node-1"}) == 7
    assert source.calls == 1


def test_before_the_first_collection_only_exporter_series() -> None:
    _, registry, _ = setup(node_samples())
    text = generate_latest(registry).decode()
    assert "gpu_steward_exporter_build_info{" in text
    assert "gpu_steward_gpu_utilization_ratio{" not in text


def test_failed_collection_keeps_the_last_snapshot_and_counts() -> None:
    loop, registry, clock = setup(node_samples())
    loop.collect_once()
    loop.source.fail = True  # type: ignore[attr-defined]
    clock.now += 30
    assert loop.collect_once() is None
    assert registry.get_sample_value("gpu_steward_exporter_collection_errors_total", {"node": "node-1"}) == 1
    assert registry.get_sample_value("gpu_steward_gpu_utilization_ratio", dev(1)) == 0.9
    assert registry.get_sample_value("gpu_steward_exporter_snapshot_age_seconds", {"node": "node-1"}) == 30


def test_read_errors_accumulate_across_collections() -> None:
    loop, registry, _ = setup([gpu(0, ok=False, errors={"power": "NoPermission"})])
    loop.collect_once()
    loop.collect_once()
    labels = dev(0) | {"field": "power", "error": "NoPermission"}
    assert registry.get_sample_value("gpu_steward_gpu_read_errors_total", labels) == 2


def test_failing_attributor_degrades_to_unattributed() -> None:
    loop, registry, _ = setup(node_samples())
    loop.attributor.broken = True  # type: ignore[attr-defined]
    loop.collect_once()
    get = registry.get_sample_value
    assert (
        get("gpu_steward_exporter_attribution_available", {"node": "node-1", "source": "podresources"}) == 0
    )
    assert get("gpu_steward_unattributed_gpu_utilization_ratio", dev(1) | {"reason": "unresolved"}) == 0.9
    assert get("gpu_steward_gpu_allocation", dev(0) | pod(A)) is None
    assert get("gpu_steward_gpu_utilization_ratio", dev(0)) == 0.0


def test_attributor_gets_the_gpus_of_each_pid_when_it_accepts_them() -> None:
    seen: dict[str, object] = {}

    class DeviceAware(FakeAttributor):
        def attribute(
            self, pids: Sequence[int], devices: Mapping[int, Collection[str]] | None = None
        ) -> dict[int, Attribution]:
            seen["devices"] = devices
            return super().attribute(pids)

    loop = CollectionLoop(FakeSource(node_samples()), DeviceAware(), "node-1", 10.0)
    loop.collect_once()
    assert seen["devices"] == {2: {"GPU-1"}}


def test_healthz_follows_collection_progress() -> None:
    loop, _, clock = setup(node_samples())
    assert loop.healthy()
    loop.collect_once()
    clock.now += 3 * 10 + 29
    assert loop.healthy()
    clock.now += 2
    assert not loop.healthy()


def test_background_thread_collects_repeatedly_and_stops() -> None:
    source = FakeSource(node_samples())
    loop = CollectionLoop(source, FakeAttributor(), "node-1", 0.01)
    loop.start()
    try:
        assert source.collected.wait(timeout=30)
    finally:
        loop.stop()
    assert loop.snapshot is not None
    assert loop._thread is not None and not loop._thread.is_alive()


def test_every_emitted_metric_is_documented() -> None:
    loop, registry, _ = setup(node_samples(), compat=True)
    loop.attributor.owners = {2: Attribution("host")}  # type: ignore[attr-defined]
    loop.collect_once()
    names = {m.name for m in registry.collect()}
    docs = DOCS.read_text()
    documented = set(re.findall(r"`((?:gpu_steward_|DCGM_FI_)\w+)`", docs))
    missing = {n for n in names if n not in documented and f"{n}_total" not in documented}
    assert not missing, f"not in docs/metrics.md: {sorted(missing)}"
