"""Flags and environment, start-up failures, and serving (in-process and as `python -m exporter`)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

import exporter.attribution.kubelet
import exporter.sources.nvml
from exporter.attribution.degraded import DegradedAttributor
from exporter.cli import build_source, run
from exporter.settings import SETTINGS, Config, parse_config
from exporter.sources.mock import MockSource
from steward_common.settingspec import SettingError
from tools.fakes.promserver import free_port, wait_http

ROOT = Path(__file__).resolve().parents[2]


def test_defaults() -> None:
    c = parse_config([], {})
    assert c == Config()
    assert (c.source, c.port, c.listen_address, c.interval) == ("nvml", 31995, "0.0.0.0", 10.0)
    assert c.compat == () and c.kube_api and c.node_name is None


def test_environment_and_flags() -> None:
    env = {
        "GPU_STEWARD_SOURCE": "mock",
        "GPU_STEWARD_PORT": "9000",
        "GPU_STEWARD_INTERVAL": "2.5",
        "GPU_STEWARD_COMPAT": "dcgm",
        "GPU_STEWARD_NO_KUBE_API": "true",
        "GPU_STEWARD_PROC_ROOT": "/host/proc",
        "NODE_NAME": "from-downward-api",
    }
    c = parse_config([], env)
    assert (c.source, c.port, c.interval, c.compat, c.kube_api) == ("mock", 9000, 2.5, ("dcgm",), False)
    assert (c.proc_root, c.node_name) == ("/host/proc", "from-downward-api")
    c = parse_config(
        ["--port", "9100", "--node-name", "flag-node", "--compat", "dcgm", "--compat", "dcgm"], env
    )
    assert (c.port, c.node_name, c.compat) == (9100, "flag-node", ("dcgm",))
    assert parse_config([], {"GPU_STEWARD_NODE_NAME": "a", "NODE_NAME": "b"}).node_name == "a"


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--port", "http"], {}, "--port"),
        (["--port", "70000"], {}, "--port"),
        ([], {"GPU_STEWARD_PORT": "0"}, "GPU_STEWARD_PORT"),
        (["--interval", "0"], {}, "--interval"),
        ([], {"GPU_STEWARD_INTERVAL": "soon"}, "GPU_STEWARD_INTERVAL"),
        (["--source", "dcgm"], {}, "--source"),
        (["--compat", "prometheus"], {}, "--compat"),
        (["--compat", ""], {}, "--compat"),
        ([], {"GPU_STEWARD_COMPAT": "dcgm,hami"}, "GPU_STEWARD_COMPAT"),
        ([], {"GPU_STEWARD_NO_KUBE_API": "maybe"}, "GPU_STEWARD_NO_KUBE_API"),
        (["--log-level", "loud"], {}, "--log-level"),
        (["--scenario", "x.yaml"], {}, "--scenario"),  # needs --source mock
        (["--source", "mock", "--scenario-reload"], {}, "--scenario-reload"),  # needs --scenario
        (["--source", "mock"], {"GPU_STEWARD_SCENARIO_RELOAD": "1"}, "GPU_STEWARD_SCENARIO_RELOAD"),
        (["--attribution-refresh", "-1"], {}, "--attribution-refresh"),
        (["--interval", "nan"], {}, "--interval"),
        ([], {"GPU_STEWARD_INTERVAL": "inf"}, "GPU_STEWARD_INTERVAL"),
        ([], {"GPU_STEWARD_ATTRIBUTION_REFRESH": "1e9"}, "GPU_STEWARD_ATTRIBUTION_REFRESH"),
        ([], {"GPU_STEWARD_NODE_NAME": " "}, "GPU_STEWARD_NODE_NAME"),
    ],
)
def test_bad_values_name_the_flag_or_variable(argv: list[str], env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingError, match=f"^{named}"):
        parse_config(argv, env)


def test_docs_list_every_flag_and_variable_with_its_default() -> None:
    text = (ROOT / "docs" / "exporter.md").read_text()
    documented = set(re.findall(r"^\| `(--[a-z.-]+)", text, re.MULTILINE))
    assert documented == {opt.flag for opt in SETTINGS}
    for opt in SETTINGS:
        row = next((line for line in text.splitlines() if line.startswith(f"| `{opt.flag}")), None)
        assert row is not None, f"{opt.flag} missing from docs/exporter.md"
        assert f"`{opt.env}`" in row
        if opt.default:
            assert f"`{opt.default}`" in row, f"default of {opt.flag} not documented"


def run_exporter(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def test_malformed_scenario_fails_at_start_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "gpus:\n  - {index: 0, uuid: GPU-a, model: M, memory_total: 1Gi,\n"
        "     processes: [{pid: -4, phases: [{from: 0, utilization: 0}]}]}\n"
    )
    result = run_exporter("--source", "mock", "--scenario", str(bad), "--port", str(free_port()))
    assert result.returncode == 2
    assert "gpus[0].processes[0].pid" in result.stderr


GPU = "gpus:\n  - {index: 0, uuid: GPU-a, model: M, memory_total: 80Gi"
PROC = ", processes: [{pid: 7, phases: [%s]}]}\n"


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (GPU.replace("uuid: GPU-a, ", "") + "}\n", "gpus[0].uuid"),
        (GPU.replace("0,", "zero,") + "}\n", "gpus[0].index"),
        (GPU + PROC % "{from: 0, utilization: 1.5}", "gpus[0].processes[0].phases[0].utilization"),
        (GPU + PROC % "{from: 9, utilization: 0.1}, {from: 3, utilization: 0}", "phases[1].from"),
        (GPU + ", colour: red}\n", "gpus[0].colour"),
        (GPU + "}\n" + GPU.removeprefix("gpus:\n").replace("0,", "1,") + "}\n", "gpus[1].uuid"),
        (GPU.replace("80Gi", "80GiB") + "}\n", "gpus[0].memory_total"),
        ("gpus: [ {index: 0,\n  - x: :\n", "not valid YAML"),
        (None, "cannot read"),
    ],
)
def test_bad_scenarios_fail_at_start_without_traceback(
    tmp_path: Path, content: str | None, named: str
) -> None:
    path = tmp_path / "scenario.yaml"
    if content is not None:
        path.write_text(content)
    result = run_exporter("--source", "mock", "--scenario", str(path), "--port", str(free_port()))
    assert result.returncode != 0
    assert named in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_malformed_flag_fails_at_start() -> None:
    result = run_exporter("--source", "mock", "--interval", "-3")
    assert result.returncode == 2
    assert "--interval" in result.stderr


def test_nvml_failure_fails_at_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert run(Config(source="nvml", port=free_port()), threading.Event()) == 1
    assert "NVML initialisation failed" in capsys.readouterr().err


class FakeNvmlSource:
    name = "nvml"

    def collect(self) -> list[Any]:
        return []

    def close(self) -> None:
        pass


def test_nvml_source_builds_the_kubelet_attributor(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class Recorder:
        def __init__(self, node: str, **kwargs: Any) -> None:
            seen.update(kwargs, node=node)

    monkeypatch.setattr(exporter.sources.nvml, "NvmlSource", FakeNvmlSource)
    monkeypatch.setattr(exporter.attribution.kubelet, "KubeletAttributor", Recorder)
    config = Config(
        node_name="gpu-7",
        proc_root="/host/proc",
        podresources_socket="/s.sock",
        kube_api=False,
        attribution_refresh=12.0,
    )
    _, attributor, node = build_source(config)
    assert isinstance(attributor, Recorder) and node == "gpu-7"
    assert seen == {
        "node": "gpu-7",
        "proc_root": "/host/proc",
        "podresources_socket": "/s.sock",
        "use_kube_api": False,
        "refresh_seconds": 12.0,
    }


def test_attributor_failure_degrades_instead_of_crashing(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("no kubeconfig")

    monkeypatch.setattr(exporter.sources.nvml, "NvmlSource", FakeNvmlSource)
    monkeypatch.setattr(exporter.attribution.kubelet, "KubeletAttributor", broken)
    _, attributor, _ = build_source(Config(node_name="n"))
    assert isinstance(attributor, DegradedAttributor)
    assert attributor.status() == {"proc": False, "podresources": False, "kubernetes_api": False}


def test_mock_without_scenario_plays_the_demo() -> None:
    source, _, node = build_source(Config(source="mock"))
    assert isinstance(source, MockSource) and node == "demo-gpu-node-1"
    assert build_source(Config(source="mock", node_name="other"))[2] == "other"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def served() -> Iterator[str]:
    port = free_port()
    stop = threading.Event()
    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(
            run(
                Config(source="mock", port=port, listen_address="127.0.0.1", interval=0.2, compat=("dcgm",)),
                stop,
            )
        )
    )
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/healthz")
        yield url
    finally:
        stop.set()
        thread.join(timeout=30)
    assert result == [0]


def test_serves_metrics_healthz_and_404(served: str) -> None:
    deadline = time.monotonic() + 30
    body = ""
    while "gpu_steward_container_gpu_utilization_ratio{" not in body and time.monotonic() < deadline:
        _, body = get(f"{served}/metrics")
        time.sleep(0.1)
    assert 'pod="notebook-idle"' in body
    assert "DCGM_FI_DEV_GPU_UTIL{" in body
    assert 'gpu_steward_exporter_build_info{node="demo-gpu-node-1",source="mock",version=' in body
    assert get(f"{served}/healthz") == (200, "ok\n")
    assert get(f"{served}/nothing-here")[0] == 404


def test_port_in_use_fails_at_start(served: str, capsys: pytest.CaptureFixture[str]) -> None:
    port = int(served.rsplit(":", 1)[1])
    assert run(Config(source="mock", port=port, listen_address="127.0.0.1"), threading.Event()) == 1
    assert "cannot listen" in capsys.readouterr().err


def test_sigterm_stops_cleanly() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "--source",
            "mock",
            "--port",
            str(port),
            "--listen-address",
            "127.0.0.1",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_daemonset_configures_the_cli_it_runs() -> None:
    """The manifest's args and env parse with the real config, and match the contract (port, NODE_NAME)."""
    import yaml

    ds = yaml.safe_load((ROOT / "deploy" / "exporter" / "daemonset.yaml").read_text())
    pod_spec = ds["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    assert container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    env["NODE_NAME"] = "node-from-downward-api"
    config = parse_config(container["args"], env)
    assert (config.source, config.port, config.node_name) == ("nvml", 31995, "node-from-downward-api")
    assert container["ports"][0]["containerPort"] == config.port
    assert pod_spec["hostPID"] is True
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert config.proc_root in mounts
    assert config.podresources_socket.rsplit("/", 1)[0] in mounts
