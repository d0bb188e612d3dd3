"""`make demo` / `make demo-fast`: the closed-loop demo (tools/demo/run.py, docs/demo.md)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.demo.run import main

if __name__ == "__main__":
    sys.exit(main())
