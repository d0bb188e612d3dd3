"""Amounts as findings write them, and what a capacity's requestPolicy allows (automator/dra/checks.py's
invalid-consumption check). Pure."""

from __future__ import annotations

from decimal import Decimal

from automator.dra.model import Capacity

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def fmt(amount: Decimal) -> str:
    """An exact amount, with its binary-suffix form when it has one: 17179869184 (16Gi)."""
    text = format(amount.normalize(), "f") if amount != amount.to_integral_value() else str(int(amount))
    if amount == amount.to_integral_value() and amount > 0:
        for suffix, size in _BINARY:
            if int(amount) % size == 0:
                return f"{text} ({int(amount) // size}{suffix})"
    return text


def _policy_problem(amount: Decimal, cap: Capacity) -> str | None:
    """Why the capacity's requestPolicy does not allow `amount`, or None when it does."""
    if amount < 0:
        return "is negative"
    if cap.valid_values is not None:
        if amount not in cap.valid_values:
            return f"is not one of the validValues {', '.join(fmt(v) for v in cap.valid_values)}"
        return None
    if cap.range_min is None:
        return None
    if amount < cap.range_min:
        return f"is below the validRange min {fmt(cap.range_min)}"
    if cap.range_max is not None and amount > cap.range_max:
        return f"is above the validRange max {fmt(cap.range_max)}"
    if cap.range_step is not None and (amount - cap.range_min) % cap.range_step != 0:
        return f"is not min {fmt(cap.range_min)} + n * step {fmt(cap.range_step)}"
    return None


def consumption_problems(
    consumed: dict[str, Decimal], capacity: dict[str, Capacity]
) -> list[tuple[str, Decimal, str]]:
    """(capacity name, amount, why) for each consumed amount the device's capacities do not allow."""
    problems = []
    for name, amount in consumed.items():
        cap = capacity.get(name)
        if cap is None:
            problems.append((name, amount, "names a capacity the device does not publish"))
        elif cap.policy_known:  # else the policy did not parse: reported as unparsable already
            problem = _policy_problem(amount, cap)
            if problem:
                problems.append((name, amount, problem))
    return problems
