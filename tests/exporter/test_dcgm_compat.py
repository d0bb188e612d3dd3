"""`--compat dcgm`: one series per GPU for device-wide fields, per-container util/FB only on shared GPUs."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from exporter.dcgm_compat import dcgm_families
from exporter.model import Attribution, ContainerRef, GpuSample, MigInstance, ProcessSample
from exporter.view import gpu_view
from steward_common import metrics as m

MIB = 1024 * 1024
A = ContainerRef("ns", "a", "main", "uid-a")
B = ContainerRef("ns", "b", "main", "uid-b")


def gpu(
    index: int, utilization: float | None, processes: Sequence[ProcessSample] = (), **kw: object
) -> GpuSample:
    sample = GpuSample(
        index,
        f"GPU-{index}",
        "H100",
        utilization=utilization,
        memory_utilization=0.1,
        memory_used_bytes=4 * MIB,
        memory_total_bytes=10 * MIB,
        memory_reserved_bytes=1 * MIB,
        temperature_celsius=50.0,
        power_watts=100.0,
        energy_joules=2.5,
        sm_clock_hertz=1.98e9,
        pci_bus_id=f"00000000:{index:02X}:00.0",
        driver_version="550.54.15",
        processes=list(processes),
    )
    for k, v in kw.items():
        setattr(sample, k, v)
    return sample


def own(ref: ContainerRef) -> Attribution:
    return Attribution("container", ref)


Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def series(gpus: Sequence[GpuSample], allocations: dict[str, list[ContainerRef]]) -> Series:
    views = [gpu_view(g, {}, allocations.get(g.uuid, [])) for g in gpus]
    out: Series = {}
    for family in dcgm_families(views, "node-1"):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def named(out: Series, name: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(labels), v) for (n, labels), v in out.items() if n == name]


def test_device_fields_once_per_gpu_with_the_sole_holder() -> None:
    out = series(
        [gpu(0, 0.7, [ProcessSample(1, 0.7, 2 * MIB, own(A))]), gpu(1, 0.25)],
        {"GPU-0": [A]},
    )
    power = named(out, "DCGM_FI_DEV_POWER_USAGE")
    assert sorted(v for _, v in power) == [100.0, 100.0]  # one per GPU, not per container
    held = next(labels for labels, _ in power if labels["gpu"] == "0")
    assert (held["pod"], held["namespace"], held["container"], held["pod_uid"]) == ("a", "ns", "main", "")
    assert held["pci_bus_id"] == "00000000:00:00.0"
    assert held["DCGM_FI_DRIVER_VERSION"] == "550.54.15"
    assert held["UUID"] == "GPU-0" and held["device"] == "nvidia0" and held["modelName"] == "H100"
    free = next(labels for labels, _ in power if labels["gpu"] == "1")
    assert free["pod"] == ""
    util = {labels["gpu"]: v for labels, v in named(out, "DCGM_FI_DEV_GPU_UTIL")}
    assert util == {"0": 70.0, "1": 25.0}
    assert {v for _, v in named(out, "DCGM_FI_DEV_SM_CLOCK")} == {1980.0}
    assert {v for _, v in named(out, "DCGM_FI_DEV_FB_FREE")} == {5.0}  # total - used - reserved
    assert {v for _, v in named(out, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")} == {2500.0}


def test_shared_gpu_device_series_plus_per_container_util_and_fb() -> None:
    procs = [ProcessSample(1, 0.5, 2 * MIB, own(A)), ProcessSample(2, 0.2, 1 * MIB, own(B))]
    out = series([gpu(0, 0.7, procs)], {"GPU-0": [A, B]})
    assert len(named(out, "DCGM_FI_DEV_GPU_TEMP")) == 1  # device-wide: never per container
    assert len(named(out, "DCGM_FI_DEV_POWER_USAGE")) == 1
    util = {labels["pod_uid"]: (labels["pod"], v) for labels, v in named(out, "DCGM_FI_DEV_GPU_UTIL")}
    assert util == {"": ("", 70.0), "uid-a": ("a", 50.0), "uid-b": ("b", 20.0)}
    fb = {labels["pod_uid"]: v for labels, v in named(out, "DCGM_FI_DEV_FB_USED")}
    assert fb == {"": 4.0, "uid-a": 2.0, "uid-b": 1.0}


def test_unattributable_process_does_not_hide_device_values() -> None:
    procs = [ProcessSample(1, 0.5, 2 * MIB, own(A)), ProcessSample(9, 0.2, 1 * MIB, None)]
    out = series([gpu(0, 0.7, procs)], {"GPU-0": [A, B]})
    assert [v for _, v in named(out, "DCGM_FI_DEV_GPU_UTIL")] == [70.0]  # the split is unknown
    assert [v for _, v in named(out, "DCGM_FI_DEV_FB_USED")] == [4.0]


def test_missing_fields_are_absent_not_zero_and_lost_gpus_are_left_out() -> None:
    out = series(
        [gpu(0, 0.1, power_watts=None), GpuSample(1, "GPU-1", "H100", ok=False, lost=True)],
        {},
    )
    assert named(out, "DCGM_FI_DEV_POWER_USAGE") == []
    assert {labels["gpu"] for labels, _ in named(out, "DCGM_FI_DEV_GPU_TEMP")} == {"0"}
    assert named(out, "DCGM_FI_DEV_ENC_UTIL") == []  # not read


def test_mig_devices_carry_the_parent_uuid_and_instance_labels() -> None:
    parent = gpu(0, None, mig_enabled=True, memory_used_bytes=3 * MIB)
    slices = [
        gpu(
            0,
            None,
            [ProcessSample(5, None, 3 * MIB, own(A))],
            mig=MigInstance("GPU-0", 1, 0, "1g.10gb"),
            uuid="MIG-a",
            memory_used_bytes=3 * MIB,
            memory_total_bytes=5 * MIB,
            power_watts=None,
            temperature_celsius=None,
            sm_clock_hertz=None,
            energy_joules=None,
        ),
        gpu(
            0,
            None,
            mig=MigInstance("GPU-0", 2, 0, "1g.10gb"),
            uuid="MIG-b",
            memory_used_bytes=0,
            memory_total_bytes=5 * MIB,
            power_watts=None,
            temperature_celsius=None,
            sm_clock_hertz=None,
            energy_joules=None,
        ),
    ]
    out = series([parent, *slices], {"MIG-a": [A]})
    fb = {
        labels["GPU_I_ID"]: (labels["UUID"], labels["pod"], v)
        for labels, v in named(out, "DCGM_FI_DEV_FB_USED")
    }
    # the parent leaves the framebuffer to its MIG devices: the sum is the GPU's use, counted once
    assert fb == {"1": ("GPU-0", "a", 3.0), "2": ("GPU-0", "", 0.0)}
    power = named(out, "DCGM_FI_DEV_POWER_USAGE")
    assert [(labels["GPU_I_ID"], v) for labels, v in power] == [("", 100.0)]


def test_every_field_of_the_table_has_a_value_rule() -> None:
    from exporter.dcgm_compat import DEVICE, FRAMEBUFFER

    assert {spec for spec, _ in DEVICE + FRAMEBUFFER} == set(m.DCGM_METRICS)


@pytest.mark.parametrize("spec", m.DCGM_METRICS, ids=lambda s: s.name)
def test_counters_keep_upstream_names(spec: m.MetricSpec) -> None:
    assert spec.sample_name == spec.name
