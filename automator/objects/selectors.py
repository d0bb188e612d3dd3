"""Label and node selector requirements as the API server matches them (metav1.LabelSelector,
NodeSelectorRequirement). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _int_label(value: Any) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def requirement_matches(op: Any, present: bool, value: Any, values: Sequence[Any]) -> bool:
    """One selector requirement on a label (or field) that is `present` with `value`."""
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        left, right = _int_label(value), _int_label(values[0])
        if left is None or right is None:
            return False
        return left > right if op == "Gt" else left < right
    return False  # unknown operator: does not match (the API server would have rejected it)


LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector_matches(selector: Mapping[str, Any] | None, pod_labels: Mapping[str, Any]) -> bool:
    """metav1.LabelSelector: matchLabels AND matchExpressions. A null selector matches nothing (policy/v1),
    an empty one everything. An unknown operator met raises ValueError: the planner's PdbIndex then treats
    the PDB as protecting, since a PDB wrongly read as not selecting the pod would be unsafe."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if pod_labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key"), expr.get("operator")
        if op not in LABEL_SELECTOR_OPERATORS:  # Gt/Lt are node-selector only
            raise ValueError(f"spec.selector.matchExpressions: unknown operator {op!r}")
        if not requirement_matches(op, key in pod_labels, pod_labels.get(key), expr.get("values") or []):
            return False
    return True
