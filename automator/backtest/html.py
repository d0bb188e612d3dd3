"""Placeholder for the HTML report (its own module replaces it): the report as JSON in a page."""

from __future__ import annotations

import html
import json
from typing import Any


def render_html(report: dict[str, Any], timelines: dict[str, list[tuple[float, int, int, int]]]) -> str:
    body = html.escape(json.dumps(report, indent=2))
    head = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>backtest</title></head>"
    return f"{head}<body><pre>{body}</pre></body></html>\n"
