"""`plan` and `explain` with --kueue: the cluster file's Kueue objects read only when it is on, its
variable, bad values and malformed objects refused naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from automator import cli
from tests.automator import k8s

EXAMPLE = Path(__file__).parents[1] / "fixtures" / "kueue_example"
ARGS = [
    "--cluster",
    str(EXAMPLE / "cluster.yaml"),
    "--usage",
    str(EXAMPLE / "usage.yaml"),
    "--now",
    "2025-06-01T12:00:00Z",
]


def plan_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    assert cli.main(["plan", *ARGS, "--output", "json", *extra]) == 0
    body: dict[str, object] = json.loads(capsys.readouterr().out)
    return body


@pytest.mark.usefixtures("clean_env")
def test_the_variable_sets_the_mode_and_the_flag_wins(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPU_STEWARD_KUEUE", "deactivate")
    monkeypatch.setenv("GPU_STEWARD_KUEUE_BOOST", "-7")
    assert plan_json(capsys)["kueue"]["mode"] == "deactivate"  # type: ignore[index]
    boosted = plan_json(capsys, "--kueue", "boost")["kueue"]
    assert boosted["boost"][0]["value"] == -7  # type: ignore[index]
    assert "kueue" not in plan_json(capsys, "--kueue", "off")


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--kueue", "on"], "--kueue: expected one of off, boost, deactivate"),
        (["--kueue-boost", "100"], "--kueue-boost: expected a whole number in [-2147483648, -1], got '100'"),
        (["--kueue-boost=-1e3"], "--kueue-boost: expected a whole number"),
    ],
)
def test_bad_values_exit_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert cli.main(["plan", *ARGS, *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.usefixtures("clean_env")
def test_a_malformed_kueue_object_is_refused_only_when_kueue_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = k8s.kueue_workload("w", priority=200)
    bad["spec"]["podSets"][0]["count"] = "four"
    cq = k8s.cluster_queue("cq")
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    for obj, field in ((bad, "Workload ml/w"), (cq, "ClusterQueue cq")):
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [k8s.node("n1"), obj]}))
        argv = ["plan", "--cluster", str(path), "--usage", str(EXAMPLE / "usage.yaml")]
        assert cli.main(argv) == 0  # off: Kueue's objects are not read
        capsys.readouterr()
        assert cli.main([*argv, "--kueue", "boost"]) == 2
        err = capsys.readouterr().err
        assert field in err, err
    assert "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: 'lots' is not a quantity" in err


@pytest.mark.usefixtures("clean_env")
def test_explain_of_a_pod_of_a_waiting_or_no_workload(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["explain", "team-a/train-idle-0", *ARGS, "--kueue", "boost"]) == 0
    out = capsys.readouterr().out
    assert (
        "for waiting Workload team-a/job-urgent-7e8f9 (priority 200): idle (GPU activity at most 0.01" in out
    )
    assert cli.main(["explain", "team-a/train-idle-0", *ARGS]) == 0
    assert "Kueue" not in capsys.readouterr().out  # off: nothing of Kueue
