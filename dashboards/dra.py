"""DRA capacity: what DRA promised on each device against what it has, the check's findings, and whether the
check is working (docs/dra.md). Reads only the series of the automator's DRA check."""

from __future__ import annotations

from typing import Any, Final

from dashboards import contracts as c
from dashboards import house as h
from dashboards import panels as p

UID: Final = "gpu-steward-dra"

# One series per device and capacity even when two replicas export the same report.
_DEVICE = "node, driver, pool, device"
# A share of a capacity committed: above 100 % (beyond rounding) the device is overcommitted.
_COMMITTED_STEPS = h.steps(h.BUSY, (1.0001, h.BAD))


def _capacity(name: str) -> str:
    return f'max by ({_DEVICE}) ({c.DRA_CAPACITY}{{capacity="{name}"}})'


def _consumed(name: str) -> str:
    return f'max by ({_DEVICE}) ({c.DRA_CONSUMED}{{capacity="{name}"}})'


def _committed(name: str) -> str:
    """Share of a capacity the claims consumed, per device (above 1: overcommitted)."""
    return f"{_consumed(name)} / ({_capacity(name)} > 0)"


def build() -> Any:
    return h.dashboard(
        UID,
        "GPU Steward / DRA capacity",
        "What Dynamic Resource Allocation promised on each GPU against what it has and what containers use: "
        "memory committed per device, findings by kind, and the health of the automator's DRA check.",
        [_summary, _capacity_per_device, _findings_and_the_check],
    )


def _findings(kinds: tuple[str, ...]) -> str:
    """Findings of these kinds in the last report (max by kind: replicas export the same report)."""
    return f'sum(max by (kind) ({c.DRA_FINDINGS}{{kind=~"{"|".join(kinds)}"}}))'


def _summary(lay: h.Layout) -> None:
    lay.stats(
        p.problem_stat(
            "Critical findings",
            "Broken promises now: overcommitted devices, devices shared without allowMultipleAllocations, "
            "containers using more GPU memory than their claim. No data: no fresh DRA check.",
            _findings(c.DRA_CRITICAL_KINDS),
            decimals=0,
        ),
        p.stat(
            "Warnings",
            "Claims held wrongly or unreadable objects: invalid consumption, unknown devices, orphaned "
            "claims, mixed mode, unparsable fields.",
            _findings(c.DRA_WARNING_KINDS),
            thresholds=h.steps(h.BUSY, (1, h.IDLE)),
            decimals=0,
        ),
        p.stat(
            "DRA devices",
            "Devices the current ResourceSlices publish with a memory capacity.",
            f"count({_capacity(c.DRA_MEMORY)})",
            colour=h.ALLOCATED,
            decimals=0,
        ),
        p.stat(
            "Memory committed",
            "Memory the claims consumed over the memory the DRA devices publish, all devices.",
            f"sum({_consumed(c.DRA_MEMORY)}) / sum({_capacity(c.DRA_MEMORY)})",
            unit=h.RATIO,
            thresholds=_COMMITTED_STEPS,
        ),
        p.stat(
            "Usage compared",
            "1: the last check compared measured GPU memory with the claims; 0: Prometheus could not be "
            "read and usage-over-claim is unknown.",
            f"max({c.DRA_USAGE_CHECKED})",
            thresholds=h.steps(h.BAD, (1, h.BUSY)),
            decimals=0,
        ),
        p.since_stat(
            "Since last good check",
            "Time since a DRA check last read the cluster. Checks run every --dra-check-interval seconds; "
            "after 3 intervals the report is no longer exported.",
            f"time() - max({c.DRA_LAST_SUCCESS} > 0)",
        ),
    )


def _capacity_per_device(lay: h.Layout) -> None:
    lay.row("Capacity promised per device")
    columns = [
        ("capacity", p.Query(_capacity(c.DRA_MEMORY)), h.BYTES),
        ("consumed", p.Query(_consumed(c.DRA_MEMORY)), h.BYTES),
        ("committed", p.Query(_committed(c.DRA_MEMORY)), h.RATIO),
    ]
    lay.line(
        12,
        p.series(
            "Memory committed by device",
            "consumedCapacity.memory of the claims allocated each device over its memory capacity, the ten "
            "highest. Above 100 % the device is overcommitted.",
            f"topk(10, {_committed(c.DRA_MEMORY)})",
            "{{node}} {{device}}",
            unit=h.RATIO,
            thresholds=_COMMITTED_STEPS,
            threshold_line=True,
        ),
        p.table(
            "Devices",
            "Every DRA device with a memory capacity: what it publishes and what its claims consumed.",
            columns,
            sort_by="committed",
            thresholds={"committed": _COMMITTED_STEPS},
        ),
    )


def _findings_and_the_check(lay: h.Layout) -> None:
    lay.row("Findings and the check")
    check = [
        p.Query(p.quantile(0.95, c.DRA_CHECK_DURATION_BUCKET), "check p95 (s)"),
        p.Query(p.increase_by(c.DRA_EVENTS, "result"), "Events {{result}}"),
    ]
    lay.line(
        8,
        p.series(
            "Findings by kind",
            "Findings of the last check by kind (docs/dra.md says what each means and what to do). Gaps: no "
            "fresh check; usage-over-claim is absent while usage cannot be read.",
            f"max by (kind) ({c.DRA_FINDINGS}) > 0",
            "{{kind}}",
            colours=dict.fromkeys(c.DRA_CRITICAL_KINDS, h.BAD),
        ),
        p.counts_by(
            "Checks by result",
            "DRA checks by result: ok, dra_unavailable (the cluster does not serve resource.k8s.io/v1), "
            "kubernetes_error, error. A failed check makes no report.",
            c.DRA_CHECKS,
            "result",
            {"ok": h.BUSY, "kubernetes_error": h.BAD, "error": h.BAD},
        ),
        p.timeseries(
            "Check duration and Events",
            "95th percentile of a check (lists, usage query, checks, Events), and Events written on claims "
            "and nodes (once per finding, not once per check).",
            check,
        ),
    )
