"""Scenario schema: the built-in demo's content, lookups by time, and errors that name the field."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.model import Attribution, ContainerRef
from exporter.sources.scenario import ScenarioError, load_scenario, parse_scenario


def _minimal() -> dict[str, Any]:
    return {
        "node": "n1",
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-a",
                "model": "M",
                "memory_total": "80Gi",
                "allocations": [{"namespace": "ns", "pod": "p", "container": "c"}],
                "processes": [
                    {
                        "pid": 10,
                        "owner": {"namespace": "ns", "pod": "p", "container": "c"},
                        "phases": [{"from": 0, "utilization": 0.5, "memory": "1Gi"}],
                    }
                ],
            },
            {"index": 1, "uuid": "GPU-b", "model": "M", "memory_total": 1024},
            {
                "index": 2,
                "uuid": "GPU-c",
                "model": "M",
                "memory_total": "1Gi",
                "processes": [
                    {"pid": 30, "owner": {"host": True}, "phases": [{"from": 0, "utilization": 0.1}]}
                ],
            },
        ],
    }


def test_demo_scenario_has_the_required_pods() -> None:
    s = load_scenario(None)
    assert s.node == "demo-gpu-node-1"
    assert len(s.gpus) == 8
    assert {g.model for g in s.gpus} == {"NVIDIA H100 80GB HBM3"}
    gpus_of: dict[tuple[str, str], set[str]] = {}
    for g in s.gpus:
        for ref in g.allocations:
            gpus_of.setdefault((ref.namespace, ref.pod), set()).add(g.uuid)
    expected = {
        ("ml-team", "notebook-idle"): 1,
        ("ml-team", "train-busy"): 4,
        ("research", "batch-idle"): 2,
        ("research", "eval-mostly-idle"): 1,
        ("inference", "api-a"): 1,
        ("inference", "api-b"): 1,
    }
    assert {k: len(v) for k, v in gpus_of.items()} == expected
    assert gpus_of[("inference", "api-a")] == gpus_of[("inference", "api-b")]  # one shared GPU
    assert len({u for uuids in gpus_of.values() for u in uuids}) <= 8
    notebook = next(g for g in s.gpus if ContainerRef("ml-team", "notebook-idle", "jupyter") in g.allocations)
    assert all(p.owner.ref != ContainerRef("ml-team", "notebook-idle", "jupyter") for p in notebook.processes)
    assert any(p.owner == Attribution("host") for g in s.gpus for p in g.processes)
    assert [g.fails_at for g in s.gpus if g.fails_at is not None] == [120.0]


def test_demo_batch_idle_is_busy_then_idle_forever() -> None:
    s = load_scenario(None)
    batch = [p for g in s.gpus for p in g.processes if p.owner.ref and p.owner.ref.pod == "batch-idle"]
    assert len(batch) == 2
    for proc in batch:
        busy, idle, later = proc.at(30), proc.at(61), proc.at(100_000)
        assert busy is not None and busy.utilization > 0.5
        assert idle is not None and idle.utilization == 0
        assert later is not None and later.utilization == 0


def test_minimal_scenario_parses_quantities_and_owners() -> None:
    s = parse_scenario(_minimal())
    assert s.gpus[0].memory_total_bytes == 80 * 1024**3
    assert s.gpus[1].memory_total_bytes == 1024
    assert s.gpus[0].processes[0].phases[0].memory_bytes == 1024**3
    assert s.gpus[0].processes[0].owner == Attribution("container", ContainerRef("ns", "p", "c"))
    assert s.gpus[2].processes[0].owner == Attribution("host")
    assert s.attribution == {"proc": True, "podresources": True, "kubernetes_api": True}


def test_phase_lookup_with_period_and_late_start() -> None:
    doc = _minimal()
    doc["gpus"][0]["processes"][0]["phases"] = [
        {"from": 5, "utilization": 0.2},
        {"from": 10, "utilization": 0.8},
        {"from": 15, "running": False},
    ]
    doc["gpus"][0]["processes"][0]["period"] = 20
    proc = parse_scenario(doc).gpus[0].processes[0]
    assert proc.at(0) is None  # not started yet
    assert proc.at(6).utilization == 0.2  # type: ignore[union-attr]
    assert proc.at(12).utilization == 0.8  # type: ignore[union-attr]
    assert proc.at(16).running is False  # type: ignore[union-attr]
    assert proc.at(21) is None  # period wraps back before the first phase
    assert proc.at(32).utilization == 0.8  # type: ignore[union-attr]


def test_loop_wraps_scenario_time() -> None:
    doc = _minimal() | {"loop": True, "duration": 100}
    s = parse_scenario(doc)
    assert s.scenario_time(250) == 50
    assert parse_scenario(_minimal()).scenario_time(250) == 250


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    """Set a value at a dotted path with [i] indexes; value DELETE removes the key."""
    parts = path.replace("]", "").replace("[", ".").split(".")
    node: Any = doc
    for p in parts[:-1]:
        node = node[int(p)] if p.isdigit() else node[p]
    last = parts[-1]
    if value == "DELETE":
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("gpus[2].processes[0].pid", "abc", "gpus[2].processes[0].pid"),
        ("gpus[2].processes[0].pid", True, "gpus[2].processes[0].pid"),
        ("gpus[0].processes[0].phases[0].utilization", 1.5, "gpus[0].processes[0].phases[0].utilization"),
        ("gpus[0].processes[0].phases[0].memory", "lots", "gpus[0].processes[0].phases[0].memory"),
        ("gpus[0].processes[0].phases[0].memory", "100Gi", "gpus[0].processes[0].phases[0].memory"),
        ("gpus[0].processes[0].phases[0].from", "DELETE", "gpus[0].processes[0].phases[0].from"),
        (
            "gpus[0].processes[0].phases[0].utilization",
            "DELETE",
            "gpus[0].processes[0].phases[0].utilization",
        ),
        ("gpus[1].uuid", "DELETE", "gpus[1].uuid"),
        ("gpus[1].uuid", "GPU-a", "gpus[1].uuid"),
        ("gpus[1].index", 0, "gpus[1].index"),
        ("gpus[1].memroy_total", 5, "gpus[1].memroy_total"),
        ("gpus[1].fails_at", -1, "gpus[1].fails_at"),
        ("gpus[1].recovers_at", 10, "gpus[1].recovers_at"),
        ("gpus[1].unsupported", ["temprature"], "gpus[1].unsupported[0]"),
        ("gpus[0].allocations[0].pod", "", "gpus[0].allocations[0].pod"),
        ("gpus[0].allocations[0]", {"namespace": "ns", "pod": "p"}, "gpus[0].allocations[0].container"),
        ("gpus[0].processes[0].owner", {"host": True, "pod": "p"}, "gpus[0].processes[0].owner"),
        ("gpus[0].processes", "none", "gpus[0].processes"),
        ("loop", True, "duration"),
        ("attribution", {"podresource": False}, "attribution.podresource"),
        ("gpus", [], "gpus"),
        ("extra", 1, "extra"),
    ],
)
def test_errors_name_the_field(path: str, value: Any, expected: str) -> None:
    doc = _minimal()
    _set(doc, path, value)
    with pytest.raises(ScenarioError) as err:
        parse_scenario(doc)
    assert str(err.value).startswith(f"{expected}: "), str(err.value)


def test_phases_must_increase() -> None:
    doc = _minimal()
    doc["gpus"][0]["processes"][0]["phases"] = [{"from": 10, "utilization": 0}, {"from": 5, "utilization": 0}]
    with pytest.raises(ScenarioError, match=r"^gpus\[0\]\.processes\[0\]\.phases\[1\]\.from: "):
        parse_scenario(doc)


def test_a_pid_cannot_have_two_owners() -> None:
    doc = _minimal()
    proc = copy.deepcopy(doc["gpus"][0]["processes"][0])
    proc["owner"] = {"host": True}
    proc["phases"] = [{"from": 0, "utilization": 0.1}]
    doc["gpus"][1]["processes"] = [proc]
    with pytest.raises(ScenarioError, match=r"^gpus\[1\]\.processes\[0\]\.owner: pid 10"):
        parse_scenario(doc)


def test_load_scenario_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    doc = _minimal()
    doc["gpus"][2]["processes"][0]["pid"] = "x"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError, match=r"bad\.yaml: gpus\[2\]\.processes\[0\]\.pid: "):
        load_scenario(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("gpus: [\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(broken)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n")
    with pytest.raises(ScenarioError, match=r"\(document\): expected a mapping"):
        load_scenario(top)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(85899345920, 80 * 1024**3), ("80Gi", 80 * 1024**3), ("80G", 80 * 10**9), (8.0e10, 8 * 10**10)],
)
def test_memory_takes_bytes_or_quantities(value: Any, expected: int) -> None:
    doc = _minimal()
    doc["gpus"][0]["memory_total"] = value
    assert parse_scenario(doc).gpus[0].memory_total_bytes == expected


@pytest.mark.parametrize("value", ["1m", 1.5, -5, "-1Gi", "80GiB", True])
def test_memory_rejects_fractions_negatives_and_typos(value: Any) -> None:
    doc = _minimal()
    doc["gpus"][0]["memory_total"] = value
    with pytest.raises(ScenarioError, match=r"^gpus\[0\]\.memory_total: "):
        parse_scenario(doc)


def test_binary_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe gpus")
    with pytest.raises(ScenarioError, match=r"bad\.yaml: not UTF-8"):
        load_scenario(bad)


def test_the_documented_example_scenario_parses_as_described() -> None:
    """docs/exporter.md's scenario example is what a user copies: it must load, with its comments' meaning."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "exporter.md").read_text()
    block = text.split("## Mock scenarios", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    scenario = parse_scenario(yaml.safe_load(block))
    gpu = scenario.gpus[0]
    assert (scenario.node, gpu.memory_total_bytes, gpu.fails_at, gpu.recovers_at) == (
        "demo-node",
        81559 * 1024**2,
        120,
        300,
    )
    assert gpu.unsupported == {"power", "energy"}
    proc = gpu.processes[0]
    assert proc.owner == Attribution("container", ContainerRef("ml-team", "train", "trainer"))
    assert [(p.start, p.utilization, p.running) for p in proc.phases] == [
        (0, 0.9, True),
        (30, 0.0, True),
        (50, 0.0, False),
    ]
    assert proc.at(40) is not None and proc.at(40).memory_bytes == 70 * 1024**3  # type: ignore[union-attr]


# --- strictness: duplicate keys, finite and bounded numbers ---


def _one_gpu(**extra: object) -> dict[str, object]:
    return {"gpus": [{"index": 0, "uuid": "GPU-a", "model": "M", "memory_total": "1Gi", **extra}]}


def test_duplicate_keys_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(
        "gpus:\n  - index: 0\n    uuid: GPU-a\n    uuid: GPU-b\n    model: M\n    memory_total: 1Gi\n"
    )
    with pytest.raises(ScenarioError, match="line 4: duplicate key 'uuid'"):
        load_scenario(path)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"memory_total": "1e50"}, "gpus[0].memory_total"),
        ({"memory_total": 10**30}, "gpus[0].memory_total"),
        ({"memory_total": "NaN"}, "gpus[0].memory_total"),
        ({"memory_total": float("inf")}, "gpus[0].memory_total"),
        ({"max_power_watts": float("nan")}, "gpus[0].max_power_watts"),
        ({"max_power_watts": 1e9}, "gpus[0].max_power_watts"),
        ({"fails_at": 1e300}, "gpus[0].fails_at"),
        ({"index": 10**6}, "gpus[0].index"),
        ({"health": {"xid": [{"at": 0, "code": 0}]}}, "gpus[0].health.xid[0].code"),
        ({"health": {"clock_events": ["overheated"]}}, "gpus[0].health.clock_events[0]"),
        ({"health": {"encoder_utilization": 5}}, "gpus[0].health.encoder_utilization"),
        (
            {"mig": [{"uuid": "MIG-a", "profile": "1g", "gpu_instance_id": 1, "memory_total": "2Gi"}]},
            "gpus[0].mig",
        ),
    ],
)
def test_numbers_are_finite_and_in_range_naming_the_field(extra: dict[str, object], field: str) -> None:
    with pytest.raises(ScenarioError, match=f"^{re.escape(field)}"):
        parse_scenario(_one_gpu(**extra))


def test_mig_and_health_parse() -> None:
    scenario = parse_scenario(
        _one_gpu(
            memory_total="4Gi",
            health={"xid": [{"at": 5, "code": 79}], "ecc": {"uncorrected": 2}, "nvlink": True},
            mig=[
                {
                    "uuid": "MIG-a",
                    "profile": "1g.2gb",
                    "gpu_instance_id": 1,
                    "memory_total": "2Gi",
                    "allocations": [{"namespace": "n", "pod": "p", "container": "c", "pod_uid": "u"}],
                }
            ],
        )
    )
    gpu = scenario.gpus[0]
    assert gpu.health.xid[0].code == 79 and gpu.health.ecc_uncorrected == 2
    assert gpu.mig[0].allocations[0].pod_uid == "u"


def test_json_scenario_is_told_by_content_and_parses_as_yaml_does(tmp_path: Path) -> None:
    # Issue 14: JSON is parsed as JSON whatever the file is called; duplicate keys are still refused.
    doc = _minimal()
    as_json = tmp_path / "scenario.yaml"
    as_json.write_text(json.dumps(doc))
    as_yaml = tmp_path / "scenario.yml"
    as_yaml.write_text(yaml.safe_dump(doc))
    assert load_scenario(as_json) == load_scenario(as_yaml)
    duplicate = tmp_path / "dup.json"
    duplicate.write_text('{"gpus": [], "gpus": []}')
    with pytest.raises(ScenarioError, match=r"dup\.json: duplicate key 'gpus'"):
        load_scenario(duplicate)
    flow = tmp_path / "flow.yaml"
    flow.write_text("{gpus: [1}")  # looks like JSON, is neither: the YAML parser names the problem
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(flow)
