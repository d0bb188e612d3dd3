"""`make bench`: run every benchmark in one process and write docs/benchmarks.md.

Each tests/bench/bench_*.py module exposes `main() -> str` returning a markdown section.
Figures are compared side by side within one run; absolute times on a shared 2-core
machine are noisy, ratios are what the goals are stated in.
"""

from __future__ import annotations

import importlib
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHES = [
    "tests.bench.bench_exporter",
    "tests.bench.bench_planner",
    "tests.bench.bench_dra",
    "tests.bench.bench_rules",
]


def main() -> int:
    sections = []
    for name in BENCHES:
        started = time.perf_counter()
        module = importlib.import_module(name)
        section = module.main()
        print(section, flush=True)
        sections.append(section)
        print(f"({name} took {time.perf_counter() - started:.1f} s)\n", flush=True)
    header = (
        "# Benchmarks\n\n"
        "Produced by `make bench` (which runs `.venv/bin/python -m tests.bench.run_all`) on "
        f"{platform.machine()} with {platform.python_implementation()} {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d')}. The development machine has 2 shared cores: read the ratios, "
        "not the absolute times.\n\n"
    )
    (ROOT / "docs" / "benchmarks.md").write_text(header + "\n\n".join(sections) + "\n")
    print("wrote docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
