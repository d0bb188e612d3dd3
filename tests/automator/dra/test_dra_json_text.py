"""`dra-check --output json`'s text (automator/dra/report.py json_text): msgspec writes it when that gives
exactly `json.dumps(to_json(report), indent=2)`, and json.dumps writes it otherwise."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from automator.dra.checks import check
from automator.dra.load import load_cluster_file, load_usage_file
from automator.dra.model import DeviceId, DeviceReport, Finding, Report
from automator.dra.report import json_text, to_json

DEMO = Path(__file__).resolve().parents[3] / "deploy" / "demo"
DEVICE = DeviceId("gpu.example.com", "n1", "gpu-0")


def report(message: str, capacity: dict[str, Decimal] | None = None) -> Report:
    finding = Finding("unparsable", "n1", str(DEVICE), "ml/a", None, message)
    amounts = capacity if capacity is not None else {"memory": Decimal(2**34), "cores": Decimal(100)}
    device = DeviceReport("n1", DEVICE, amounts, {"memory": Decimal(0)})
    return Report([finding, finding], [device, DeviceReport(None, DEVICE, {}, {})])


def test_the_demo_report() -> None:
    demo = check(load_cluster_file(DEMO / "dra-cluster.yaml"), load_usage_file(DEMO / "dra-usage.yaml"))
    assert demo.findings and json_text(demo) == json.dumps(to_json(demo), indent=2)


@pytest.mark.parametrize(
    ("message", "capacity"),
    [
        ('plain "quoted" \\ back / slash', None),
        ("controls \x00 \x01 \x1f \b \f \n \r \t", None),
        ("DEL \x7f", None),  # json.dumps escapes it, msgspec does not
        ("non-ASCII é 日本 \u2028 \ud83d\ude00 😀", None),
        ("float amounts", {"memory": Decimal("1.5"), "tiny": Decimal("1E-7"), "big": Decimal("1E+17")}),
        ("2^63", {"memory": Decimal(2**63)}),
        ("beyond 64 bits", {"memory": Decimal(2**70)}),
        ("negative", {"memory": Decimal(-(2**63))}),
    ],
)
def test_same_text_as_json_dumps(message: str, capacity: dict[str, Decimal] | None) -> None:
    got = report(message, capacity)
    assert json_text(got) == json.dumps(to_json(got), indent=2)


def test_an_empty_report() -> None:
    empty = Report([], [])
    assert (
        json_text(empty) == json.dumps(to_json(empty), indent=2) == '{\n  "findings": [],\n  "devices": []\n}'
    )
