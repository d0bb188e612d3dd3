"""`gpu-automator dra-check`: the contract of issue 10 (flags, JSON shape, exit codes) end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.automator.cli_run import run_cli, run_module
from tests.automator.fixtures.dra import builders as b

REPO = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).parents[1] / "fixtures" / "dra"
HAMI = FIXTURES / "hami-cluster.yaml"
HAMI_USAGE = FIXTURES / "hami-usage.yaml"
DEMO = REPO / "deploy" / "demo" / "dra-cluster.yaml"
DEMO_USAGE = REPO / "deploy" / "demo" / "dra-usage.yaml"

FINDING_KEYS = {"kind", "severity", "node", "device", "claim", "pod", "message"}
DEVICE_KEYS = {"node", "device", "capacity", "consumed"}


def dra_check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "dra-check", *argv)


def as_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, _ = dra_check(capsys, *argv, "--output", "json")
    assert code == 0
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_json_shape_of_a_healthy_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    doc = as_json(capsys, "--cluster", str(HAMI), "--usage", str(HAMI_USAGE))
    assert set(doc) == {"findings", "devices"}
    assert doc["findings"] == []
    assert len(doc["devices"]) == 3
    for device in doc["devices"]:
        assert set(device) == DEVICE_KEYS
    first = doc["devices"][0]
    assert first == {
        "node": "gpu-node-a",
        "device": "hami-core-gpu.project-hami.io/gpu-node-a/hami-gpu-0",
        "capacity": {"cores": 100, "memory": 85899345920},
        "consumed": {"cores": 80, "memory": 62914560000},
    }


def test_findings_exit_zero_and_carry_every_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    objects = [
        b.node("n1", {"nvidia.com/gpu": "2"}),
        b.resource_slice("n1", [b.hami_device("n1", 0)]),
        b.shared_claim("ml", "a-gpu", "n1", 0, "60", "41Gi", "a"),
        b.shared_claim("ml", "b-gpu", "n1", 0, "50", "40Gi", "b"),
        b.pod("ml", "a", "n1", {"gpu": "a-gpu"}),
    ]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(b.as_list(objects)))
    doc = as_json(capsys, "--cluster", str(cluster))
    kinds = [(f["kind"], f["severity"]) for f in doc["findings"]]
    assert kinds == [
        ("overcommitted", "critical"),  # cores
        ("overcommitted", "critical"),  # memory
        ("mixed-mode", "warning"),
        ("orphaned-claim", "warning"),
    ]
    for finding in doc["findings"]:
        assert set(finding) == FINDING_KEYS
    orphan = doc["findings"][3]
    assert orphan["claim"] == "ml/b-gpu" and orphan["pod"] == "ml/b"
    assert orphan["device"] == f"{b.DRIVER}/n1/hami-gpu-0"
    assert doc["findings"][2]["node"] == "n1" and doc["findings"][2]["device"] is None


def test_multi_document_yaml_and_json_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    items = yaml.safe_load(HAMI.read_text())["items"]
    multi = tmp_path / "multi.yaml"
    multi.write_text(yaml.safe_dump_all(items))
    as_json_file = tmp_path / "cluster.json"
    as_json_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    expected = as_json(capsys, "--cluster", str(HAMI))
    assert as_json(capsys, "--cluster", str(multi)) == expected
    assert as_json(capsys, "--cluster", str(as_json_file)) == expected


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = dra_check(capsys, "--cluster", str(HAMI), "--usage", str(HAMI_USAGE))
    assert (code, err) == (0, "")
    assert out.strip() == "3 devices checked, 0 findings"
    code, out, _ = dra_check(capsys, "--cluster", str(DEMO), "--usage", str(DEMO_USAGE))
    assert code == 0
    first, *_, summary = out.strip().splitlines()
    assert first.startswith("critical usage-over-claim: container demo-dra/llm-chat/server uses ")
    assert summary == "2 devices checked, 1 findings (1 critical)"


@pytest.mark.parametrize(
    ("cluster_text", "message"),
    [
        (None, "cannot read"),
        ("items: [\n", "not valid YAML"),
        ("- just\n- a list\n", "expected a Kubernetes object"),
        ("kind: List\nitems: {a: 1}\n", "items: expected a list"),
    ],
)
def test_unreadable_cluster_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cluster_text: str | None, message: str
) -> None:
    cluster = tmp_path / "cluster.yaml"
    if cluster_text is not None:
        cluster.write_text(cluster_text)
    code, out, err = dra_check(capsys, "--cluster", str(cluster))
    assert code == 2 and out == ""
    assert err.startswith("gpu-automator: error: ") and message in err and str(cluster) in err


@pytest.mark.parametrize(
    ("usage_text", "message"),
    [
        ("pods: []\n", "containers: expected a list"),
        (
            "containers:\n- {namespace: ml, pod: a, container: c, memory_bytes: 1}\n",
            "containers[0]: gpu_uuid: missing",
        ),
        ("containers:\n- {namespace: ml, pod: a, container: c, gpu_uuid: G}\n", "memory_bytes: missing"),
        (
            "containers:\n- {namespace: ml, pod: a, container: c, gpu_uuid: G, memory_bytes: -1}\n",
            "memory_bytes",
        ),
        (
            "containers:\n- {namespace: ml, pod: a, container: c, gpu_uuid: G, memory_bytes: .nan}\n",
            "not a number",
        ),
        (
            "containers:\n- {namespace: ml, pod: a, container: c, gpu_uuid: G, memory_bytes: 1Gi}\n",
            "not a number",
        ),
        (
            "containers:\n- {namespace: ml, pod: a, container: c, gpu_uuid: G, memory_bytes: 1}\n"
            "- {namespace: ml, pod: a, container: c, gpu_uuid: G, memory_bytes: 2}\n",
            "listed twice",
        ),
        ("a: 1\n---\nb: 2\n", "expected one YAML mapping"),
    ],
)
def test_bad_usage_exits_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, usage_text: str, message: str
) -> None:
    usage = tmp_path / "usage.yaml"
    usage.write_text(usage_text)
    code, out, err = dra_check(capsys, "--cluster", str(HAMI), "--usage", str(usage))
    assert code == 2 and out == ""
    assert message in err


def test_unparsable_fields_are_findings_not_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(HAMI.read_text().replace('value: "85899345920"', "value: lots"))
    doc = as_json(capsys, "--cluster", str(cluster))
    (finding,) = doc["findings"]
    assert finding["kind"] == "unparsable"
    assert "spec.devices[0].capacity.memory.value" in finding["message"]


def test_the_installed_entry_point_runs_dra_check() -> None:
    proc = run_module("dra-check", "--cluster", str(DEMO), "--usage", str(DEMO_USAGE), "--output", "json")
    assert proc.returncode == 0, proc.stderr
    assert [f["kind"] for f in json.loads(proc.stdout)["findings"]] == ["usage-over-claim"]


def test_the_demo_cluster_has_exactly_the_one_broken_promise(capsys: pytest.CaptureFixture[str]) -> None:
    doc = as_json(capsys, "--cluster", str(DEMO), "--usage", str(DEMO_USAGE))
    (finding,) = doc["findings"]
    assert finding["kind"] == "usage-over-claim"
    assert finding["pod"] == "demo-dra/llm-chat"
    assert finding["claim"] == "demo-dra/llm-chat-gpu"
    assert finding["node"] == "demo-dra-node-1"
    # the same cluster without usage: the promises themselves hold
    assert as_json(capsys, "--cluster", str(DEMO))["findings"] == []
