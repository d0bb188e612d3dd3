"""Hostile input files (alias bombs, self-reference, deep nesting, huge numbers): every reader exits 2
naming the file, at once, instead of running out of memory or crashing with a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from steward_common import untrusted
from tests.automator.cli_run import REPO


def billion_laughs() -> str:
    """Nine Lists of nine aliases each, under 800 bytes, standing for 9^8 ResourceClaims."""
    claim = (
        "{apiVersion: resource.k8s.io/v1, kind: ResourceClaim, metadata: {name: c, namespace: n},"
        " spec: {devices: {requests: [{name: r, exactly: {deviceClassName: gpu}}]}}}"
    )
    lines = ["apiVersion: v1", "kind: List", "items:", f"- &a0 {claim}"]
    lines += [f"- &a{i} {{kind: List, items: [{', '.join([f'*a{i - 1}'] * 9)}]}}" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


HOSTILE = {
    "laughs.yaml": billion_laughs(),
    "self.yaml": "apiVersion: v1\nkind: List\nitems:\n- &a {kind: List, items: [*a]}\n",
    "deep.json": '{"kind": "List", "items": ' + "[" * 5000 + "]" * 5000 + "}",
    "digits.yaml": "apiVersion: v1\nkind: List\nitems: []\nx: " + "9" * 5000 + "\n",
    "digits.json": '{"apiVersion": "v1", "kind": "List", "items": [{"x": ' + "9" * 5000 + "}]}",
}


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    # The bound guards the test run; the old readers ran out of memory or ran for tens of seconds.
    return subprocess.run(
        [sys.executable, "-m", *argv], capture_output=True, text=True, cwd=REPO, check=False, timeout=20
    )


def test_billion_laughs_is_small() -> None:
    assert len(billion_laughs()) < 800


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("command", ["plan", "explain", "dra-check"])
def test_hostile_cluster_file_exits_2_naming_it(tmp_path: Path, name: str, command: str) -> None:
    path = tmp_path / name
    path.write_text(HOSTILE[name])
    usage = tmp_path / "usage.yaml"
    usage.write_text("pods: []\ncontainers: []\n" if command != "dra-check" else "containers: []\n")
    argv = {"plan": ["plan"], "explain": ["explain", "ns/pod"], "dra-check": ["dra-check"]}[command]
    result = _run("automator", *argv, "--cluster", str(path), "--usage", str(usage))
    if command != "dra-check" or name != "digits.json":  # dra-check's JSON reader skips unknown fields
        assert result.returncode == 2, result.stderr
        assert str(path) in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("command", ["plan", "dra-check"])
def test_hostile_usage_file_exits_2_naming_it(tmp_path: Path, name: str, command: str) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    usage = tmp_path / name
    usage.write_text(HOSTILE[name])
    result = _run("automator", command, "--cluster", str(cluster), "--usage", str(usage))
    assert result.returncode == 2, result.stderr
    assert str(usage) in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_scenario_exits_2_naming_it(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(HOSTILE[name].replace("kind: List", "gpus: []"))
    # the port is never bound: the scenario is read first
    result = _run("exporter", "--source", "mock", "--scenario", str(path), "--port", "9")
    assert result.returncode == 2, result.stderr
    assert str(path) in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_alias_expansion_is_measured_without_expanding() -> None:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with pytest.raises(untrusted.UnreadableError, match="aliases"):
        list(untrusted.yaml_documents(billion_laughs(), loader))
    # a few aliases are fine, and give what yaml gives
    text = "a: &x {b: [1, 2]}\nc: *x\nd: [*x, *x]\n"
    assert list(untrusted.yaml_documents(text, loader)) == [yaml.safe_load(text)]


def test_object_count_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    monkeypatch.setattr(untrusted, "MAX_NODES", 10)
    with pytest.raises(untrusted.UnreadableError, match="more than 10 nodes"):
        untrusted.yaml_document("&a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]", loader)
    assert untrusted.yaml_document("&a [1, 2, 3]", loader) == [1, 2, 3]


@pytest.mark.parametrize(
    ("text", "anchored"),
    [
        ("&a [1]", True),
        ("x: &a 1\ny: *a\n", True),
        ("- &a 1\n- *a\n", True),
        ("[&a 1, *a]", True),
        ("{x: 1,&a y: 2}", True),
        ("x:\t&a 1", True),
        ('{"x":&a 1, "y": *a}', True),
        ("[? &a x]", True),
        ("\ufeff&a 1", True),
        ("url: http://h/?a=1&b=2\n", False),
        ("x: 'R&D'\n", False),
        ("x: 1\n", False),
    ],
)
def test_anchors_are_found_where_yaml_allows_them(text: str, anchored: bool) -> None:
    assert untrusted.has_anchor(text) is anchored
