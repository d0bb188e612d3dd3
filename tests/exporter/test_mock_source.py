"""The mock source plays a scenario against a fake clock."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.model import Attribution, ContainerRef, GpuSample
from exporter.sources.mock import MockAttributor, MockSource, ScenarioFile
from exporter.sources.scenario import load_scenario, parse_scenario
from tests.fakeclock import FakeClock


def _by_index(samples: list[GpuSample]) -> dict[int, GpuSample]:
    return {s.index: s for s in samples}


def _doc(**gpu_extra: Any) -> dict[str, Any]:
    return {
        "node": "n",
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-0",
                "model": "M",
                "memory_total": "10Gi",
                "idle_power_watts": 100,
                "max_power_watts": 300,
                "processes": [
                    {
                        "pid": 1,
                        "owner": {"namespace": "a", "pod": "p", "container": "c"},
                        "phases": [
                            {"from": 0, "utilization": 0.5, "memory": "2Gi"},
                            {"from": 10, "utilization": 0.0, "memory": "2Gi"},
                            {"from": 20, "running": False},
                        ],
                    },
                    {
                        "pid": 2,
                        "owner": {"host": True},
                        "phases": [{"from": 0, "utilization": 0.7, "memory": "1Gi"}],
                    },
                ],
                **gpu_extra,
            },
            {"index": 1, "uuid": "GPU-1", "model": "M", "memory_total": "10Gi"},
        ],
    }


def test_demo_timeline_busy_then_idle_then_lost() -> None:
    clock = FakeClock()
    source = MockSource(load_scenario(None), clock)
    start = _by_index(source.collect())
    assert len(start) == 8
    assert start[5].utilization == pytest.approx(0.85)  # batch-idle busy
    assert start[0].processes == [] and start[0].utilization == 0  # notebook-idle: allocated, nothing runs
    clock.now += 61
    idle = _by_index(source.collect())
    assert idle[5].utilization == 0
    assert [p.sm_utilization for p in idle[5].processes] == [0.0]
    assert idle[5].processes[0].memory_used_bytes == 30 * 1024**3  # idle but holding memory
    assert not idle[4].lost
    clock.now += 60
    lost = _by_index(source.collect())
    assert lost[4].lost and not lost[4].ok
    assert lost[4].uuid.endswith("000000000004") and lost[4].model == "NVIDIA H100 80GB HBM3"
    assert lost[4].utilization is None and lost[4].processes == []
    assert all(s.ok and not s.lost for i, s in lost.items() if i != 4)  # the others keep reporting


def test_derived_device_readings() -> None:
    source = MockSource(parse_scenario(_doc()), FakeClock())
    gpu = source.collect()[0]
    assert gpu.utilization == pytest.approx(1.0)  # 0.5 + 0.7 capped
    assert gpu.memory_used_bytes == 3 * 1024**3
    assert gpu.memory_total_bytes == 10 * 1024**3
    assert gpu.power_watts == pytest.approx(300)
    assert {p.pid: p.owner for p in gpu.processes} == {
        1: Attribution("container", ContainerRef("a", "p", "c")),
        2: Attribution("host"),
    }


def test_energy_integrates_power_between_collections() -> None:
    clock = FakeClock()
    source = MockSource(parse_scenario(_doc()), clock)
    first = source.collect()[1]  # GPU 1: no processes, idle power 70 W (default)
    clock.now += 10
    second = source.collect()[1]
    assert first.energy_joules == 0
    assert second.energy_joules == pytest.approx(10 * 70)


def test_processes_stop_when_not_running() -> None:
    clock = FakeClock()
    source = MockSource(parse_scenario(_doc()), clock)
    clock.now += 25
    gpu = source.collect()[0]
    assert [p.pid for p in gpu.processes] == [2]


def test_unsupported_fields_are_left_out_without_error() -> None:
    doc = _doc(unsupported=["temperature", "power", "process_utilization"])
    gpu = MockSource(parse_scenario(doc), FakeClock()).collect()[0]
    assert gpu.temperature_celsius is None and gpu.power_watts is None
    assert gpu.energy_joules is not None
    assert all(p.sm_utilization is None for p in gpu.processes)
    assert gpu.ok and gpu.errors == {}


def test_gpu_recovers() -> None:
    clock = FakeClock()
    source = MockSource(parse_scenario(_doc(fails_at=5, recovers_at=8)), clock)
    states = []
    for t in (0, 6, 9):
        clock.now = 1000 + t
        states.append(source.collect()[0].lost)
    assert states == [False, True, False]


def test_loop_restarts_the_timeline() -> None:
    clock = FakeClock()
    source = MockSource(parse_scenario(_doc() | {"loop": True, "duration": 30}), clock)
    clock.now += 35  # = 5 s into the second round: pid 1 busy again
    gpu = source.collect()[0]
    assert {p.pid: p.sm_utilization for p in gpu.processes} == {1: 0.5, 2: 0.7}


def test_attributor_from_scenario() -> None:
    doc = _doc(allocations=[{"namespace": "a", "pod": "p", "container": "c"}])
    attributor = MockAttributor(parse_scenario(doc))
    assert attributor.allocations() == {"GPU-0": [ContainerRef("a", "p", "c")]}
    assert attributor.attribute([1, 2, 99]) == {
        1: Attribution("container", ContainerRef("a", "p", "c")),
        2: Attribution("host"),
        99: Attribution("unresolved"),
    }
    assert attributor.status() == {"proc": True, "podresources": True, "kubernetes_api": True}


def test_degraded_attribution_is_simulated() -> None:
    doc = _doc(allocations=[{"namespace": "a", "pod": "p", "container": "c"}])
    doc["attribution"] = {"podresources": False, "proc": False}
    scenario = parse_scenario(doc)
    attributor = MockAttributor(scenario)
    assert attributor.allocations() == {}
    assert attributor.status()["podresources"] is False
    assert attributor.attribute([1]) == {1: Attribution("unresolved")}
    gpu = MockSource(scenario, FakeClock()).collect()[0]
    assert {p.owner for p in gpu.processes} == {Attribution("unresolved")}


def test_demo_through_the_collector_after_two_minutes() -> None:
    from prometheus_client import CollectorRegistry

    from exporter.exposition import ExporterCollector
    from exporter.loop import CollectionLoop

    clock = FakeClock()
    scenario = load_scenario(None)
    loop = CollectionLoop(
        MockSource(scenario, clock), MockAttributor(scenario), scenario.node, 10.0, clock=clock
    )
    registry = CollectorRegistry()
    registry.register(ExporterCollector(loop, "mock"))
    clock.now += 130
    loop.collect_once()

    def util(pod: str, gpu: str) -> float | None:
        values = [
            s.value
            for metric in registry.collect()
            for s in metric.samples
            if s.name == "gpu_steward_container_gpu_utilization_ratio"
            and (s.labels["pod"], s.labels["gpu"], s.labels["node"]) == (pod, gpu, "demo-gpu-node-1")
        ]
        assert len(values) <= 1
        return values[0] if values else None

    assert util("notebook-idle", "0") == 0.0
    assert util("batch-idle", "5") == 0.0 and util("batch-idle", "6") == 0.0
    assert util("train-busy", "1") == pytest.approx(0.92)  # 130 s = 10 s into its 60 s period
    assert util("train-busy", "4") is None  # lost GPU: unknown, not idle
    assert util("api-a", "7") == pytest.approx(0.35) and util("api-b", "7") == pytest.approx(0.10)


def test_mock_plays_health_signals_and_mig_devices() -> None:
    doc = {
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-mig",
                "model": "A100",
                "memory_total": "80Gi",
                "health": {
                    "xid": [{"at": 10, "code": 48}],
                    "remapped_rows": {"uncorrectable": 1, "failure": True},
                    "clock_events": ["hw_thermal_slowdown"],
                },
                "mig": [
                    {
                        "uuid": "MIG-1",
                        "profile": "3g.40gb",
                        "gpu_instance_id": 1,
                        "memory_total": "40Gi",
                        "processes": [
                            {
                                "pid": 7,
                                "owner": {"namespace": "n", "pod": "p", "container": "c"},
                                "phases": [{"from": 0, "utilization": 0.5, "memory": "1Gi"}],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    clock = FakeClock()
    source = MockSource(parse_scenario(doc), clock)
    parent, mig = source.collect()
    assert parent.mig_enabled and parent.utilization is None and parent.processes == []
    assert parent.memory_used_bytes == 1 << 30 and parent.xid_errors == {} and parent.last_xid == 0
    assert parent.row_remap_failure is True and parent.remapped_rows["uncorrectable"] == 1
    assert parent.clock_event_reasons == frozenset({"hw_thermal_slowdown"})
    assert mig.mig is not None and mig.mig.parent_uuid == "GPU-mig" and mig.index == 0
    assert mig.utilization is None and [p.pid for p in mig.processes] == [7]
    clock.now += 11
    parent, _ = source.collect()
    assert parent.xid_errors == {48: 1} and parent.last_xid == 48


def _write(path: Path, doc: dict[str, Any], mtime_ns: int) -> None:
    path.write_text(yaml.safe_dump(doc))
    os.utime(path, ns=(mtime_ns, mtime_ns))  # a distinct mtime, without waiting for the clock to tick


def test_a_followed_scenario_file_changes_what_happens_from_now_on(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    gpu = {"index": 0, "uuid": "GPU-0", "model": "M", "memory_total": "10Gi"}
    idle = {
        "node": "n",
        "gpus": [{**gpu, "allocations": [{"namespace": "a", "pod": "old", "container": "c"}]}],
    }
    _write(path, idle, 1_000_000_000)
    feed = ScenarioFile(path)
    clock = FakeClock()
    source = MockSource(feed.current(), clock, follow=feed.current)
    attributor = MockAttributor(feed.current(), follow=feed.current)
    clock.now += 100
    assert source.collect()[0].utilization == 0
    assert attributor.allocations() == {"GPU-0": [ContainerRef("a", "old", "c")]}

    busy = {"node": "n", "gpus": [{**gpu,
        "allocations": [{"namespace": "a", "pod": "new", "container": "c"}],
        "processes": [{"pid": 7, "owner": {"namespace": "a", "pod": "new", "container": "c"},
                       "phases": [{"from": 0, "utilization": 0.9, "memory": "1Gi"}]}]}]}  # fmt: skip
    _write(path, busy, 2_000_000_000)
    clock.now += 1
    (gpu,) = source.collect()
    attributor.refresh()
    assert gpu.utilization == 0.9 and [p.pid for p in gpu.processes] == [7]  # `from: 0`: running now
    assert attributor.allocations() == {"GPU-0": [ContainerRef("a", "new", "c")]}

    path.write_text("gpus: [")  # broken: the previous scenario stays
    os.utime(path, ns=(3_000_000_000, 3_000_000_000))
    assert source.collect()[0].utilization == 0.9


def test_a_scenario_file_that_did_not_change_is_not_read_again(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    _write(path, _doc(), 1_000_000_000)
    feed = ScenarioFile(path)
    first = feed.current()
    assert feed.current() is first
