"""`make gpu-check`: the real-GPU check of the exporter's NVML source (tools/gpucheck/, docs/exporter.md).

Runs with the project's Python alone (`python -m tools.gpucheck [--out DIR] [--duration SECONDS]` from the
repository root): the GPU load goes through the driver's libcuda, nothing else is installed. Without a GPU
it says so and exits 0.
"""

from __future__ import annotations

import sys

try:
    from tools.gpucheck.run import main
except ModuleNotFoundError as e:  # run by a Python without the project's packages (a GPU machine's image)
    print(
        f"gpu-check: the Python package {e.name!r} is missing here (`make deps` installs the project's; "
        "docs/exporter.md): nothing was checked and nothing is claimed.",
        file=sys.stderr,
    )
    sys.exit(1)

if __name__ == "__main__":
    sys.exit(main())
