"""docs/dashboards.md describes every dashboard and panel there is, with the numbers the code uses."""

from __future__ import annotations

from dashboards import contracts
from tests.dashboards.queries import REPO, dashboards, panels

DOC = (REPO / "docs" / "dashboards.md").read_text()


def test_every_dashboard_and_panel_is_documented() -> None:
    missing = []
    for uid, dash in dashboards().items():
        for text in (uid, dash["title"], *(p["title"] for p in panels(dash))):
            if text not in DOC:
                missing.append(f"{uid}: {text}")
    assert not missing, f"not in docs/dashboards.md: {missing}"


def test_documented_numbers_are_the_contracts() -> None:
    assert f"idle threshold ({contracts.IDLE_THRESHOLD:.0%}".replace("%", " %") in DOC
    assert f"freshness limit ({contracts.FRESHNESS_SECONDS} s)" in DOC
    assert f"minimum coverage ({contracts.MIN_COVERAGE:.0%}".replace("%", " %") in DOC


def test_readme_links_the_page() -> None:
    assert "(docs/dashboards.md)" in (REPO / "README.md").read_text()
