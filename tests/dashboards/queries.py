"""The committed dashboards' queries, with template variables substituted as Grafana would."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
JSON_DIR = REPO / "dashboards" / "json"

# Grafana's built-in interval variables, as it would set them for a 1 s scrape interval.
BUILTINS = {"__rate_interval": "10s", "__range": "2m", "__range_s": "120"}
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$", re.S)


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref: str
    expr: str  # variables substituted
    instant: bool


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(JSON_DIR.glob("*.json"))}


def panels(dash: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that shows data (row headers skipped, collapsed rows opened)."""
    for panel in dash["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def variable_values(dash: Mapping[str, Any]) -> dict[str, str]:
    """Each query variable at its default, All: its allValue (a regex), as Grafana sends it."""
    values = dict(BUILTINS)
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            assert var["includeAll"], f"{var['name']}: a variable without All needs a test value"
            values[var["name"]] = var["allValue"]
    return values


def substitute(text: str, values: Mapping[str, str]) -> str:
    """Replace $name and ${name}, longest names first; fail on a variable nobody defines."""
    for name in sorted(values, key=len, reverse=True):
        text = text.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    assert "$" not in text, f"unsubstituted variable in {text!r}"
    return text


def panel_queries() -> list[PanelQuery]:
    out = []
    for uid, dash in dashboards().items():
        values = variable_values(dash)
        for panel in panels(dash):
            for target in panel["targets"]:
                out.append(
                    PanelQuery(
                        uid,
                        panel["title"],
                        target["refId"],
                        substitute(target["expr"], values),
                        target["instant"],
                    )
                )
    return out


def variable_queries() -> list[tuple[str, str, str, str]]:
    """(dashboard, variable, selector, label) of every label_values variable, selector substituted."""
    out = []
    for uid, dash in dashboards().items():
        values = variable_values(dash)
        for var in dash["templating"]["list"]:
            if var["type"] != "query":
                continue
            match = LABEL_VALUES.match(var["query"])
            assert match, f"{uid}: variable {var['name']}: not a label_values() query: {var['query']!r}"
            out.append((uid, var["name"], substitute(match["selector"], values), match["label"]))
    return out
