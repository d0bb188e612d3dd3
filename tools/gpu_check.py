"""`make gpu-check`: the real-GPU check of the exporter's NVML source (tools/gpucheck/, docs/exporter.md).

Runs with the project's Python alone (`python tools/gpu_check.py [--out DIR] [--duration SECONDS]`): the GPU
load goes through the driver's libcuda, nothing else is installed. Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.gpucheck.run import main

if __name__ == "__main__":
    sys.exit(main())
