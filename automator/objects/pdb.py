"""The PodDisruptionBudget record: its namespace and name, its label selector as given (read by the
planner's selector matching, which names a malformed one), and the disruptions it allows now. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec


class PodDisruptionBudget(msgspec.Struct, frozen=True):
    namespace: str
    name: str
    selector: Any = None  # spec.selector
    # status.disruptionsAllowed; 0 without a status yet (the controller has not observed it: the Eviction
    # API would refuse) or when it is not an integer
    allowed: int = 0


def pdb_record(obj: Mapping[str, Any]) -> PodDisruptionBudget:
    """The record of one PodDisruptionBudget object (as the API and kubectl give it)."""
    meta, spec, status = (_map(obj.get(key)) for key in ("metadata", "spec", "status"))
    allowed = status.get("disruptionsAllowed")
    return PodDisruptionBudget(
        str(meta.get("namespace") or "default"),
        str(meta.get("name")),
        spec.get("selector"),
        allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0,
    )


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def pdb_records(pdbs: Iterable[PodDisruptionBudget | Mapping[str, Any]]) -> list[PodDisruptionBudget]:
    """Records of PDBs given as records or as objects."""
    return [p if isinstance(p, PodDisruptionBudget) else pdb_record(p) for p in pdbs]
