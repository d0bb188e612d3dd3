"""The demo's stack in small: the mock exporter plays an idle phase, a real Prometheus
evaluates rules/ on it, and the recorded idle series is read back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from tools.fakes.promserver import Prometheus, rules_on_mock_exporter

pytestmark = pytest.mark.integration

ACTIVITY = "namespace_pod:gpu_steward_container_gpu_utilization_ratio"


def _gpu(index: int, pod: str, phases: list[dict[str, object]]) -> dict[str, object]:
    owner = {"namespace": "team", "pod": pod, "container": "main"}
    return {
        "index": index,
        "uuid": f"GPU-{pod}",
        "model": "NVIDIA H100 80GB HBM3",
        "memory_total": "80Gi",
        "allocations": [owner],
        "processes": [{"pid": 100 + index, "owner": owner, "phases": phases}],
    }


SCENARIO = {
    "node": "rules-it-node",
    "gpus": [
        # Busy for the first 3 s, then idle: the phase the rules must call idle.
        _gpu(
            0,
            "goes-idle",
            [
                {"from": 0, "utilization": 0.9, "memory": "1Gi"},
                {"from": 3, "utilization": 0.0, "memory": "1Gi"},
            ],
        ),
        _gpu(1, "busy", [{"from": 0, "utilization": 0.8, "memory": "1Gi"}]),
    ],
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    tmp = tmp_path_factory.mktemp("rules-it")
    scenario = tmp / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    with rules_on_mock_exporter(tmp, scenario) as prom:
        yield prom


def _value(prom: Prometheus, expr: str) -> dict[str, float]:
    return {r["metric"]["pod"]: float(r["value"][1]) for r in prom.query(expr)}


def test_idle_phase_is_recorded_idle_and_busy_pod_is_not(stack: Prometheus) -> None:
    # Rule groups evaluate every 30 s: the first evaluation after the idle phase began flags it.
    stack.wait_for(f'{ACTIVITY}:idle{{pod="goes-idle"}} == 1', timeout=120)
    flags = _value(stack, f'{ACTIVITY}:idle{{namespace="team"}}')
    assert flags == {"goes-idle": 1.0, "busy": 0.0}
    activity = _value(stack, f'{ACTIVITY}:max{{namespace="team"}}')
    assert activity["goes-idle"] == 0.0
    assert activity["busy"] == pytest.approx(0.8)


def test_idle_clock_grows_only_for_the_idle_pod(stack: Prometheus) -> None:
    stack.wait_for(f'{ACTIVITY}:idle_seconds{{pod="goes-idle"}} >= 30', timeout=120)
    clocks = _value(stack, f'{ACTIVITY}:idle_seconds{{namespace="team"}}')
    assert clocks["goes-idle"] >= 30
    assert clocks.get("busy", 0.0) == 0.0
    # The allocated GPU of the idle pod counts as allocated-but-idle waste in its namespace (the
    # slow group evaluates every 2 minutes).
    waste = stack.wait_for('namespace:gpu_steward_gpu_allocation:count_idle{namespace="team"}', 150)
    assert [float(r["value"][1]) for r in waste] == [1.0]
