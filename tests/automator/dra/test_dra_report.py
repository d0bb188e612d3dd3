"""DRA report exports: metric samples and the collector, Event bodies, JSON numbers, text."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from kubernetes import client
from prometheus_client import CollectorRegistry, generate_latest

from automator.dra.checks import check
from automator.dra.load import load_cluster_file, load_usage_file
from automator.dra.metrics import DraCollector
from automator.dra.model import KINDS, DeviceId, DeviceReport, Finding, Report
from automator.dra.report import (
    CAPACITY_METRIC,
    CONSUMED_METRIC,
    FINDINGS_METRIC,
    MAX_EVENT_MESSAGE,
    REASONS,
    events,
    number,
    samples,
    to_json,
)

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "deploy" / "demo" / "dra-cluster.yaml"
DEMO_USAGE = REPO / "deploy" / "demo" / "dra-usage.yaml"
NOW = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
DRIVER = "hami-core-gpu.project-hami.io"


def demo_report() -> Report:
    return check(load_cluster_file(DEMO), load_usage_file(DEMO_USAGE))


def test_samples_carry_capacity_consumed_and_every_kind() -> None:
    got = {(s.name, s.labels): s.value for s in samples(demo_report())}
    gpu0 = (
        ("node", "demo-dra-node-1"),
        ("driver", DRIVER),
        ("pool", "demo-dra-node-1"),
        ("device", "hami-gpu-0"),
    )
    assert got[(CAPACITY_METRIC, (*gpu0, ("capacity", "memory")))] == 80 * 2**30
    assert got[(CONSUMED_METRIC, (*gpu0, ("capacity", "memory")))] == (16000 + 8000) * 2**20
    assert got[(CAPACITY_METRIC, (*gpu0, ("capacity", "cores")))] == 100
    assert got[(CONSUMED_METRIC, (*gpu0, ("capacity", "cores")))] == 60
    findings = {
        dict(labels)["kind"]: value for (name, labels), value in got.items() if name == FINDINGS_METRIC
    }
    assert findings == {kind: (1.0 if kind == "usage-over-claim" else 0.0) for kind in KINDS}


def test_collector_exposes_the_latest_report_and_nothing_before_the_first() -> None:
    current: list[Report | None] = [None]
    registry = CollectorRegistry()
    registry.register(DraCollector(lambda: current[0]))
    assert generate_latest(registry) == b""
    current[0] = demo_report()
    labels = {"node": "demo-dra-node-1", "driver": DRIVER, "pool": "demo-dra-node-1", "device": "hami-gpu-1"}
    assert registry.get_sample_value(CAPACITY_METRIC, {**labels, "capacity": "cores"}) == 100
    assert registry.get_sample_value(CONSUMED_METRIC, {**labels, "capacity": "memory"}) == 40 * 2**30
    assert registry.get_sample_value(FINDINGS_METRIC, {"kind": "usage-over-claim"}) == 1
    assert registry.get_sample_value(FINDINGS_METRIC, {"kind": "overcommitted"}) == 0
    current[0] = Report([], [])  # a later check with nothing: device series go, findings drop to 0
    assert registry.get_sample_value(CAPACITY_METRIC, {**labels, "capacity": "cores"}) is None
    assert registry.get_sample_value(FINDINGS_METRIC, {"kind": "usage-over-claim"}) == 0


def test_a_device_without_node_gets_an_empty_node_label() -> None:
    report = Report([], [DeviceReport(None, DeviceId("d", "p", "x"), {"m": Decimal(1)}, {"m": Decimal(0)})])
    (capacity, consumed, *_) = samples(report)
    assert dict(capacity.labels)["node"] == "" and consumed.value == 0


def _finding(kind: str, **fields: str | None) -> Finding:
    values: dict[str, str | None] = {"node": None, "device": None, "claim": None, "pod": None, "message": "m"}
    values.update(fields)
    return Finding(
        kind, values["node"], values["device"], values["claim"], values["pod"], str(values["message"])
    )


def test_events_go_to_the_claim_else_the_node_else_nowhere() -> None:
    report = Report(
        [
            _finding("usage-over-claim", node="n1", claim="ml/a-gpu", pod="ml/a", message="over"),
            _finding("mixed-mode", node="n1", message="both"),
            _finding("unparsable", message="nameless"),
        ],
        [],
    )
    on_claim, on_node = events(report, NOW, instance="automator-0")
    assert on_claim["involvedObject"] == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "namespace": "ml",
        "name": "a-gpu",
    }
    assert on_claim["metadata"]["namespace"] == "ml"
    assert on_claim["metadata"]["name"].startswith("a-gpu.")
    assert (on_claim["type"], on_claim["reason"], on_claim["message"]) == (
        "Warning",
        "DraUsageOverClaim",
        "over",
    )
    assert on_claim["firstTimestamp"] == on_claim["lastTimestamp"] == "2026-03-01T12:00:00Z"
    assert on_claim["reportingInstance"] == "automator-0"
    assert on_node["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert on_node["metadata"]["namespace"] == "default"
    assert on_node["reason"] == "DraMixedMode"


def test_event_names_are_stable_per_finding_and_differ_between_findings() -> None:
    a = _finding("overcommitted", node="n1", message="memory over")
    b = _finding("overcommitted", node="n1", message="cores over")
    first = events(Report([a, b], []), NOW)
    again = events(Report([a, b], []), datetime(2026, 3, 2, tzinfo=UTC))
    assert [e["metadata"]["name"] for e in first] == [e["metadata"]["name"] for e in again]
    assert first[0]["metadata"]["name"] != first[1]["metadata"]["name"]


def test_event_bodies_are_valid_core_v1_events_and_messages_are_bounded() -> None:
    report = Report([_finding("orphaned-claim", claim="ml/c", message="x" * 5000)], [])
    (body,) = events(report, NOW)
    assert len(body["message"]) == MAX_EVENT_MESSAGE
    api = client.ApiClient()
    event = api._ApiClient__deserialize(body, "CoreV1Event")  # type: ignore[attr-defined]
    assert event.involved_object.kind == "ResourceClaim"
    assert event.reason == "DraOrphanedClaim"
    assert event.count == 1
    assert event.source.component == "gpu-steward-automator"
    assert api.sanitize_for_serialization(event)["involvedObject"] == body["involvedObject"]


def test_every_kind_has_a_camel_case_reason() -> None:
    assert set(REASONS) == set(KINDS)
    assert REASONS["shared-without-multiple-allocations"] == "DraSharedWithoutMultipleAllocations"
    for reason in REASONS.values():
        assert reason.isalnum() and reason[0].isupper()


def test_json_numbers_are_exact() -> None:
    assert number(Decimal(85899345920)) == 85899345920
    assert isinstance(number(Decimal("100")), int)
    assert number(Decimal("0.5")) == 0.5
    doc = to_json(
        Report([], [DeviceReport("n", DeviceId("d", "p", "x"), {"m": Decimal("1.5")}, {"m": Decimal(0)})])
    )
    assert doc["devices"] == [{"node": "n", "device": "d/p/x", "capacity": {"m": 1.5}, "consumed": {"m": 0}}]
