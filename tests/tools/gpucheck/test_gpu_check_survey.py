"""gpu-check's survey against the exporter's NVML fakes, and its report writer."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pynvml
import pytest

from exporter.sources.mock import MockSource
from exporter.sources.scenario import load_scenario
from exporter.sources.scenario_model import MOCK_FIELDS
from tests.tools.gpucheck.gpucheck_fakes import FakeGpu, FullNvml, GiB
from tools.gpucheck import checks, report, survey
from tools.gpucheck.run import Check

NS = pynvml.NVML_ERROR_NOT_SUPPORTED


def h200(**kw: object) -> FakeGpu:
    gpu = FakeGpu("GPU-11111111-2222-3333-4444-555555555555", name=b"NVIDIA H200", **kw)  # type: ignore[arg-type]
    gpu.memory = (2 * GiB, 141 * GiB)
    return gpu


def test_every_scenario_field_has_a_probe_and_every_probe_field_is_a_scenario_field() -> None:
    fields = {p.field for p in survey.PROBES if p.field is not None}
    assert fields == set(MOCK_FIELDS)
    keys = [p.key for p in survey.PROBES]
    assert len(keys) == len(set(keys)), "two probes share a key"


def test_a_gpu_that_answers_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    FullNvml(monkeypatch, [h200(compute=[(4242, 3 * GiB)], samples=[(4242, 10, 80)])])
    s = survey.survey_gpu(0)
    not_values = {k: o for k, o in s.outcomes.items() if o.kind != "value"}
    assert not_values == {}
    assert set(s.outcomes) == {p.key for p in survey.PROBES}
    assert s.value("name") == "NVIDIA H200" and s.value("uuid") == "GPU-11111111-2222-3333-4444-555555555555"
    assert s.pci_bus_id() == "00000000:3B:00.0"  # bytes from NVML, text in the report
    assert s.memory_total_bytes() == 141 * GiB
    assert s.power_watts() == pytest.approx(312.5)
    assert s.value("compute_processes") == [{"pid": 4242, "usedGpuMemory": 3 * GiB}]
    assert s.value("process_utilization")[0]["smUtil"] == 80
    assert s.value("memory_temperature_celsius") == 70
    assert not s.mig_enabled()
    assert s.unsupported_fields() == []
    doc = s.to_json()
    json.dumps(doc)  # JSON as it is: no repr fallbacks needed
    assert doc["not_supported"] == [] and doc["errors"] == {} and doc["no_data"] == {}
    assert doc["fields"]["pci_info"] == {"busId": "00000000:3B:00.0"}


def test_not_supported_reads_are_reported_as_such_not_as_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = h200(memory_temp=None)  # per-field NOT_SUPPORTED inside nvmlDeviceGetFieldValues
    gpu.errors = {
        "nvmlDeviceGetTemperature": NS,
        "nvmlDeviceGetTotalEnergyConsumption": NS,
        "nvmlDeviceGetTotalEccErrors": NS,
        "nvmlDeviceGetRemappedRows": NS,
        "nvmlDeviceGetEncoderUtilization": NS,
        "nvmlDeviceGetMemoryInfo_v2": NS,  # v1 answers: memory is supported (the exporter falls back)
    }
    FullNvml(monkeypatch, [gpu])
    s = survey.survey_gpu(0)
    doc = s.to_json()
    assert doc["errors"] == {}
    assert set(doc["not_supported"]) == {
        "temperature_celsius",
        "energy_mj",
        "ecc_corrected_volatile",
        "ecc_corrected_aggregate",
        "ecc_uncorrected_volatile",
        "ecc_uncorrected_aggregate",
        "remapped_rows",
        "encoder_utilization",
        "memory_v2",
        "memory_temperature_celsius",
    }
    assert all(s.outcomes[k].error == "NotSupported" for k in doc["not_supported"])
    assert doc["scenario_unsupported"] == sorted(
        ["temperature", "energy", "ecc", "remapped_rows", "encoder", "memory_temperature"]
    )
    assert s.memory_total_bytes() == 141 * GiB  # from v1
    for key in doc["not_supported"]:
        assert key not in doc["fields"]


def test_other_errors_and_no_data_are_kept_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = h200()  # no processes: process utilization answers NOT_FOUND
    gpu.errors = {"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NO_PERMISSION}
    FullNvml(monkeypatch, [gpu])
    monkeypatch.delattr(pynvml, "nvmlDeviceGetSerial")  # an older binding
    s = survey.survey_gpu(0)
    doc = s.to_json()
    assert doc["no_data"] == {"process_utilization": "NotFound"}
    assert doc["errors"]["power_mw"] == "NoPermission"
    assert doc["errors"]["serial"].startswith("AttributeError")
    assert set(doc["errors"]) == {"power_mw", "serial"}
    assert doc["not_supported"] == []
    # an error is not "unsupported": a scenario built from it keeps the field
    assert "power" not in s.unsupported_fields() and "process_utilization" not in s.unsupported_fields()
    assert s.power_watts() is None


def test_a_field_is_unsupported_only_when_all_its_reads_are(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = h200()
    gpu.errors = {"nvmlDeviceGetPcieReplayCounter": NS}  # pcie: throughput reads still answer
    FullNvml(monkeypatch, [gpu])
    assert "pcie" not in survey.survey_gpu(0).unsupported_fields()
    gpu.errors["nvmlDeviceGetPcieThroughput"] = NS
    assert "pcie" in survey.survey_gpu(0).unsupported_fields()


def test_nvlink_throughput_is_read_per_link(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FullNvml(monkeypatch, [h200(nvlink_links=2, nvlink_kib=(100, 50))])
    s = survey.survey_gpu(0)
    assert s.value("nvlink_link_count") == 2
    assert s.value("nvlink_throughput") == [
        {"link": 0, "tx_kib": 100, "rx_kib": 50},
        {"link": 1, "tx_kib": 200, "rx_kib": 100},
    ]
    asked = {
        scope
        for call in fake.field_calls
        for field_id, scope in call
        if field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    }
    assert asked == {0, 1}


def test_mig_mode_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    FullNvml(monkeypatch, [h200(mig=[FakeGpu("MIG-aaa")])])
    assert survey.survey_gpu(0).mig_enabled()


def test_plain_turns_pynvml_structures_into_json() -> None:
    memory = pynvml.c_nvmlMemory_t()
    memory.total, memory.free, memory.used = 8, 5, 3
    assert survey.plain(memory) == {"total": 8, "free": 5, "used": 3}
    assert survey.plain([b"abc", (1, 2.5), None, True]) == ["abc", [1, 2.5], None, True]
    assert survey.plain((ctypes.c_int * 3)(1, 2, 3)) == [1, 2, 3]


def test_system_versions_and_a_failing_one(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FullNvml(monkeypatch, [h200(), h200()])
    fake.gpus[1].uuid = "GPU-second"
    versions = survey.system()
    assert versions["driver_version"] == "550.54.15"
    assert versions["cuda_driver_version"] == 12040 and survey.cuda_version_text(12040) == "12.4"
    assert versions["nvml_version"] == "12.550.54.15" and versions["gpu_count"] == 2
    monkeypatch.setattr(
        pynvml, "nvmlSystemGetNVMLVersion", lambda: (_ for _ in ()).throw(pynvml.NVMLError(NS))
    )
    assert survey.system()["nvml_version"] == {"error": "NotSupported"}


def test_the_scenario_it_writes_loads_as_a_mock_scenario(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gpu = h200(memory_temp=None, nvlink_links=18)
    gpu.errors = {"nvmlDeviceGetEncoderUtilization": NS, "nvmlDeviceGetDecoderUtilization": NS}
    FullNvml(monkeypatch, [gpu])
    idle = survey.survey_gpu(0)
    data = survey.scenario([idle], [survey.survey_gpu(0)], survey.system())
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data))
    loaded = load_scenario(path)
    assert loaded.driver_version == "550.54.15" and loaded.cuda_version == "12.4"
    (spec,) = loaded.gpus
    assert (spec.uuid, spec.model, spec.memory_total_bytes) == (gpu.uuid, "NVIDIA H200", 141 * GiB)
    assert spec.pci_bus_id == "00000000:3B:00.0"
    assert (spec.idle_power_watts, spec.max_power_watts, spec.idle_temperature_celsius) == (
        312.5,
        700.0,
        61.0,
    )
    assert spec.unsupported == {"encoder", "decoder", "memory_temperature"}
    assert data["gpus"][0]["health"] == {"nvlink": True}
    (sample,) = MockSource(loaded).collect()
    assert sample.encoder_utilization is None and sample.memory_temperature_celsius is None
    assert sample.power_watts is not None


# --- the report ---


def test_report_writes_every_field_and_every_not_supported_field(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gpu = h200()
    gpu.errors = {
        "nvmlDeviceGetTotalEnergyConsumption": NS,
        "nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_UNKNOWN,
    }
    FullNvml(monkeypatch, [gpu])
    s = survey.survey_gpu(0)
    verdicts = [checks.Verdict("a", "PASS", "1", "1"), checks.Verdict("b", "FAIL", "2", "3")]
    out = tmp_path / "deep" / "out"
    data = {"gpus": [s.to_json()], "scenario": survey.scenario([s], [], survey.system())}
    written = report.write(out, data, verdicts)
    assert written == out / report.REPORT
    doc = json.loads(written.read_text())
    (g,) = doc["gpus"]
    assert g["not_supported"] == ["energy_mj"] and g["errors"] == {"power_mw": "Unknown"}
    accounted = set(g["fields"]) | set(g["not_supported"]) | set(g["no_data"]) | set(g["errors"])
    assert accounted == {p.key for p in survey.PROBES}
    for key, o in s.outcomes.items():
        if o.kind == "value":
            assert g["fields"][key] == o.value
    assert (out / report.LINES).read_text().splitlines() == [v.line() for v in verdicts]
    assert json.loads((out / report.SCENARIO).read_text()) == data["scenario"]
    assert sorted(p.name for p in out.iterdir()) == sorted([report.REPORT, report.LINES, report.SCENARIO])


def test_report_without_a_scenario_writes_no_scenario_file(tmp_path: Path) -> None:
    report.write(tmp_path, {"error": "x", "odd": {1, 2}}, [])
    assert not (tmp_path / report.SCENARIO).exists()
    assert json.loads((tmp_path / report.REPORT).read_text())["error"] == "x"
    assert (tmp_path / report.LINES).read_text() == ""


def test_finish_prints_the_verdicts_and_writes_them_with_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse
    import time

    from tools.gpucheck.children import Children

    check = Check(argparse.Namespace(out=tmp_path, duration=10.0), Children(), time.monotonic())
    check.verdicts = [checks.Verdict("fine", "PASS", "1", "1"), checks.Verdict("none", "SKIP", "-", "-")]
    assert check.finish(None) == 0
    printed = capsys.readouterr().out
    assert "PASS  fine: measured 1; expected 1" in printed and "2 passed, 0 failed, 1 skipped" in printed
    doc = json.loads((tmp_path / report.REPORT).read_text())
    assert doc["summary"] == {"PASS": 2, "FAIL": 0, "SKIP": 1} and doc["error"] is None
    assert [c["check"] for c in doc["checks"]] == ["fine", "none", "check finished in time"]
    check.verdicts = []
    assert check.finish("Traceback ...\nRuntimeError: boom\n") == 1
    doc = json.loads((tmp_path / report.REPORT).read_text())
    assert doc["checks"][-1] == {
        "check": "check ran to the end",
        "status": "FAIL",
        "measured": "RuntimeError: boom",
        "expected": "no error",
    }
