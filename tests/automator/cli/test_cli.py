"""gpu-automator plan / explain / run through main() and one real `python -m automator` process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from automator import cli
from tests.automator.cli_run import run_cli, run_module

FIXTURES = Path(__file__).parents[1] / "fixtures" / "docs_example"
CLUSTER = str(FIXTURES / "cluster.yaml")
USAGE = str(FIXTURES / "usage.yaml")
NOW = "2025-06-01T12:00:00Z"


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "plan", "--cluster", CLUSTER, "--usage", USAGE, "--now", NOW, "--output", "json"
    )
    assert code == 0
    result = json.loads(out)
    assert set(result) >= {"decisions", "unresolved", "warnings"}
    (decision,) = result["decisions"]
    assert decision["preemptor"] == "ml/urgent-1" and decision["node"] == "gpu-a"
    assert decision["victims"] == ["ml/train-a"] and decision["gpus_freed"] == 4
    assert decision["victim_details"][0]["gpu_activity"] == 0.01
    (unresolved,) = result["unresolved"]
    assert unresolved["preemptor"] == "ml/urgent-2" and "closest: gpu-a needs 8 GPUs" in unresolved["reason"]


def test_plan_text_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "plan", "--cluster", CLUSTER, "--usage", USAGE, "--now", NOW)
    assert code == 0
    assert "ml/urgent-1 (priority 1000, 4 GPUs) -> gpu-a" in out and "evict ml/train-a" in out


@pytest.mark.parametrize(
    ("flags", "reclaimable"),
    [
        ([], 4),  # notebook-b (0.0, coverage 0.95) and notebook-c (0.02) are idle at the default 0.05
        (["--default-gpu-idle-threshold", "0.005"], 2),  # notebook-c busy; its class sets no threshold
        (
            ["--default-gpu-idle-threshold", "0.005", "--min-coverage", "0.99"],
            0,
        ),  # notebook-b covered too little
    ],
)
def test_plan_flags_change_the_config(
    capsys: pytest.CaptureFixture[str], flags: list[str], reclaimable: int
) -> None:
    code, out, _ = run_cli(
        capsys, "plan", "--cluster", CLUSTER, "--usage", USAGE, "--now", NOW, "--output", "json", *flags
    )
    assert code == 0
    result = json.loads(out)
    assert result["decisions"][0]["victims"] == ["ml/train-a"]  # its class sets its own threshold 0.05
    assert f"0 free + {reclaimable} reclaimable" in result["unresolved"][0]["reason"]


def test_gpu_resource_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "plan", "--cluster", CLUSTER, "--usage", USAGE, "--now", NOW, "--gpu-resource", "amd.com/gpu"
    )
    assert code == 0 and out.strip() == "no pending preemptors"


def test_env_variable_sets_cooldown_and_flag_wins(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = yaml.safe_load(Path(CLUSTER).read_text())
    for item in docs["items"]:
        if item["metadata"]["name"] == "urgent-1":
            item["metadata"]["annotations"] = {"gpu-steward.io/last-reclaim-time": "2025-06-01T11:58:00Z"}
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(docs))
    args = ["plan", "--cluster", str(cluster), "--usage", USAGE, "--now", NOW, "--output", "json"]
    assert json.loads(run_cli(capsys, *args)[1])["skipped_cooldown"] == ["ml/urgent-1"]
    monkeypatch.setenv("GPU_STEWARD_COOLDOWN_SECONDS", "60")
    assert json.loads(run_cli(capsys, *args)[1])["skipped_cooldown"] == []
    assert json.loads(run_cli(capsys, *args, "--cooldown-seconds", "600")[1])["skipped_cooldown"] == [
        "ml/urgent-1"
    ]
    monkeypatch.setenv("GPU_STEWARD_COOLDOWN_SECONDS", "soon")
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and "GPU_STEWARD_COOLDOWN_SECONDS" in err


def test_explain_victim_and_preemptor(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--cluster", CLUSTER, "--usage", USAGE, "--now", NOW]
    code, out, _ = run_cli(capsys, "explain", "ml/train-a", *base)
    assert code == 0 and "evicted for ml/urgent-1" in out and "[8-idle]" in out
    code, out, _ = run_cli(capsys, "explain", "research/sweep-7", *base)
    assert code == 0 and "protected [6-gpu-busy] GPU activity 0.42" in out
    code, out, _ = run_cli(capsys, "explain", "ml/serving-0", *base)
    assert "[0-pdb]" in out
    code, out, _ = run_cli(capsys, "explain", "ml/urgent-2", *base)
    assert "preemptor unresolved" in out


@pytest.mark.parametrize("pod", ["ml/nope", "no-slash"])
def test_explain_unknown_pod_exits_2(capsys: pytest.CaptureFixture[str], pod: str) -> None:
    code, _, err = run_cli(capsys, "explain", pod, "--cluster", CLUSTER, "--usage", USAGE, "--now", NOW)
    assert code == 2 and "error" in err


def _edit(tmp_path: Path, name: str, path: list[str | int], value: object) -> str:
    docs = yaml.safe_load(Path(CLUSTER).read_text())
    (item,) = [i for i in docs["items"] if i["metadata"]["name"] == name]
    target = item
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    out = tmp_path / "cluster.yaml"
    out.write_text(yaml.safe_dump(docs))
    return str(out)


@pytest.mark.parametrize(
    ("name", "path", "value", "message"),
    [
        (
            "train-a",
            ["spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"],
            "abc",
            "Pod ml/train-a: spec.containers[0].resources.limits.nvidia.com/gpu: 'abc' is not a quantity",
        ),
        (
            "urgent-2",
            ["spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"],
            "0.5",
            "Pod ml/urgent-2: spec.containers[0].resources.limits.nvidia.com/gpu: '0.5' is not a whole",
        ),
        ("train-a", ["spec", "containers", 0, "resources", "requests", "memory"], "lots", "requests.memory"),
        ("gpu-a", ["status", "allocatable", "nvidia.com/gpu"], "eight", "Node gpu-a: status.allocatable"),
        ("batch", ["value"], "high", "PriorityClass batch: value"),
        (
            "serving",
            ["status", "disruptionsAllowed"],
            "none",
            "PodDisruptionBudget ml/serving: status.disrup",
        ),
        (
            "train-a",
            ["metadata", "creationTimestamp"],
            "monday",
            "Pod ml/train-a: metadata.creationTimestamp",
        ),
    ],
)
def test_bad_cluster_exits_2_naming_object_and_field(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    name: str,
    path: list[str | int],
    value: object,
    message: str,
) -> None:
    cluster = _edit(tmp_path, name, path, value)
    code, out, err = run_cli(capsys, "plan", "--cluster", cluster, "--usage", USAGE, "--now", NOW)
    assert code == 2 and out == ""
    assert message in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pods:\n- {namespace: ml, name: a, gpu_activity: busy}\n", "Pod ml/a"),
        ("pods:\n- {namespace: ml, name: a, gpu_activity: 1.5}\n", "gpu_activity"),
        ("pods:\n- {namespace: ml, name: a, coverage: -1}\n", "coverage"),
        ("pods:\n- {name: a}\n", "pods[0]: namespace: missing"),
        ("nodes: []\n", "pods: expected a list"),
        ("pods: [\n", "not valid YAML"),
    ],
)
def test_bad_usage_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    usage = tmp_path / "usage.yaml"
    usage.write_text(text)
    code, _, err = run_cli(capsys, "plan", "--cluster", CLUSTER, "--usage", str(usage), "--now", NOW)
    assert code == 2 and message in err


def test_bad_now_and_missing_file_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "plan", "--cluster", CLUSTER, "--usage", USAGE, "--now", "noon")
    assert code == 2 and "--now" in err
    code, _, err = run_cli(capsys, "plan", "--cluster", "/nonexistent.yaml", "--usage", USAGE)
    assert code == 2 and "/nonexistent.yaml" in err


def test_run_without_a_loadable_service_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise ImportError("boom")

    monkeypatch.setattr(cli, "_load_service", broken)
    code, _, err = run_cli(capsys, "run")
    assert code == 1 and "boom" in err


# What `plan`/`explain` must never load: the web framework, the scheduler and the API clients.
HEAVY = (
    "flask",
    "werkzeug",
    "apscheduler",
    "kubernetes",
    "prometheus_api_client",
    "requests",
    "automator.service.main",
)


@pytest.mark.parametrize("command", ["plan", "explain", "run", "backtest"])
def test_help_of_the_offline_commands_imports_no_client(command: str) -> None:
    probe = (
        "import sys\n"
        "from automator import cli\n"
        "try:\n"
        f"    cli.main([{command!r}, '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert proc.stderr.strip() == "", f"{command} --help loaded {proc.stderr.strip()}"
    assert "--cooldown-seconds" in proc.stdout


def test_offline_plan_imports_no_client() -> None:
    probe = (
        "import sys\n"
        "from automator import cli\n"
        f"cli.main(['plan', '--cluster', {CLUSTER!r}, '--usage', {USAGE!r}, '--now', {NOW!r}])\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert proc.stderr.strip() == "" and "evict ml/train-a" in proc.stdout


def test_python_dash_m_entry_point() -> None:
    proc = run_module("plan", "--cluster", CLUSTER, "--usage", USAGE, "--now", NOW, "--output", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["decisions"][0]["victims"] == ["ml/train-a"]
