"""Panels and the query shapes they share: what a stat, a time series and a table look like, once.

Every panel reads from the `$datasource` variable and follows the house defaults (dashboards/house.py);
the dashboard modules pick a shape and say what it shows.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grafanalib import core as g

from dashboards.house import (
    COUNT,
    DATASOURCE,
    GPU_HOURS,
    GPUS,
    IDLE,
    PLAIN,
    RATE_INTERVAL,
    SECONDS,
    SINCE_SUCCESS_STEPS,
    ZERO_IS_GOOD,
    Steps,
    colour_override,
    fixed,
    unit_override,
)

# --- queries ---


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


def _targets(queries: Sequence[Query], table: bool = False) -> list[Any]:
    return [
        g.Target(
            expr=q.expr,
            legendFormat=q.legend,
            refId=string.ascii_uppercase[i],
            instant=q.instant or table,
            format=g.TABLE_TARGET_FORMAT if table else g.TIME_SERIES_TARGET_FORMAT,
            datasource=DATASOURCE,
        )
        for i, q in enumerate(queries)
    ]


# --- query shapes several dashboards use ---


def increase_by(counter: str, by: str, selector: str = "") -> str:
    """A counter's increase per Grafana step, summed by one label (or several: "node, field")."""
    return f"sum by ({by}) (increase({counter}{selector}[{RATE_INTERVAL}]))"


def rate_by(counter: str, by: str = "") -> str:
    """A counter's per-second rate, summed (by the `by` labels, if any)."""
    total = f"sum by ({by}) " if by else "sum"
    return f"{total}(rate({counter}[{RATE_INTERVAL}]))"


def quantile(q: float, bucket: str) -> str:
    """A histogram's q-quantile per Grafana step, over every replica."""
    return f"histogram_quantile({q}, sum by (le) (rate({bucket}[{RATE_INTERVAL}])))"


# --- panels ---


def stat(
    title: str,
    description: str,
    expr: str,
    *,
    unit: str = COUNT,
    thresholds: Steps | None = None,
    colour: str | None = None,
    decimals: int | None = None,
    legend: str = "",
    text_mode: str | None = None,
) -> Any:
    """One number now (instant query). A missing value shows "no data", never 0."""
    return g.Stat(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets([Query(expr, legend, instant=True)]),
        format=unit,
        decimals=decimals,
        thresholds=thresholds or PLAIN,
        color=fixed(colour) if colour else {"mode": "thresholds"},
        colorMode="value",
        graphMode="none",
        reduceCalc="lastNotNull",
        noValue="no data",
        textMode=text_mode or ("value_and_name" if legend else "auto"),
    )


def timeseries(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    unit: str = COUNT,
    thresholds: Steps | None = None,
    threshold_line: bool = False,
    max_value: int | None = None,
    stacked: bool = False,
    bars: bool = False,
    colours: Mapping[str, str] | None = None,
) -> Any:
    """Series over the dashboard's time range. Gaps stay gaps (unknown is not drawn as 0)."""
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets(queries),
        unit=unit,
        thresholds=thresholds or PLAIN,
        thresholdsStyleMode="line" if threshold_line else "off",
        valueMin=0,
        valueMax=max_value,
        stacking={"mode": "normal", "group": "A"} if stacked else {"mode": "none"},
        drawStyle="bars" if bars else "line",
        fillOpacity=60 if bars else (20 if stacked else 0),
        spanNulls=False,
        showPoints="never",
        legendDisplayMode="table",
        legendPlacement="right" if len(queries) == 1 else "bottom",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
        overrides=[colour_override(n, c) for n, c in (colours or {}).items()],
    )


def table(
    title: str,
    description: str,
    columns: Sequence[tuple[str, Query, str]],
    *,
    sort_by: str | None = None,
    thresholds: Mapping[str, Steps] | None = None,
) -> Any:
    """Instant queries joined on their labels (Grafana's merge), one value column per query.

    `columns`: (column title, query, unit). Time is hidden; the label columns come first.
    """
    queries = [q for _, q, _ in columns]
    rename = {f"Value #{string.ascii_uppercase[i]}": name for i, (name, _, _) in enumerate(columns)}
    overrides = [unit_override(name, unit) for name, _, unit in columns]
    for name, colour_steps in (thresholds or {}).items():
        overrides.append(
            {
                "matcher": {"id": "byName", "options": name},
                "properties": [
                    {"id": "thresholds", "value": {"mode": "absolute", "steps": colour_steps}},
                    {"id": "custom.displayMode", "value": "color-text"},
                ],
            }
        )
    return g.Table(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets(queries, table=True),
        transformations=[
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True}, "renameByName": rename}},
        ],
        overrides=overrides,
        thresholds=PLAIN,
        filterable=True,
        sortBy=[g.TableSortByField(displayName=sort_by, desc=True)] if sort_by else [],
    )


# --- panel shapes several dashboards use ---


def series(title: str, description: str, expr: str, legend: str = "", **options: Any) -> Any:
    """A time series panel of one query (`options` as `timeseries`)."""
    return timeseries(title, description, [Query(expr, legend)], **options)


def counts_by(
    title: str, description: str, counter: str, label: str, colours: Mapping[str, str] | None = None
) -> Any:
    """Bars of a counter's increase per Grafana step, one series per value of `label`."""
    legend = "{{" + label + "}}"
    return timeseries(
        title, description, [Query(increase_by(counter, label), legend)], bars=True, colours=colours
    )


def latency(title: str, description: str, bucket: str) -> Any:
    """Median and 95th percentile of a duration histogram, in seconds."""
    quantiles = [Query(quantile(0.5, bucket), "p50"), Query(quantile(0.95, bucket), "p95")]
    return timeseries(title, description, quantiles, unit=SECONDS)


def gpus_stat(title: str, description: str, expr: str, colour: str) -> Any:
    """A number of GPUs now, in the colour of what they are (allocated, idle...)."""
    return stat(title, description, expr, unit=GPUS, colour=colour)


def problem_stat(title: str, description: str, expr: str, **options: Any) -> Any:
    """A count where anything above zero is worth a look (`options` as `stat`)."""
    return stat(title, description, expr, thresholds=ZERO_IS_GOOD, **options)


def since_stat(title: str, description: str, expr: str) -> Any:
    """Seconds since a periodic job last succeeded (SINCE_SUCCESS_STEPS)."""
    return stat(title, description, expr, unit=SECONDS, thresholds=SINCE_SUCCESS_STEPS)


def idle_gpu_hours_stat(description: str, expr: str) -> Any:
    """The GPU-hours held idle in the trailing 24 hours (fleet and namespace dashboards)."""
    return stat("Idle GPU-hours, last 24 h", description, expr, unit=GPU_HOURS, colour=IDLE, decimals=1)
