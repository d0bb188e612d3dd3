"""House defaults shared by every dashboard: data source variable, units, thresholds, colours, layout.

The dashboard modules only say what to show; how it looks is decided here and in dashboards/panels.py
(the panel shapes), once. Panels take their data source from the `$datasource` variable (never a fixed
name), so one import works with any Prometheus.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from dashboards import contracts

TAG: Final = "gpu-steward"
DATASOURCE_VARIABLE: Final = "datasource"
DATASOURCE: Final = {"type": "prometheus", "uid": "${" + DATASOURCE_VARIABLE + "}"}
# Grafana's own interval variables; the query test substitutes them like Grafana does.
RATE_INTERVAL: Final = "$__rate_interval"
RANGE: Final = "$__range"
RANGE_S: Final = "$__range_s"

# --- units (Grafana unit ids) ---
RATIO: Final = "percentunit"
BYTES: Final = "bytes"
SECONDS: Final = "s"
CELSIUS: Final = "celsius"  # grafanalib 0.7.1 misspells its constant: use the id
WATTS: Final = "watt"
COUNT: Final = "short"
GPUS: Final = "suffix: GPUs"
GPU_HOURS: Final = "suffix: GPU-h"

# --- colours: one meaning each, everywhere ---
BUSY: Final = "green"
IDLE: Final = "orange"
UNKNOWN: Final = "purple"
ALLOCATED: Final = "blue"
BAD: Final = "red"
NEUTRAL: Final = "text"

Steps = list[dict[str, Any]]


def steps(base: str, *above: tuple[float, str]) -> Steps:
    """Threshold steps: `base` colour, then (value, colour) pairs in increasing order."""
    return [{"color": base, "value": None}, *({"color": c, "value": v} for v, c in above)]


# Activity at or below the idle threshold reads idle (the rules' threshold, not a copy).
ACTIVITY_STEPS: Final = steps(IDLE, (contracts.IDLE_THRESHOLD, BUSY))
# Coverage below the automator's minimum: too little data to call a pod idle.
COVERAGE_STEPS: Final = steps(BAD, (contracts.MIN_COVERAGE, BUSY))
# A snapshot as old as the rules' freshness limit no longer counts.
SNAPSHOT_AGE_STEPS: Final = steps(BUSY, (contracts.FRESHNESS_SECONDS, BAD))
# Anything above zero is worth a look (errors, idle GPUs, unknown GPUs, unresolved preemptors).
ZERO_IS_GOOD: Final = steps(BUSY, (1, BAD))
# Time since a periodic job (a reclaim pass, a DRA check) last succeeded: late from 5 min, stale from 15.
SINCE_SUCCESS_STEPS: Final = steps(BUSY, (300, IDLE), (900, BAD))
PLAIN: Final = steps(NEUTRAL)


def fixed(colour: str) -> dict[str, str]:
    return {"mode": "fixed", "fixedColor": colour}


def colour_override(series_name: str, colour: str) -> dict[str, Any]:
    """Colour one series (by its display name) in a time series panel."""
    return {
        "matcher": {"id": "byName", "options": series_name},
        "properties": [{"id": "color", "value": fixed(colour)}],
    }


def unit_override(field_name: str, unit: str) -> dict[str, Any]:
    """Set the unit of one table column."""
    return {"matcher": {"id": "byName", "options": field_name}, "properties": [{"id": "unit", "value": unit}]}


# --- variables ---


def datasource_variable() -> Any:
    return g.Template(
        name=DATASOURCE_VARIABLE, label="Data source", query="prometheus", type="datasource", default=None
    )


def label_variable(name: str, label: str, metric: str, label_name: str, *, include_all: bool = True) -> Any:
    """A variable listing the values of `label_name` on `metric` (a selector, may use other variables)."""
    return g.Template(
        name=name,
        label=label,
        query=f"label_values({metric}, {label_name})",
        dataSource=DATASOURCE,
        refresh=g.REFRESH_ON_TIME_RANGE_CHANGE,
        includeAll=include_all,
        multi=include_all,
        allValue=".*" if include_all else None,
        default="$__all" if include_all else None,
        sort=g.SORT_ALPHA_ASC,
    )


def regex(variable: str) -> str:
    """The matcher value for a (possibly multi-valued) variable: `label=~"$var"`."""
    return f'"${variable}"'


# --- layout and the dashboard ---


@dataclass
class Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping to a new line when full."""

    panels: list[Any] = field(default_factory=list)
    _x: int = 0
    _y: int = 0
    _line_height: int = 0

    def add(self, panel: Any, w: int, h: int = 8) -> None:
        if not 0 < w <= 24:
            raise ValueError(f"panel {panel.title!r}: width {w} is not in 1-24")
        if self._x + w > 24:
            self._newline()
        self.panels.append(_placed(panel, g.GridPos(h=h, w=w, x=self._x, y=self._y)))
        self._x += w
        self._line_height = max(self._line_height, h)

    def line(self, w: int, *panels: Any, h: int = 8) -> None:
        """Panels of one width, left to right (wrapping to a new line when full)."""
        for panel in panels:
            self.add(panel, w=w, h=h)

    def stats(self, *panels: Any, h: int = 4) -> None:
        """A line of stat panels sharing the full width equally."""
        self._newline()
        for panel in panels:
            self.add(panel, w=24 // len(panels), h=h)

    def row(self, title: str) -> None:
        """A full-width row header starting a new line."""
        self._newline()
        self.panels.append(g.RowPanel(title=title, gridPos=g.GridPos(h=1, w=24, x=0, y=self._y)))
        self._y += 1

    def _newline(self) -> None:
        if self._x:
            self._y += self._line_height
        self._x, self._line_height = 0, 0


def _placed(panel: Any, pos: Any) -> Any:
    panel.gridPos = pos
    return panel


Row = Callable[[Layout], None]


def dashboard(
    uid: str, title: str, description: str, rows: Iterable[Row], variables: Iterable[Any] = ()
) -> Any:
    """The dashboard of these rows, top to bottom: each row function places its panels on the layout."""
    layout = Layout()
    for row in rows:
        row(layout)
    return g.Dashboard(
        uid=uid,
        title=title,
        description=description,
        tags=[TAG],
        timezone="browser",
        refresh="30s",
        time=g.Time("now-6h", "now"),
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        editable=True,
        panels=layout.panels,
        templating=g.Templating(list=[datasource_variable(), *variables]),
        links=[
            {
                "title": "GPU Steward",
                "type": "dashboards",
                "tags": [TAG],
                "asDropdown": True,
                "includeVars": False,
                "keepTime": True,
            }
        ],
    ).auto_panel_ids()


# Grafana 13's dashboard schema version: a dashboard saved at it loads without migrations.
SCHEMA_VERSION: Final = 42
# What grafanalib still writes from Grafana's old models, which the current schema no longer has: the
# pre-grid `rows`, `sharedCrosshair` (now graphTooltip), `style`, `hideControls`; per panel the span/height
# layout and the old table's panel-level color, columns, fontSize and mappings (fieldConfig holds them);
# per variable the tag queries and the interval-only `auto*` keys; the picker's `time_options`.
_LEGACY_ROOT: Final = frozenset({"rows", "sharedCrosshair", "style", "hideControls", "__inputs", "gnetId"})
_LEGACY_PANEL: Final = frozenset(
    {"editable", "error", "height", "minSpan", "span", "color", "columns", "fontSize", "mappings"}
)
_ROW_FIELDS: Final = frozenset(
    {"collapsed", "datasource", "gridPos", "id", "panels", "repeat", "title", "type"}
)
_LEGACY_VARIABLE: Final = frozenset({"tags", "tagsQuery", "tagValuesQuery", "useTags"})
_INTERVAL_ONLY: Final = frozenset({"auto", "auto_count", "auto_min"})


def _without_none(value: Any) -> Any:
    """Unset fields are absent in Grafana's schema, never null; but a threshold's `value` is null for the
    base step (-Infinity), and stays."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None or k == "value"}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _panel(panel: dict[str, Any]) -> dict[str, Any]:
    if panel.get("type") == "row":
        return {k: v for k, v in panel.items() if k in _ROW_FIELDS}
    out = {k: v for k, v in panel.items() if k not in _LEGACY_PANEL}
    # Fields newer than grafanalib, at the values Grafana itself writes for a new panel.
    options = out.setdefault("options", {})
    if out.get("type") == "stat":
        options.setdefault("percentChangeColorMode", "standard")
        options.setdefault("showPercentChange", False)
        options.setdefault("wideLayout", True)
    elif out.get("type") == "timeseries" and "legend" in options:
        options["legend"].setdefault("showLegend", options["legend"].get("displayMode") != "hidden")
    elif out.get("type") == "table":
        options.setdefault("frameIndex", 0)
        custom = out.setdefault("fieldConfig", {}).setdefault("defaults", {}).setdefault("custom", {})
        custom.setdefault("cellOptions", {"type": "auto"})
        custom.setdefault("inspect", False)
    return out


def _variable(variable: dict[str, Any]) -> dict[str, Any]:
    legacy = _LEGACY_VARIABLE | (_INTERVAL_ONLY if variable.get("type") != "interval" else frozenset())
    out = {k: v for k, v in variable.items() if k not in legacy}
    if "current" in out:
        # Nothing chosen yet is text and value "" (Grafana then picks the default); no tags any more.
        current = {k: v for k, v in out["current"].items() if k != "tags" and v is not None}
        out["current"] = {"text": "", "value": "", **current}
    return out


def current_schema(data: dict[str, Any]) -> dict[str, Any]:
    """grafanalib's dashboard JSON with only the fields of Grafana's current schema, at its version."""
    out = {k: v for k, v in _without_none(data).items() if k not in _LEGACY_ROOT}
    out["schemaVersion"] = SCHEMA_VERSION
    out["panels"] = [_panel(p) for p in out.get("panels", [])]
    if "templating" in out:
        out["templating"] = {"list": [_variable(v) for v in out["templating"].get("list", [])]}
    if "timepicker" in out:
        out["timepicker"] = {k: v for k, v in out["timepicker"].items() if k != "time_options"}
    link_defaults = {"icon": "external link", "targetBlank": False, "tooltip": ""}
    out["links"] = [{**link_defaults, **link} for link in out.get("links", [])]
    return out


def render(dash: Any) -> str:
    """The dashboard's JSON as committed: stable key order, two-space indent, trailing newline."""
    data = current_schema(json.loads(json.dumps(dash.to_json_data(), cls=DashboardEncoder)))
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
