"""`make bench`: run every benchmark in one process and write docs/benchmarks.md.

Each tests/bench/bench_*.py module exposes `main() -> str` returning a markdown section that starts with
its `## ` heading. Only those sections are rewritten: every other section of docs/benchmarks.md (hand-
written ones such as the CLI start-up figures, or those of benchmarks not run this time) is kept as it is.
`python -m tests.bench.run_all bench_planner bench_loading` runs some benchmarks only.
Figures are compared side by side within one run; absolute times on a shared 2-core
machine are noisy, ratios are what the goals are stated in.
"""

from __future__ import annotations

import importlib
import os
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHES = [
    "tests.bench.bench_exporter",
    "tests.bench.bench_planner",
    "tests.bench.bench_gangs",
    "tests.bench.bench_loading",
    "tests.bench.bench_automator_memory",
    "tests.bench.bench_dra",
    "tests.bench.bench_records",
    "tests.bench.bench_keda",
    "tests.bench.bench_rules",
    "tests.bench.bench_backtest",
    "tests.bench.bench_backtest_memory",
]
DOC = ROOT / "docs" / "benchmarks.md"
MEASURED = "_Measured by `make bench` on {date}: {machine}, {cores} cores, {python}._"


def split_sections(text: str) -> tuple[str, list[str]]:
    """(what comes before the first `## ` heading, the sections, each from its heading on)."""
    parts = re.split(r"^(?=## )", text, flags=re.MULTILINE)
    return parts[0], [p.rstrip("\n") for p in parts[1:]]


def heading(section: str) -> str:
    return section.split("\n", 1)[0].strip()


def merge(old: list[str], new: list[str]) -> list[str]:
    """The old sections with those of the same heading replaced; new headings added at the end."""
    fresh = {heading(s): s for s in new}
    merged = [fresh.pop(heading(s), s) for s in old]
    return merged + [s for s in new if heading(s) in fresh]


def main(argv: list[str] | None = None) -> int:
    wanted = argv if argv is not None else sys.argv[1:]
    names = [n for n in BENCHES if not wanted or n.rsplit(".", 1)[1] in wanted]
    sections = []
    for name in names:
        started = time.perf_counter()
        module = importlib.import_module(name)
        section = (
            module.main().rstrip("\n")
            + "\n\n"
            + MEASURED.format(
                date=time.strftime("%Y-%m-%d"),
                machine=platform.machine(),
                cores=os.cpu_count(),
                python=f"{platform.python_implementation()} {platform.python_version()}",
            )
        )
        print(section, flush=True)
        sections.append(section)
        print(f"({name} took {time.perf_counter() - started:.1f} s)\n", flush=True)
    header = (
        "# Benchmarks\n\n"
        "Produced by `make bench` (which runs `.venv/bin/python -m tests.bench.run_all`; "
        "`python -m tests.bench.run_all bench_planner` runs one). Each section says where and when it was "
        "measured. The development machine has 2 shared cores: read the ratios, not the absolute times.\n\n"
    )
    _, old = split_sections(DOC.read_text()) if DOC.exists() else ("", [])
    DOC.write_text(header + "\n\n".join(merge(old, sections)) + "\n")
    print("wrote docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
