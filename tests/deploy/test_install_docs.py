"""What the docs say an install does, against what it does: the Debian packages README.md says `make test`
installs are those the Makefile's targets behind `make test` install, and a doc that says an apply creates
the namespace names a kustomization that renders it."""

from __future__ import annotations

import re

from tests.deploy.test_manifests import DEPLOY, render

REPO = DEPLOY.parent


def _targets() -> dict[str, tuple[list[str], str]]:
    """Makefile target -> (prerequisites, recipe)."""
    out: dict[str, tuple[list[str], str]] = {}
    name = ""
    for line in (REPO / "Makefile").read_text().splitlines():
        rule = re.match(r"^([A-Za-z$()._-][^:=\s]*):(?!=)\s*(.*)$", line)
        if rule and not line.startswith("\t"):
            name = rule.group(1)
            out[name] = (rule.group(2).split(), "")
        elif line.startswith("\t") and name:
            prereqs, recipe = out[name]
            out[name] = (prereqs, recipe + line + "\n")
    return out


def apt_packages(target: str) -> set[str]:
    """The Debian packages `make TARGET` may install, through its prerequisites."""
    targets, seen, packages = _targets(), set(), set()
    todo = [target]
    while todo:
        current = todo.pop()
        if current in seen or current not in targets:
            continue
        seen.add(current)
        prereqs, recipe = targets[current]
        todo += prereqs
        for match in re.findall(r"apt-get install ([^>;}]*)", recipe):
            packages |= {w for w in match.split() if not w.startswith("-")}
    return packages


def test_readme_names_every_package_make_test_installs() -> None:
    packages = apt_packages("test")
    assert {"prometheus", "chromium"} <= packages  # the parser found the recipes
    readme = (REPO / "README.md").read_text()
    setup = readme.split("These commands do all set-up", 1)[1].split("\n\n", 1)[0]
    assert [p for p in sorted(packages) if f"`{p}`" not in setup] == []


def test_a_doc_that_says_an_apply_creates_the_namespace_is_right() -> None:
    claims = 0
    for path in [*(REPO / "docs").glob("*.md"), REPO / "README.md"]:
        text = " ".join(path.read_text().split())
        for target in re.findall(r"`kubectl apply -k (deploy/[\w/-]*)` creates (?:it|the namespace)", text):
            kinds = {o["kind"] for o in render(target.removeprefix("deploy/").rstrip("/"))}
            assert "Namespace" in kinds, (path.name, target)
            claims += 1
    assert claims >= 1
