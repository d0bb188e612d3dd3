"""steward_common/metrics.py is the one home of the exporter's metric names: the docs, the served samples and
the dcgm map must agree with it, and no other exporter module may spell a metric name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter import dcgm_compat, families
from exporter.model import Attribution, ContainerRef, GpuSample, MigInstance, ProcessSample
from exporter.view import gpu_view
from steward_common import metrics as m

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "metrics.md"
ROW = re.compile(r"^\| `((?:gpu_steward_|DCGM_FI_)\w+)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|", re.MULTILINE)
# Base units whose name suffix Prometheus conventions require.
SUFFIXES = {unit: f"_{unit}" for unit in ("ratio", "bytes", "celsius", "watts", "joules")}


def doc_rows(text: str) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Metric -> (type, unit, labels) from the tables of docs/metrics.md."""
    rows: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    for name, kind, unit, labels in ROW.findall(text):
        assert name not in rows, f"{name} has two rows in docs/metrics.md"
        rows[name] = (kind.strip(), unit.strip(), tuple(label.strip() for label in labels.split(",")))
    return rows


def table_rows() -> dict[str, tuple[str, str, tuple[str, ...]]]:
    return {s.sample_name: (s.kind, s.unit, s.labels) for s in m.ALL_METRICS}


def test_docs_tables_match_the_metric_table() -> None:
    assert doc_rows(DOCS.read_text()) == table_rows()


def test_a_drifted_docs_row_is_caught() -> None:
    """The check above can fail: a renamed metric, a changed label or unit in the docs all differ."""
    text = DOCS.read_text()
    drifted = [
        text.replace("`gpu_steward_gpu_lost`", "`gpu_steward_gpu_gone`"),
        text.replace("| gauge | watts | node, gpu, uuid, model |", "| gauge | watts | node, gpu |"),
        text.replace("| counter | joules |", "| counter | kilojoules |"),
    ]
    for variant in drifted:
        assert variant != text
        assert doc_rows(variant) != table_rows()


def test_names_follow_the_table_conventions() -> None:
    names = [s.name for s in m.ALL_METRICS]
    assert len(names) == len(set(names))
    for spec in m.SNAPSHOT_METRICS + m.EXPORTER_METRICS:
        assert spec.name.startswith(m.PREFIX) and not spec.name.endswith("_total")
        suffix = SUFFIXES.get(spec.unit)
        assert suffix is None or spec.name.endswith(suffix), spec.name
    assert {s.name for s in m.DCGM_METRICS} == {s.name for s in m.ALL_METRICS if s.name.startswith("DCGM_")}


def test_no_exporter_module_spells_a_metric_name_but_the_table() -> None:
    short = {s.name.removeprefix(m.PREFIX) for s in m.ALL_METRICS}
    quoted = re.compile(r"""["'](\w+)["']""")
    for path in sorted((ROOT / "exporter").rglob("*.py")):
        if path.name == "metrics.py" or path.name.endswith("_pb2.py") or path.name.endswith("_pb2_grpc.py"):
            continue
        text = path.read_text()
        spelled = {w for w in quoted.findall(text) if w in short or w.removeprefix(m.PREFIX) in short}
        spelled |= set(re.findall(r"(?:gpu_steward_|DCGM_FI_)\w+", text))
        assert not spelled, f"{path.relative_to(ROOT)} spells {sorted(spelled)}; use steward_common.metrics"


def views() -> list[object]:
    a, b = ContainerRef("ns", "a", "main"), ContainerRef("ns", "b", "main")
    shared = GpuSample(0, "GPU-0", "M", utilization=0.7, memory_utilization=0.1, memory_used_bytes=3 << 20)
    shared.memory_total_bytes, shared.temperature_celsius = 10 << 20, 50.0
    shared.power_watts, shared.energy_joules = 70.0, 12.0
    shared.processes = [
        ProcessSample(1, 0.5, 1 << 20, Attribution("container", a)),
        ProcessSample(2, 0.1, 1 << 20, Attribution("host")),
    ]
    shared.pci_bus_id, shared.driver_version, shared.cuda_version = "00000000:3B:00.0", "550.54.15", "12.4"
    shared.memory_reserved_bytes, shared.memory_temperature_celsius = 1 << 20, 60.0
    shared.sm_clock_hertz, shared.memory_clock_hertz = 1.98e9, 2.6e9
    shared.encoder_utilization, shared.decoder_utilization = 0.1, 0.2
    shared.pcie_tx_bytes_per_second = shared.pcie_rx_bytes_per_second = 1e6
    shared.pcie_replays, shared.nvlink_tx_bytes, shared.nvlink_rx_bytes = 0, 1 << 30, 1 << 30
    shared.xid_errors, shared.last_xid = {79: 1}, 79
    shared.ecc_errors = {("uncorrected", "volatile"): 1}
    shared.remapped_rows = {"correctable": 0, "uncorrectable": 1}
    shared.row_remap_pending, shared.row_remap_failure = False, False
    shared.clock_event_reasons = frozenset({"hw_thermal_slowdown"})
    other = GpuSample(1, "GPU-1", "M", utilization=0.1, memory_used_bytes=0, memory_total_bytes=1 << 20)
    other.processes = [ProcessSample(3, 0.1, 1 << 20, Attribution("unresolved"))]
    mig = GpuSample(2, "MIG-2", "M MIG 1g.10gb", memory_used_bytes=0, memory_total_bytes=1 << 20)
    mig.mig = MigInstance("GPU-2", 1, 0, "1g.10gb")
    return [gpu_view(shared, {}, [a, b]), gpu_view(other, {}, []), gpu_view(mig, {}, [])]


@pytest.mark.parametrize("build", ["steward", "dcgm"])
def test_samples_carry_exactly_the_labels_of_their_spec(build: str) -> None:
    vs = views()
    key = ("n", "0", "GPU-0", "M", "power", "NoPermission")
    built = (
        families.gpu_families(vs, "n", {key: 2})  # type: ignore[arg-type]
        if build == "steward"
        else dcgm_compat.dcgm_families(vs, "n")  # type: ignore[arg-type]
    )
    seen = set()
    for family in built:
        for sample in family.samples:
            assert sample.name == family.spec.sample_name
            assert tuple(sample.labels) == family.spec.labels, family.spec.name
            seen.add(family.spec)
    expected = set(m.SNAPSHOT_METRICS if build == "steward" else m.DCGM_METRICS)
    assert seen == expected, sorted(s.name for s in expected - seen)


def test_the_dcgm_map_covers_exactly_the_dcgm_table() -> None:
    mapped = [spec for spec, _ in dcgm_compat.DEVICE + dcgm_compat.FRAMEBUFFER]
    assert sorted(s.name for s in mapped) == sorted(s.name for s in m.DCGM_METRICS)
    per_container = {spec for spec, _ in dcgm_compat.PER_CONTAINER}
    assert per_container == {m.DCGM_GPU_UTIL, m.DCGM_FB_USED}  # upstream's per-process fields
