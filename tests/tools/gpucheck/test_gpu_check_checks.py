"""gpu-check's verdicts, each with passing and failing inputs; its nvidia-smi and scrape parsers.

Scrape-based checks read the exporter's real exposition, built in this process the way gpu-check starts
the exporter, over the exporter's NVML fakes, and parsed by gpu-check's own parser.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace

import pynvml
import pytest

from exporter.sources.nvml import NvmlSource
from steward_common import metrics as m
from steward_common import series
from steward_common.series import IDLE_THRESHOLD
from tests.tools.gpucheck.gpucheck_fakes import FakeGpu, FullNvml, GiB, exporter_scrape
from tools.gpucheck import checks, survey
from tools.gpucheck.checks import Child, GpuFacts, Series, Trace
from tools.gpucheck.run import Check, facts, parse_compute_apps, parse_query_gpu, parse_scrape

MIB = checks.MIB
UUID = "GPU-11111111-2222-3333-4444-555555555555"
DRIVER = "550.54.15"  # FakeNvml's
BUS = "00000000:3B:00.0"  # FakeGpu's


def statuses(verdicts: Sequence[checks.Verdict]) -> list[str]:
    return [v.status for v in verdicts]


@pytest.fixture
def pids() -> Iterator[list[int]]:
    """Three real processes outside Kubernetes (the exporter attributes them as host processes)."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(3)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


def h200(pids: Sequence[int] = (), **kw: object) -> FakeGpu:
    gpu = FakeGpu(UUID, name=b"NVIDIA H200", **kw)  # type: ignore[arg-type]
    gpu.memory = (40 * GiB, 141 * GiB)
    gpu.util = (97, 20)
    gpu.compute = [(pid, (i + 2) * GiB) for i, pid in enumerate(pids)]
    return gpu


def scrape_of(fake: FullNvml) -> list[Series]:
    loop, exposition = exporter_scrape()
    assert loop.collect_once() is not None
    return parse_scrape(exposition.body().decode())


def nvml_facts() -> list[GpuFacts]:
    return [facts(survey.survey_gpu(i)) for i in range(int(pynvml.nvmlDeviceGetCount()))]


def smi_gpu_line(gpu: GpuFacts, mib: int | None = None, bus: str | None = None, driver: str = DRIVER) -> str:
    total = (gpu.memory_total_bytes or 0) // MIB if mib is None else mib
    return f"{gpu.index}, {gpu.uuid}, {gpu.model}, {total}, {bus or gpu.pci_bus_id}, {driver}, 74.51\n"


# --- parsers ---


def test_parse_scrape_reads_the_exporters_exposition(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = h200()
    gpu.name = b'NVIDIA "H200" \\ NVL'  # escaped in the exposition, plain again once parsed
    fake = FullNvml(monkeypatch, [gpu])
    series = scrape_of(fake)
    (info,) = checks.select(series, m.GPU_INFO.sample_name, uuid=UUID)
    assert info.labels["model"] == 'NVIDIA "H200" \\ NVL' and info.labels["pci_bus_id"] == BUS
    assert info.labels["driver_version"] == DRIVER and info.value == 1
    (energy,) = checks.select(series, m.GPU_ENERGY.sample_name, uuid=UUID)  # a counter's _total sample
    assert energy.value == pytest.approx(9000.5)
    (total,) = checks.select(series, m.GPU_MEMORY_TOTAL.sample_name, uuid=UUID)
    assert total.value == 141 * GiB
    assert any(s.name.startswith("DCGM_FI_") for s in series)


def test_parse_compute_apps() -> None:
    text = (
        "pid, used_gpu_memory [MiB]\n"
        "4242, 15872 MiB\n"
        "4243, 2 GiB\n"
        "4244, 512 KiB\n"
        "4245, [N/A]\n"
        "4246, [Insufficient Permissions]\n"
        "not-a-pid, 12 MiB\n"
        "4247, 7 TiB\n"
        "4242, 100 MiB\n"  # the same PID on a second GPU: its memory summed
        "4248\n"
    )
    assert parse_compute_apps(text) == {4242: 15972 * MIB, 4243: 2 * GiB, 4244: 512 * 1024}
    assert parse_compute_apps("pid, used_gpu_memory [MiB]\n") == {}
    assert parse_compute_apps("") == {}
    assert parse_compute_apps("12, 1 MiB\n") == {}  # the first line is the header, never a row


def test_parse_query_gpu() -> None:
    text = (
        "0, GPU-aaa, NVIDIA H200, 143771, 00000000:18:00.0, 570.124.06, 74.51\n"
        "1, GPU-bbb, NVIDIA H200, [N/A], 00000000:2A:00.0, 570.124.06, [Not Supported]\n"
        "garbage line\n"
    )
    gpus, driver = parse_query_gpu(text)
    assert driver == "570.124.06"
    assert gpus == [
        GpuFacts(0, "GPU-aaa", "NVIDIA H200", 143771 * MIB, 74.51, "00000000:18:00.0"),
        GpuFacts(1, "GPU-bbb", "NVIDIA H200", None, None, "00000000:2A:00.0"),
    ]
    assert parse_query_gpu("") == ([], None)


# --- every GPU listed ---


def test_every_gpu_listed_with_identity_memory_and_power(monkeypatch: pytest.MonkeyPatch) -> None:
    second = h200()
    second.uuid, second.bus_id = "GPU-second", "00000000:4C:00.0"
    fake = FullNvml(monkeypatch, [h200(), second])
    nvml, scrape = nvml_facts(), scrape_of(fake)
    assert statuses(checks.gpus_listed(nvml, scrape, None)) == ["PASS", "PASS", "PASS"]
    smi, _ = parse_query_gpu("".join(smi_gpu_line(g) for g in nvml))
    verdicts = checks.gpus_listed(nvml, scrape, smi)
    assert statuses(verdicts) == ["PASS"] * 4
    assert "141" in verdicts[2].measured or "151397597184" in verdicts[2].measured


def test_gpus_listed_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FullNvml(monkeypatch, [h200()])
    nvml, scrape = nvml_facts(), scrape_of(fake)
    (gpu,) = nvml
    no_info = [s for s in scrape if s.name != m.GPU_INFO.sample_name]
    assert statuses(checks.gpus_listed(nvml, no_info, None)) == ["FAIL", "FAIL"]
    assert statuses(checks.gpus_listed([], scrape, None)) == ["FAIL"]  # NVML saw no GPU: nothing proven
    assert statuses(checks.gpus_listed([replace(gpu, model="NVIDIA H100")], scrape, None)) == ["PASS", "FAIL"]
    other_total = replace(gpu, memory_total_bytes=gpu.memory_total_bytes + MIB)  # type: ignore[operator]
    assert statuses(checks.gpus_listed([other_total], scrape, None)) == ["PASS", "FAIL"]
    no_power = [s for s in scrape if s.name != m.GPU_POWER.sample_name]
    assert statuses(checks.gpus_listed(nvml, no_power, None)) == ["PASS", "FAIL"]
    zero_power = [replace(s, value=0.0) if s.name == m.GPU_POWER.sample_name else s for s in scrape]
    assert statuses(checks.gpus_listed(nvml, zero_power, None)) == ["PASS", "FAIL"]
    # nvidia-smi: another memory total, another GPU list
    smi, _ = parse_query_gpu(smi_gpu_line(gpu, mib=(gpu.memory_total_bytes or 0) // MIB - 2))
    assert statuses(checks.gpus_listed(nvml, scrape, smi)) == ["PASS", "PASS", "FAIL"]
    smi, _ = parse_query_gpu(smi_gpu_line(gpu) + smi_gpu_line(replace(gpu, index=1, uuid="GPU-extra")))
    assert statuses(checks.gpus_listed(nvml, scrape, smi)) == ["PASS", "FAIL", "PASS"]


# --- per-process memory ---


def kids(sizes: Sequence[int] = (10 * GiB, 12 * GiB, 14 * GiB)) -> list[Child]:
    return [
        Child(role, 100 + i, size)
        for i, (role, size) in enumerate(zip(("busy", "duty", "memory"), sizes, strict=True))
    ]


def test_children_matched_by_pid_else_by_memory() -> None:
    children = kids()
    traces = {
        100: Trace(100, [10 * GiB]),
        # another PID namespace: NVML's PIDs are not the children's; each is found by its size
        7001: Trace(7001, [int(14.1 * GiB)]),
        7002: Trace(7002, [int(12.2 * GiB)]),
        7003: Trace(7003, [int(12.1 * GiB)]),
    }
    matches = checks.match_children(children, traces)
    assert [(mt.by, mt.trace.pid if mt.trace else None) for mt in matches] == [
        ("pid", 100),
        ("memory", 7003),  # the nearest of two within 5 %
        ("memory", 7001),
    ]
    assert [mt.by for mt in checks.match_children(children, {9: Trace(9, [GiB])})] == ["none"] * 3


def test_child_memory_within_5_percent_of_its_allocation_and_of_nvidia_smi() -> None:
    children = kids()
    used = {100: int(10 * GiB * 1.05), 101: 12 * GiB + 300 * MIB, 102: 14 * GiB}
    traces = {pid: Trace(pid, [None, v, v]) for pid, v in used.items()}
    matches = checks.match_children(children, traces)
    smi = parse_compute_apps(
        "pid, used_gpu_memory [MiB]\n" + "".join(f"{p}, {v // MIB} MiB\n" for p, v in used.items())
    )
    verdicts = checks.child_memory(matches, smi)
    assert statuses(verdicts) == ["PASS"] * 9
    assert statuses(checks.child_memory(matches, None)) == ["PASS", "PASS", "SKIP"] * 3


def test_child_memory_fails() -> None:
    children = kids()
    traces = {
        100: Trace(100, [int(10 * GiB * 1.06)]),  # 6 % over its allocation
        101: Trace(101, [12 * GiB]),
        102: Trace(102, [None]),  # never known
    }
    smi = {100: int(10 * GiB * 1.06), 101: int(12 * GiB * 0.9)}  # nvidia-smi: 10 % less for the duty child
    verdicts = checks.child_memory(checks.match_children(children, traces), smi)
    assert statuses(verdicts) == ["PASS", "FAIL", "PASS", "PASS", "PASS", "FAIL", "PASS", "FAIL", "FAIL"]
    missing = checks.child_memory(checks.match_children(children[:1], {100: Trace(100, [10 * GiB])}), {})
    assert statuses(missing) == ["PASS", "PASS", "FAIL"]  # not in nvidia-smi's list
    # matched by memory: not listed by its PID (FAIL), its memory compared under NVML's PID
    by_memory = checks.match_children(children[:1], {7: Trace(7, [10 * GiB])})
    assert statuses(checks.child_memory(by_memory, {7: 10 * GiB})) == ["FAIL", "PASS", "PASS"]


def test_memory_read_through_the_nvml_source(monkeypatch: pytest.MonkeyPatch, pids: list[int]) -> None:
    fake = FullNvml(monkeypatch, [h200(pids)])
    check = Check.__new__(Check)
    check.traces = {}
    source = NvmlSource()
    for _ in range(3):
        for sample in source.collect():
            check._trace(sample)
    children = [
        Child(r, pid, (i + 2) * GiB)
        for i, (r, pid) in enumerate(zip(("busy", "duty", "memory"), pids, strict=True))
    ]
    smi = {pid: mem for pid, mem in fake.gpus[0].compute if mem is not None}
    verdicts = checks.child_memory(checks.match_children(children, check.traces), smi)
    assert statuses(verdicts) == ["PASS"] * 9


# --- per-process utilization ---


def util_matches(
    busy: list[float | None], duty: list[float | None], memory: list[float | None]
) -> list[checks.Match]:
    traces = {100 + i: Trace(100 + i, [GiB] * len(u), u) for i, u in enumerate((busy, duty, memory))}
    return checks.match_children(kids((GiB, GiB, GiB)), traces)


def test_utilization_order_busy_over_duty_over_memory_only() -> None:
    verdicts = checks.utilization_order(util_matches([None, 0.99, 1.0], [0.28, 0.32], [0.0, None, 0.0]))
    assert statuses(verdicts) == ["PASS", "PASS"]
    assert verdicts[0].measured == "busy 0.99, duty 0.30, memory 0.00"


@pytest.mark.parametrize(
    ("busy", "duty", "memory"),
    [
        ([0.3], [0.9], [0.0]),  # busy below duty
        ([0.9], [0.0], [0.0]),  # duty no busier than memory-only
        ([0.9], [0.9], [0.0]),  # busy no busier than duty
        ([None], [0.3], [0.0]),  # busy never known
        ([1.0], [0.3], [None]),  # memory-only never known
    ],
)
def test_utilization_order_fails(
    busy: list[float | None], duty: list[float | None], memory: list[float | None]
) -> None:
    assert checks.utilization_order(util_matches(busy, duty, memory))[0].status == "FAIL"


def test_memory_only_idle_by_the_recording_rules_threshold() -> None:
    assert inspect.signature(checks.utilization_order).parameters["threshold"].default == IDLE_THRESHOLD
    assert (
        vars(checks)["IDLE_THRESHOLD"] is series.IDLE_THRESHOLD
    )  # its one home (the rules are tested against it)
    at = checks.utilization_order(util_matches([1.0], [0.3], [0.0, IDLE_THRESHOLD]))  # the rules' `<= bool`
    assert statuses(at) == ["PASS", "PASS"]
    above = checks.utilization_order(util_matches([1.0], [0.3], [0.0, 0.0, IDLE_THRESHOLD + 0.001]))
    assert statuses(above) == ["PASS", "FAIL"]  # idle on average, not at its peak
    assert "steward_common" in above[1].expected


def test_no_per_process_utilization_is_a_skip_claiming_nothing() -> None:
    (verdict,) = checks.utilization_order(util_matches([None], [None], [None]))
    assert verdict.status == "SKIP"


def test_utilization_read_through_the_nvml_source(monkeypatch: pytest.MonkeyPatch, pids: list[int]) -> None:
    fake = FullNvml(monkeypatch, [h200(pids)])
    busy, duty, memory = pids
    fake.live_util = {busy: 99, duty: 30}  # the memory-only child has no sample: NVML's idle
    check = Check.__new__(Check)
    check.traces = {}
    source = NvmlSource()
    for _ in range(4):
        for sample in source.collect():
            check._trace(sample)
    children = [Child(r, pid, GiB) for r, pid in zip(("busy", "duty", "memory"), pids, strict=True)]
    verdicts = checks.utilization_order(checks.match_children(children, check.traces))
    assert statuses(verdicts) == ["PASS", "PASS"]
    fake.live_util = {busy: 99, duty: 30, memory: 6}  # 0.06 > the threshold
    for sample in source.collect():
        check._trace(sample)
    assert statuses(checks.utilization_order(checks.match_children(children, check.traces))) == [
        "PASS",
        "FAIL",
    ]


# --- device utilization ---


def test_device_utilization_above_0_9(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FullNvml(monkeypatch, [h200()])
    scrapes = [scrape_of(fake) for _ in range(3)]
    verdict = checks.device_utilization(UUID, scrapes)
    assert verdict.status == "PASS" and "0.970" in verdict.measured
    fake.gpus[0].util = (90, 20)
    assert checks.device_utilization(UUID, [scrape_of(fake)]).status == "FAIL"  # above, not at
    assert checks.device_utilization("GPU-other", scrapes).status == "FAIL"  # no series
    assert checks.device_utilization(UUID, []).status == "FAIL"


def test_device_utilization_is_the_median_over_the_scrapes() -> None:
    def scrape(value: float) -> list[Series]:
        return [Series(m.GPU_UTILIZATION.sample_name, {"uuid": UUID}, value)]

    assert checks.device_utilization(UUID, [scrape(v) for v in (0.2, 0.95, 0.99)]).status == "PASS"
    assert checks.device_utilization(UUID, [scrape(v) for v in (0.2, 0.3, 0.99)]).status == "FAIL"


# --- NOT_SUPPORTED fields ---


def test_not_supported_fields_reported_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = h200(memory_temp=None)
    gpu.errors = {
        "nvmlDeviceGetTotalEnergyConsumption": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetEncoderUtilization": pynvml.NVML_ERROR_NOT_SUPPORTED,
    }
    fake = FullNvml(monkeypatch, [gpu])
    s = survey.survey_gpu(0)
    scrape = scrape_of(fake)
    verdict = checks.not_supported(UUID, s.keys("not_supported"), s.to_json()["errors"], scrape)
    assert verdict.status == "PASS"
    assert "energy_mj" in verdict.measured and "collection_success 1.0" in verdict.measured


def test_not_supported_counted_as_a_read_error_fails() -> None:
    labels = {"uuid": UUID, "field": "energy", "error": "NotSupported"}
    scrape = [
        Series(m.GPU_READ_ERRORS.sample_name, labels, 3.0),
        Series(m.GPU_COLLECTION_SUCCESS.sample_name, {"uuid": UUID}, 1.0),
    ]
    verdict = checks.not_supported(UUID, ["energy_mj"], {}, scrape)
    assert verdict.status == "FAIL" and "['energy']" in verdict.measured


def test_a_failed_collection_passes_only_when_nvml_itself_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = h200()
    gpu.errors = {"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NO_PERMISSION}
    fake = FullNvml(monkeypatch, [gpu])
    s = survey.survey_gpu(0)
    scrape = scrape_of(fake)
    assert checks.select(scrape, m.GPU_COLLECTION_SUCCESS.sample_name, uuid=UUID)[0].value == 0
    errors = s.to_json()["errors"]
    assert errors == {"power_mw": "NoPermission"}
    verdict = checks.not_supported(UUID, [], errors, scrape)
    assert verdict.status == "PASS" and "power=NoPermission" in verdict.measured
    assert checks.not_supported(UUID, [], {}, scrape).status == "FAIL"  # unexplained: NVML read fine
    assert checks.not_supported("GPU-other", [], {}, scrape).status == "FAIL"  # no collection_success


# --- dcgm compat labels ---


def test_dcgm_series_carry_pci_bus_id_and_driver_version(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FullNvml(monkeypatch, [h200()])
    nvml, scrape = nvml_facts(), scrape_of(fake)
    (gpu,) = nvml
    assert statuses(checks.dcgm_labels(nvml, DRIVER, scrape)) == ["PASS"]
    smi, smi_driver = parse_query_gpu(smi_gpu_line(gpu, bus=BUS.lower()))  # case is no difference
    assert statuses(checks.dcgm_labels(nvml, DRIVER, scrape, smi, smi_driver)) == ["PASS"]


def test_dcgm_labels_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FullNvml(monkeypatch, [h200()])
    nvml, scrape = nvml_facts(), scrape_of(fake)
    (gpu,) = nvml
    assert statuses(checks.dcgm_labels(nvml, "535.0", scrape)) == ["FAIL"]
    assert statuses(checks.dcgm_labels(nvml, None, scrape)) == ["FAIL"]
    assert statuses(checks.dcgm_labels([replace(gpu, pci_bus_id="00000000:99:00.0")], DRIVER, scrape)) == [
        "FAIL"
    ]
    assert statuses(checks.dcgm_labels([replace(gpu, pci_bus_id=None)], DRIVER, scrape)) == ["FAIL"]
    no_dcgm = [s for s in scrape if not s.name.startswith("DCGM_FI_")]
    assert statuses(checks.dcgm_labels(nvml, DRIVER, no_dcgm)) == ["FAIL"]
    one_without = [s for s in scrape if s.name.startswith("DCGM_FI_")]
    one_without[0] = replace(one_without[0], labels={**one_without[0].labels, "pci_bus_id": ""})
    assert statuses(checks.dcgm_labels(nvml, DRIVER, one_without)) == ["FAIL"]  # every series, not some
    smi, smi_driver = parse_query_gpu(smi_gpu_line(gpu, bus="00000000:99:00.0"))
    assert statuses(checks.dcgm_labels(nvml, DRIVER, scrape, smi, smi_driver)) == ["FAIL"]
    smi, smi_driver = parse_query_gpu(smi_gpu_line(gpu, driver="560.1"))
    assert statuses(checks.dcgm_labels(nvml, DRIVER, scrape, smi, smi_driver)) == ["FAIL"]


# --- host processes, children, time ---


def test_children_are_unattributed_host_processes(monkeypatch: pytest.MonkeyPatch, pids: list[int]) -> None:
    fake = FullNvml(monkeypatch, [h200(pids)])
    scrape = scrape_of(fake)
    assert checks.host_processes(UUID, 3, scrape).status == "PASS"
    assert checks.host_processes(UUID, 4, scrape).status == "FAIL"
    assert checks.host_processes("GPU-other", 1, scrape).status == "FAIL"


def test_children_started() -> None:
    ready: list[dict[str, object]] = [
        {"role": "busy", "uuid": UUID, "probe_spin_ns": 1_000_400, "probe_requested_ns": 1_000_000},
        {"role": "duty", "uuid": UUID, "probe_spin_ns": 999_999, "probe_requested_ns": 1_000_000},
        {"role": "memory", "uuid": "GPU-other"},
        {"role": "busy", "error": "cuInit: CUDA_ERROR_NO_DEVICE (100)"},
    ]
    verdicts = checks.children_started(ready, UUID)
    assert [(v.check, v.status) for v in verdicts] == [
        ("busy child runs on the checked GPU", "PASS"),
        ("busy child's PTX kernel ran", "PASS"),
        ("duty child runs on the checked GPU", "PASS"),
        ("duty child's PTX kernel ran", "FAIL"),
        ("memory child runs on the checked GPU", "FAIL"),
        ("busy child started", "FAIL"),
    ]
    assert "CUDA_ERROR_NO_DEVICE" in verdicts[-1].measured


def test_elapsed_and_summary() -> None:
    assert checks.elapsed(179.0, 180.0).status == "PASS"
    assert checks.elapsed(180.0, 180.0).status == "FAIL"
    verdicts = [checks.elapsed(1, 2), checks.elapsed(3, 2), checks.Verdict("x", "SKIP", "", "")]
    assert checks.summary(verdicts) == {"PASS": 1, "FAIL": 1, "SKIP": 1}
    assert checks.Verdict("c", "FAIL", "1 s", "< 2 s").line() == "FAIL  c: measured 1 s; expected < 2 s"
