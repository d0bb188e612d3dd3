"""The external scaler's proto against KEDA's own (../shared/reference/schemas/keda/), field by field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
OURS = REPO / "automator/keda/externalscaler/externalscaler.proto"
UPSTREAM = REPO.parent / "shared/reference/schemas/keda/externalscaler.proto"

Shape = tuple[str, dict[str, set[str]], set[str]]


def shape(text: str) -> Shape:
    """(package, {message: {"type name = number"}}, {"rpc Name(In) returns (Out)"}), comments dropped."""
    text = re.sub(r"//[^\n]*", "", text)
    package = re.search(r"\bpackage\s+([\w.]+)\s*;", text)
    messages = {
        name: {" ".join(f.split()) for f in re.findall(r"([\w.]+(?:\s+[\w.]+)+\s*=\s*\d+)\s*;", body)}
        for name, body in re.findall(r"\bmessage\s+(\w+)\s*\{([^{}]*)\}", text)
    }
    rpcs = {" ".join(r.split()) for r in re.findall(r"\brpc\s+[^{;]+", text)}
    return (package.group(1) if package else "", messages, rpcs)


def test_the_proto_matches_kedas_field_by_field() -> None:
    if not UPSTREAM.is_file():
        pytest.skip(f"KEDA's proto not found at {UPSTREAM} (../shared is laid beside the checkout)")
    ours, theirs = shape(OURS.read_text()), shape(UPSTREAM.read_text())
    assert ours[0] == theirs[0]
    assert ours[1].keys() == theirs[1].keys()
    for message, fields in theirs[1].items():
        assert ours[1][message] == fields, message
    assert ours[2] == theirs[2]


def test_the_comparison_sees_a_changed_field() -> None:
    text = OURS.read_text()
    changed = text.replace("= 2;", "= 7;", 1)
    assert shape(changed) != shape(text)
    assert shape(text)[1] and shape(text)[2]
