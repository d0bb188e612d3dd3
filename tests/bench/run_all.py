"""`make bench`: run the benchmarks and update their sections of docs/benchmarks.md.

Each tests/bench/bench_*.py module exposes `main() -> str` returning a markdown section. In
docs/benchmarks.md that section sits between `<!-- bench:MODULE -->` and `<!-- /bench:MODULE -->`;
a run replaces only the sections of the modules it ran, and everything else (the header, hand-written
sections such as "CLI start-up", the sections of modules not run) is kept as it is. A module without
markers yet gets its section appended.

    .venv/bin/python -m tests.bench.run_all                          # every benchmark
    .venv/bin/python -m tests.bench.run_all tests.bench.bench_rules  # only these

Figures are compared side by side within one run; absolute times on a shared 2-core
machine are noisy, ratios are what the goals are stated in.
"""

from __future__ import annotations

import importlib
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "benchmarks.md"
BENCHES = [
    "tests.bench.bench_exporter",
    "tests.bench.bench_planner",
    "tests.bench.bench_dra",
    "tests.bench.bench_rules",
]


def _begin(module: str) -> str:
    return f"<!-- bench:{module} -->"


def _end(module: str) -> str:
    return f"<!-- /bench:{module} -->"


def merge_sections(doc: str, sections: Mapping[str, str]) -> str:
    """`doc` with each module's marked section replaced by `sections[module]` (appended when unmarked)."""
    for module, body in sections.items():
        block = f"{_begin(module)}\n{body.strip()}\n{_end(module)}"
        pattern = re.compile(re.escape(_begin(module)) + r".*?" + re.escape(_end(module)), re.DOTALL)
        found = len(pattern.findall(doc))
        if found > 1:
            raise ValueError(f"docs/benchmarks.md marks the section of {module} {found} times")
        match = pattern.search(doc)
        if match is not None:
            doc = doc[: match.start()] + block + doc[match.end() :]
        else:
            if doc.count(_begin(module)) or doc.count(_end(module)):
                raise ValueError(f"docs/benchmarks.md has an unpaired marker for {module}")
            doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    return doc


def main(argv: Sequence[str] = ()) -> int:
    names = list(argv) or BENCHES
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHES)}", file=sys.stderr)
        return 2
    sections: dict[str, str] = {}
    for name in names:
        started = time.perf_counter()
        module = importlib.import_module(name)
        section: str = module.main()
        print(section, flush=True)
        sections[name] = section
        print(f"({name} took {time.perf_counter() - started:.1f} s)\n", flush=True)
    DOC.write_text(merge_sections(DOC.read_text(), sections))
    print(f"updated {len(sections)} section(s) of docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
