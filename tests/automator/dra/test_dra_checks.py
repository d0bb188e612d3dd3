"""The DRA checks (automator/dra/checks.py), one kind at a time, on both sides of every rule."""

from __future__ import annotations

import copy
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from automator.dra.checks import check
from automator.dra.load import load_objects, parse_usage
from automator.dra.model import KINDS, SEVERITY, Finding, Report
from tests.automator.fixtures.dra import builders as b

FIXTURES = Path(__file__).parents[1] / "fixtures" / "dra"
HAMI = FIXTURES / "hami-cluster.yaml"
HAMI_USAGE = FIXTURES / "hami-usage.yaml"
A0 = "hami-core-gpu.project-hami.io/gpu-node-a/hami-gpu-0"
N1_0 = f"{b.DRIVER}/n1/hami-gpu-0"


def run(objects: list[dict[str, Any]], usage: list[dict[str, Any]] | None = None) -> Report:
    records = load_objects((obj, f"test object {i}") for i, obj in enumerate(objects))
    return check(records, parse_usage({"containers": usage or []}, "usage"))


def of(report: Report, kind: str) -> list[Finding]:
    return [f for f in report.findings if f.kind == kind]


def hami_objects() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load(HAMI.read_text())["items"]
    return items


def hami_usage() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = yaml.safe_load(HAMI_USAGE.read_text())["containers"]
    return entries


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def two_tenants(
    mem_a: Any, mem_b: Any, cores_a: Any = "10", cores_b: Any = "10", **device: Any
) -> list[dict[str, Any]]:
    """Node n1 with one 80Gi HAMi GPU shared by ml/a and ml/b."""
    return [
        b.node("n1"),
        b.resource_slice("n1", [b.hami_device("n1", 0, **device)]),
        b.shared_claim("ml", "a-gpu", "n1", 0, cores_a, mem_a, "a"),
        b.shared_claim("ml", "b-gpu", "n1", 0, cores_b, mem_b, "b"),
        b.pod("ml", "a", "n1", {"gpu": "a-gpu"}),
        b.pod("ml", "b", "n1", {"gpu": "b-gpu"}),
    ]


# --- the realistic fixture --------------------------------------------------------------------------------


def test_healthy_hami_cluster_has_no_findings_and_reports_every_device() -> None:
    report = run(hami_objects(), hami_usage())
    assert report.findings == []
    by_device = {str(d.device): d for d in report.devices}
    assert set(by_device) == {
        A0,
        "hami-core-gpu.project-hami.io/gpu-node-a/hami-gpu-1",
        "hami-core-gpu.project-hami.io/gpu-node-b/hami-gpu-0",
    }
    a0 = by_device[A0]
    assert a0.node == "gpu-node-a"
    assert a0.capacity == {"cores": 100, "memory": 80 * b.GIB}
    assert a0.consumed == {"cores": 80, "memory": (40000 + 20000) * b.MIB}
    # the current generation of gpu-node-b's pool (24Gi), not the stale one (16Gi)
    assert by_device["hami-core-gpu.project-hami.io/gpu-node-b/hami-gpu-0"].capacity["memory"] == 24 * b.GIB


def test_every_kind_has_a_severity() -> None:
    assert set(SEVERITY.values()) <= {"critical", "warning", "info"}
    assert len(KINDS) == 8


# --- overcommitted ----------------------------------------------------------------------------------------


def test_consumption_exactly_at_capacity_is_not_overcommitted() -> None:
    report = run(two_tenants("40Gi", str(40 * b.GIB), cores_a="60", cores_b="40"))
    assert report.findings == []
    assert report.devices[0].consumed == {"cores": 100, "memory": 80 * b.GIB}


def test_one_mebibyte_over_capacity_is_overcommitted() -> None:
    report = run(two_tenants("40Gi", str(40 * b.GIB + b.MIB)))
    (finding,) = report.findings
    assert finding.kind == "overcommitted"
    assert finding.severity == "critical"
    assert (finding.node, finding.device, finding.claim, finding.pod) == ("n1", N1_0, None, None)
    assert "memory" in finding.message
    assert str(80 * b.GIB + b.MIB) in finding.message and str(80 * b.GIB) in finding.message
    assert "ml/a-gpu" in finding.message and "ml/b-gpu" in finding.message


def test_each_capacity_is_summed_on_its_own() -> None:
    report = run(two_tenants("1Gi", "1Gi", cores_a="60", cores_b="41"))
    (finding,) = of(report, "overcommitted")
    assert "cores consumed 101 > capacity 100" in finding.message


def test_overcommitment_of_the_realistic_fixture() -> None:
    objects = hami_objects()
    infer = find(objects, "ResourceClaim", "infer-b-gpu")
    infer["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {
        "cores": "51",
        "memory": "40000Mi",
    }
    report = run(objects)
    assert [(f.kind, f.device) for f in report.findings] == [("overcommitted", A0)]
    assert "cores consumed 101 > capacity 100" in report.findings[0].message


# --- invalid-consumption ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("memory", "problem"),
    [
        ("1Mi", None),  # the minimum
        ("6Mi", None),  # min + 5 * step
        (str(b.MIB + 5 * b.MIB), None),
        ("80Gi", None),  # the maximum
        (str(6 * b.MIB + 1), "is not min"),
        ("1048575", "below the validRange min"),
        ("0", "below the validRange min"),
        ("81Gi", "above the validRange max"),
        ("-1Mi", "is negative"),
    ],
)
def test_memory_against_the_valid_range(memory: str, problem: str | None) -> None:
    objects = [
        b.resource_slice("n1", [b.hami_device("n1", 0)]),
        b.shared_claim("ml", "a-gpu", "n1", 0, "10", memory, "a"),
        b.pod("ml", "a", "n1", {"gpu": "a-gpu"}),
    ]
    found = of(run(objects), "invalid-consumption")
    if problem is None:
        assert found == []
    else:
        (finding,) = found
        assert finding.severity == "warning"
        assert (finding.node, finding.device, finding.claim, finding.pod) == ("n1", N1_0, "ml/a-gpu", "ml/a")
        assert problem in finding.message and "memory" in finding.message


@pytest.mark.parametrize(
    ("amount", "valid"), [("3", True), ("13", True), ("18", True), ("15", False), ("2", False)]
)
def test_step_counts_from_min_not_from_zero(amount: str, valid: bool) -> None:
    device = b.hami_device("n1", 0)
    device["capacity"]["cores"]["requestPolicy"] = {"validRange": {"min": "3", "max": "100", "step": "5"}}
    objects = [b.resource_slice("n1", [device]), b.shared_claim("ml", "a-gpu", "n1", 0, amount, "1Gi", "a")]
    assert (of(run(objects), "invalid-consumption") == []) is valid


def test_range_without_max_or_step() -> None:
    device = b.hami_device("n1", 0)
    device["capacity"]["cores"]["requestPolicy"] = {"validRange": {"min": "10"}}
    ok = [b.resource_slice("n1", [device]), b.shared_claim("ml", "a-gpu", "n1", 0, "57", "1Gi", "a")]
    assert of(run(ok), "invalid-consumption") == []
    low = [b.resource_slice("n1", [device]), b.shared_claim("ml", "a-gpu", "n1", 0, "9", "1Gi", "a")]
    assert len(of(run(low), "invalid-consumption")) == 1


@pytest.mark.parametrize(
    ("cores", "valid"), [("25", True), ("50", True), ("100", True), ("30", False), ("0", False)]
)
def test_valid_values(cores: str, valid: bool) -> None:
    device = b.hami_device("n1", 0)
    device["capacity"]["cores"]["requestPolicy"] = {"default": "100", "validValues": ["25", "50", "100"]}
    objects = [b.resource_slice("n1", [device]), b.shared_claim("ml", "a-gpu", "n1", 0, cores, "1Gi", "a")]
    found = of(run(objects), "invalid-consumption")
    assert (found == []) is valid
    if not valid:
        assert "validValues 25, 50, 100" in found[0].message


def test_no_policy_allows_any_non_negative_amount() -> None:
    device = b.hami_device("n1", 0)
    del device["capacity"]["cores"]["requestPolicy"]
    objects = [b.resource_slice("n1", [device]), b.shared_claim("ml", "a-gpu", "n1", 0, "7.5", "1Gi", "a")]
    assert of(run(objects), "invalid-consumption") == []


def test_consuming_a_capacity_the_device_does_not_publish() -> None:
    objects = [
        b.resource_slice("n1", [b.hami_device("n1", 0)]),
        b.claim(
            "ml", "a-gpu", [b.result("n1", 0, {"cores": "10", "memory": "1Gi", "bandwidth": "5"})], ["a"]
        ),
    ]
    (finding,) = of(run(objects), "invalid-consumption")
    assert "bandwidth" in finding.message and "does not publish" in finding.message


# --- shared-without-multiple-allocations ------------------------------------------------------------------


@pytest.mark.parametrize("multiple", [False, None])  # absent means false
def test_exclusive_device_with_two_claims(multiple: bool | None) -> None:
    objects = [
        b.resource_slice("n1", [b.hami_device("n1", 0, multiple=multiple)]),
        b.claim("ml", "a-gpu", [b.result("n1", 0, None)], ["a"]),
        b.claim("ml", "b-gpu", [b.result("n1", 0, None)], ["b"]),
        b.pod("ml", "a", "n1", {"gpu": "a-gpu"}),
        b.pod("ml", "b", "n1", {"gpu": "b-gpu"}),
    ]
    report = run(objects)
    (finding,) = report.findings
    assert finding.kind == "shared-without-multiple-allocations"
    assert finding.severity == "critical"
    assert (finding.node, finding.device, finding.claim, finding.pod) == ("n1", N1_0, "ml/b-gpu", "ml/b")
    assert "ml/a-gpu, ml/b-gpu" in finding.message
    # an exclusive allocation holds the whole device
    assert report.devices[0].consumed == report.devices[0].capacity


def test_exclusive_device_with_one_claim_and_shared_device_with_two() -> None:
    one = [
        b.resource_slice("n1", [b.hami_device("n1", 0, multiple=False)]),
        b.claim("ml", "a-gpu", [b.result("n1", 0, None), b.result("n1", 0, None, request="gpu2")], ["a"]),
        b.pod("ml", "a", "n1", {"gpu": "a-gpu"}),
    ]
    assert run(one).findings == []
    assert run(two_tenants("1Gi", "1Gi")).findings == []


def test_three_claims_on_an_exclusive_device_name_each_extra_claim() -> None:
    objects = [b.resource_slice("n1", [b.hami_device("n1", 0, multiple=False)])] + [
        b.claim("ml", f"{x}-gpu", [b.result("n1", 0, None)], [x]) for x in "cab"
    ]
    found = of(run(objects), "shared-without-multiple-allocations")
    assert [f.claim for f in found] == ["ml/b-gpu", "ml/c-gpu"]


# --- unknown-device ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"device": "hami-gpu-9"},
        {"pool": "other-node"},
        {"driver": "gpu.nvidia.com"},
    ],
)
def test_allocation_of_a_device_nobody_publishes(change: dict[str, str]) -> None:
    objects = hami_objects()
    train = find(objects, "ResourceClaim", "train-a-gpu")
    train["status"]["allocation"]["devices"]["results"][0].update(change)
    report = run(objects)
    (finding,) = report.findings
    assert finding.kind == "unknown-device"
    assert finding.severity == "warning"
    assert finding.claim == "ml/train-a-gpu"
    assert finding.pod == "ml/train-a"
    assert finding.node == "gpu-node-a"  # from the pod it is reserved for
    assert finding.device is not None and change[next(iter(change))] in finding.device
    # the unknown device's consumption counts nowhere
    a0 = next(d for d in report.devices if str(d.device) == A0)
    assert a0.consumed["memory"] == 20000 * b.MIB


def test_a_device_only_in_a_stale_pool_generation_is_unknown() -> None:
    objects = [
        b.resource_slice("n1", [b.hami_device("n1", 0), b.hami_device("n1", 1)], generation=1),
        b.resource_slice("n1", [b.hami_device("n1", 0)], generation=2),
        b.shared_claim("ml", "a-gpu", "n1", 1, "10", "1Gi", "a"),
        b.pod("ml", "a", "n1", {"gpu": "a-gpu"}),
    ]
    (finding,) = run(objects).findings
    assert (finding.kind, finding.device) == ("unknown-device", f"{b.DRIVER}/n1/hami-gpu-1")


# --- orphaned-claim ---------------------------------------------------------------------------------------


def test_claim_reserved_for_a_deleted_pod_is_orphaned() -> None:
    objects = [o for o in hami_objects() if not (o["kind"] == "Pod" and o["metadata"]["name"] == "infer-b")]
    (finding,) = run(objects).findings
    assert finding.kind == "orphaned-claim"
    assert finding.severity == "warning"
    assert (finding.claim, finding.pod, finding.device) == ("ml/infer-b-gpu", "ml/infer-b", A0)
    assert "ml/infer-b" in finding.message


def test_claim_reserved_for_nobody_is_orphaned_and_an_unallocated_one_is_not() -> None:
    objects = [
        b.resource_slice("n1", [b.hami_device("n1", 0)]),
        b.shared_claim("ml", "held", "n1", 0, "10", "1Gi", "x"),
        b.claim("ml", "pending", None),
    ]
    objects[1]["status"].pop("reservedFor")
    (finding,) = run(objects).findings
    assert (finding.kind, finding.claim, finding.pod) == ("orphaned-claim", "ml/held", None)
    assert "no consumer at all" in finding.message


def test_a_pod_of_the_same_name_but_another_uid_does_not_hold_the_claim() -> None:
    objects = hami_objects()
    find(objects, "Pod", "train-a")["metadata"]["uid"] = "recreated"
    assert [f.kind for f in run(objects).findings] == ["orphaned-claim"]
    del find(objects, "Pod", "train-a")["metadata"]["uid"]  # no uid to compare: the name decides
    assert run(objects).findings == []


def test_a_consumer_that_is_not_a_pod_keeps_the_claim() -> None:
    objects = [
        b.resource_slice("n1", [b.hami_device("n1", 0)]),
        b.shared_claim("ml", "held", "n1", 0, "10", "1Gi", "x"),
    ]
    objects[1]["status"]["reservedFor"] = [{"apiGroup": "batch", "resource": "jobs", "name": "j", "uid": "u"}]
    assert run(objects).findings == []


# --- usage-over-claim -------------------------------------------------------------------------------------


def _with_usage(memory: int | None, **where: str) -> Report:
    entries = hami_usage()
    entries[0] = {**entries[0], "memory_bytes": memory, **where}
    return run(hami_objects(), entries)


def test_usage_exactly_at_the_claim_is_not_over() -> None:
    assert _with_usage(40000 * b.MIB).findings == []


def test_usage_one_byte_over_the_claim() -> None:
    (finding,) = _with_usage(40000 * b.MIB + 1).findings
    assert finding.kind == "usage-over-claim"
    assert finding.severity == "critical"
    assert (finding.node, finding.device, finding.claim, finding.pod) == (
        "gpu-node-a",
        A0,
        "ml/train-a-gpu",
        "ml/train-a",
    )
    assert str(40000 * b.MIB + 1) in finding.message and str(40000 * b.MIB) in finding.message
    assert "trainer" in finding.message


def test_unknown_usage_and_usage_on_other_gpus_are_not_compared() -> None:
    assert _with_usage(None).findings == []
    assert _with_usage(99 * b.GIB, gpu_uuid="GPU-device-plugin-0").findings == []


def test_usage_on_a_dra_gpu_the_pod_holds_no_claim_on() -> None:
    (finding,) = _with_usage(b.GIB, gpu_uuid="GPU-3f1c9a2e-6a4b-4d0e-9c11-0a1b2c3d4e51").findings
    assert finding.kind == "usage-over-claim"
    assert finding.claim is None
    assert finding.device == "hami-core-gpu.project-hami.io/gpu-node-a/hami-gpu-1"
    assert "none of its pod's claims" in finding.message


def test_usage_of_a_pod_without_claims_is_not_judged() -> None:
    assert _with_usage(99 * b.GIB, pod="not-in-the-snapshot").findings == []


def test_claim_from_a_template_is_found_through_the_pod_status() -> None:
    entries = hami_usage()
    entries[2]["memory_bytes"] = 10 * b.GIB + 1
    (finding,) = run(hami_objects(), entries).findings
    assert (finding.kind, finding.claim, finding.pod) == (
        "usage-over-claim",
        "research/notebook-c-gpu-7x2kq",
        "research/notebook-c",
    )


def test_container_request_reference_selects_the_request() -> None:
    objects = [
        b.resource_slice("n1", [b.hami_device("n1", 0)]),
        b.claim(
            "ml",
            "a-gpu",
            [
                b.result("n1", 0, {"cores": "10", "memory": "2Gi"}, request="big"),
                b.result("n1", 0, {"cores": "10", "memory": "1Gi"}, request="small"),
            ],
            ["a"],
        ),
        b.pod("ml", "a", "n1", {"gpu": "a-gpu"}),
    ]
    objects[2]["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu", "request": "small"}]
    use = [b.usage("ml", "a", b.uuid_of("n1", 0), 2 * b.GIB)]
    (finding,) = run(objects, use).findings
    assert finding.kind == "usage-over-claim" and "1073741824" in finding.message
    objects[2]["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]  # both requests: 3Gi
    assert run(objects, use).findings == []


def test_devices_are_matched_by_a_qualified_uuid_attribute_too() -> None:
    device = b.hami_device("n1", 0)
    device["attributes"][f"{b.DRIVER}/uuid"] = device["attributes"].pop("uuid")
    objects = [
        b.resource_slice("n1", [device]),
        b.shared_claim("ml", "a-gpu", "n1", 0, "10", "1Gi", "a"),
        b.pod("ml", "a", "n1", {"gpu": "a-gpu"}),
    ]
    (finding,) = run(objects, [b.usage("ml", "a", b.uuid_of("n1", 0), 2 * b.GIB)]).findings
    assert finding.kind == "usage-over-claim"


def test_exclusive_allocation_without_memory_amount_is_not_compared() -> None:
    objects = [
        b.resource_slice("n1", [b.hami_device("n1", 0, multiple=False)]),
        b.claim("ml", "a-gpu", [b.result("n1", 0, None)], ["a"]),
        b.pod("ml", "a", "n1", {"gpu": "a-gpu"}),
    ]
    assert run(objects, [b.usage("ml", "a", b.uuid_of("n1", 0), 79 * b.GIB)]).findings == []


# --- mixed-mode -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allocatable", "mixed"),
    [
        ({"nvidia.com/gpu": "4"}, True),
        ({"nvidia.com/gpumem": "81920"}, True),
        ({"nvidia.com/gpucores": "400"}, True),
        ({"nvidia.com/gpu.shared": "3"}, True),
        ({"nvidia.com/mig-1g.10gb": "7"}, True),
        ({"nvidia.com/gpu": "0"}, False),  # the plugin registered but offers nothing
        ({"example.com/fpga": "2"}, False),
        ({}, False),
    ],
)
def test_mixed_mode(allocatable: dict[str, str], mixed: bool) -> None:
    objects = [b.node("n1", allocatable), b.resource_slice("n1", [b.hami_device("n1", 0)])]
    found = of(run(objects), "mixed-mode")
    assert (len(found) == 1) is mixed
    if mixed:
        (finding,) = found
        assert (finding.node, finding.device, finding.claim, finding.severity) == (
            "n1",
            None,
            None,
            "warning",
        )
        assert next(iter(allocatable)) in finding.message


def test_mixed_mode_needs_dra_gpus_on_the_node() -> None:
    nic = b.resource_slice("n1", [{"name": "eth1", "attributes": {}}], driver="nic.example.com")
    objects = [b.node("n1", {"nvidia.com/gpu": "8"}), b.node("n2", {"nvidia.com/gpu": "8"}), nic]
    assert run(objects).findings == []
    # a driver without "gpu" in its name counts when a GPU DeviceClass selects it
    accel = b.resource_slice("n1", [{"name": "acc0"}], driver="accel.example.com")
    gpu_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "example-gpu"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "accel.example.com"'}}]},
    }
    assert run([b.node("n1", {"nvidia.com/gpu": "8"}), accel]).findings == []
    assert [f.kind for f in run([b.node("n1", {"nvidia.com/gpu": "8"}), accel, gpu_class]).findings] == [
        "mixed-mode"
    ]


def test_hami_fixture_node_turns_mixed() -> None:
    objects = hami_objects()
    find(objects, "Node", "gpu-node-b")["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    (finding,) = run(objects).findings
    assert (finding.kind, finding.node) == ("mixed-mode", "gpu-node-b")


# --- unparsable -------------------------------------------------------------------------------------------


def _slice_device(objects: list[dict[str, Any]], index: int = 0) -> dict[str, Any]:
    device: dict[str, Any] = find(objects, "ResourceSlice", "gpu-node-a-hami-core-gpu.project-hami.io-5kq8d")[
        "spec"
    ]["devices"][index]
    return device


def _claim_result(objects: list[dict[str, Any]], name: str = "train-a-gpu") -> dict[str, Any]:
    result: dict[str, Any] = find(objects, "ResourceClaim", name)["status"]["allocation"]["devices"][
        "results"
    ][0]
    return result


BREAKAGES: list[tuple[str, Callable[[list[dict[str, Any]]], None], str, str | None]] = [
    (
        "capacity value",
        lambda o: _slice_device(o)["capacity"]["memory"].update(value="80 GB"),
        "spec.devices[0].capacity.memory.value",
        A0,
    ),
    (
        "capacity value not a string",
        lambda o: _slice_device(o)["capacity"]["cores"].update(value=[100]),
        "spec.devices[0].capacity.cores.value",
        A0,
    ),
    (
        "NaN",
        lambda o: _slice_device(o)["capacity"]["cores"].update(value="NaN"),
        "spec.devices[0].capacity.cores.value",
        A0,
    ),
    (
        "policy",
        lambda o: _slice_device(o)["capacity"]["memory"]["requestPolicy"]["validRange"].update(step="one"),
        "validRange.step",
        A0,
    ),
    (
        "zero step",
        lambda o: _slice_device(o)["capacity"]["memory"]["requestPolicy"]["validRange"].update(step="0"),
        "validRange.step",
        A0,
    ),
    (
        "allowMultipleAllocations",
        lambda o: _slice_device(o, 1).update(allowMultipleAllocations="yes"),
        "spec.devices[1].allowMultipleAllocations",
        "hami-core-gpu.project-hami.io/gpu-node-a/hami-gpu-1",
    ),
    ("uuid", lambda o: _slice_device(o)["attributes"].update(uuid="GPU-x"), "attributes.uuid", A0),
    ("capacity map", lambda o: _slice_device(o).update(capacity=["memory"]), "spec.devices[0].capacity", A0),
    ("device name", lambda o: _slice_device(o).pop("name"), "spec.devices[0].name", None),
    (
        "devices",
        lambda o: find(o, "ResourceSlice", "gpu-node-a-hami-core-gpu.project-hami.io-5kq8d")["spec"].update(
            devices={}
        ),
        "spec.devices",
        None,
    ),
    (
        "consumed amount",
        lambda o: _claim_result(o)["consumedCapacity"].update(memory="lots"),
        "consumedCapacity.memory",
        A0,
    ),
    ("result device", lambda o: _claim_result(o).pop("device"), "results[0].device", None),
    (
        "reservedFor",
        lambda o: find(o, "ResourceClaim", "train-a-gpu")["status"].update(reservedFor={"name": "train-a"}),
        "status.reservedFor",
        None,
    ),
    (
        "pod claims",
        lambda o: find(o, "Pod", "train-a")["spec"].update(resourceClaims="gpu"),
        "spec.resourceClaims",
        None,
    ),
    (
        "node allocatable",
        lambda o: find(o, "Node", "gpu-node-b")["status"]["allocatable"].update({"nvidia.com/gpu": "four"}),
        "status.allocatable.nvidia.com/gpu",
        None,
    ),
    (
        "claim without name",
        lambda o: find(o, "ResourceClaim", "infer-e-gpu")["metadata"].pop("name"),
        "metadata.name",
        None,
    ),
    (
        "pod without namespace",
        lambda o: find(o, "Pod", "infer-e")["metadata"].pop("namespace"),
        "metadata.namespace",
        None,
    ),
]


@pytest.mark.parametrize(("what", "breakage", "field", "device"), BREAKAGES, ids=[x[0] for x in BREAKAGES])
def test_a_field_that_does_not_parse_is_a_finding_not_a_crash(
    what: str, breakage: Callable[[list[dict[str, Any]]], None], field: str, device: str | None
) -> None:
    objects = hami_objects()
    breakage(objects)
    report = run(objects, hami_usage())
    unparsable = of(report, "unparsable")
    assert len(unparsable) == 1, report.findings
    assert field in unparsable[0].message
    assert unparsable[0].severity == "warning"
    if device is not None:
        assert unparsable[0].device == device


def test_what_still_parses_is_still_checked() -> None:
    objects = two_tenants("40Gi", "lots", cores_a="60", cores_b="41")
    objects[1]["spec"]["devices"][0]["capacity"]["memory"]["value"] = "eighty"
    report = run(objects)
    assert sorted(f.kind for f in report.findings) == ["overcommitted", "unparsable", "unparsable"]
    (over,) = of(report, "overcommitted")
    assert "cores" in over.message
    assert report.devices[0].capacity == {"cores": Decimal(100)}


def test_a_known_sum_already_over_capacity_is_reported_despite_an_unparsable_amount() -> None:
    objects = [*two_tenants("50Gi", "40Gi"), b.shared_claim("ml", "c-gpu", "n1", 0, "1", "junk", "a")]
    assert sorted(f.kind for f in run(objects).findings) == ["overcommitted", "unparsable"]


def test_input_objects_are_not_modified() -> None:
    objects = hami_objects()
    before = copy.deepcopy(objects)
    run(objects, hami_usage())
    assert objects == before
