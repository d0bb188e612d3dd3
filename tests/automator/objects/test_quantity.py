"""The project's quantity parser against the Kubernetes client's, which the pure modules no longer import."""

from __future__ import annotations

from decimal import Decimal

import pytest
from kubernetes.utils.quantity import parse_quantity as client_parse_quantity

from steward_common.quantity import parse_quantity

AGREED = [
    "0", "1", "+1", "-1", "500m", "0.5", ".5", "1.", "100n", "3u", "2k", "1M", "80G", "2T", "1P", "1E",
    "1Ki", "512Mi", "80Gi", "1.5Gi", "1Ti", "2Pi", "1Ei", "1e3", "1E3", "2e-3", "1.5e+2", "0.000001",
    "123456789", "12345678901234567890", "250m", "-250m", "0Gi", "10.25k",
]  # fmt: skip


@pytest.mark.parametrize("text", AGREED)
def test_agrees_with_the_client_on_valid_quantities(text: str) -> None:
    assert parse_quantity(text) == client_parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "value"), [("500m", Decimal("0.5")), ("80Gi", Decimal(80 * 2**30)), ("1e3", Decimal(1000))]
)
def test_exact_values(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


# The client (a thin wrapper over Decimal) accepts these; the API server does not, and neither do we.
@pytest.mark.parametrize("text", ["NaN", "Infinity", "inf", "1K", " 1", "1 ", "1_000", "0x10"])
def test_refuses_what_the_client_lets_through(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["", "m", "Gi", "1ki", "1mi", "1Gb", "1.2.3", "--1", "1e", "1e1.5", "e3"])
def test_refuses_what_neither_accepts(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)
    with pytest.raises(ValueError):
        client_parse_quantity(text)


def test_refuses_huge_inputs_and_exponents() -> None:
    with pytest.raises(ValueError, match="longer than"):
        parse_quantity("1" * 100)
    with pytest.raises(ValueError, match="exponent"):
        parse_quantity("1e999999")
