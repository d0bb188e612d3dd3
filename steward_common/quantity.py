"""Kubernetes resource quantities ("500m", "80Gi", "1e3"), parsed by the API's own grammar.

The project's pure modules (planner, DRA checks, the exporter's scenarios) parse quantities here instead of
importing the Kubernetes client for one function. Grammar (k8s.io/apimachinery resource.Quantity):

    quantity  ::= sign? number suffix
    number    ::= digits | digits "." digits? | "." digits
    suffix    ::= "" | binarySI (Ki Mi Gi Ti Pi Ei) | decimalSI (n u m k M G T P E) | ("e"|"E") sign? digits

tests/automator/objects/test_quantity.py compares it with the client's `parse_quantity` on a table of
cases. Unlike the client, it refuses what the API server refuses ("NaN", "Infinity", "1K", " 1", "1ki").
"""

from __future__ import annotations

import re
from decimal import Decimal
from functools import lru_cache

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<exponent>[eE][+-]?[0-9]+)|(?P<suffix>[KMGTPE]i|[numkMGTPE]?))"
)
# A longer literal is not a quantity anyone writes, and Decimal arithmetic on it is unbounded work.
MAX_LENGTH = 64


# The project's one memo of parsed quantities: a cluster repeats a few literals ("500m", "8Gi", "80Gi") on
# thousands of pods, devices and claims, and parsing them is much of decoding a pod. Decimals are immutable,
# so the values are shared; a text that fails is not kept (lru_cache keeps no exception). Bounded.
@lru_cache(maxsize=65_536)
def parse_quantity(text: str) -> Decimal:
    """The exact value of a quantity string; ValueError (with the text) when it is not one."""
    if len(text) > MAX_LENGTH:
        raise ValueError(f"{text[:MAX_LENGTH]!r}... is longer than {MAX_LENGTH} characters")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    number = Decimal(match["number"])
    if match["exponent"] is not None:
        exponent = int(match["exponent"][1:])
        if abs(exponent) > 60:
            raise ValueError(f"{text!r}: exponent out of range")
        return number.scaleb(exponent)
    suffix = match["suffix"]
    if suffix in _BINARY:
        return number * (Decimal(1024) ** _BINARY[suffix])
    return number.scaleb(_DECIMAL[suffix])
