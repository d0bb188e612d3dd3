"""The check's report: what it read and what it concluded, in the folder it is given.

- gpu-check.json: the report (every field NVML returned and every NOT_SUPPORTED field per GPU, idle and
  under load; the children, their PIDs' readings; nvidia-smi's; the exporter's last scrape; each check);
- gpu-check.txt: the verdict lines as printed;
- scenario.json: this node's GPUs as a mock scenario (`gpu-exporter --source mock --scenario scenario.json`).
Each file is written to a temporary name and renamed, so a reader never sees half a report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tools.gpucheck.checks import Verdict

REPORT = "gpu-check.json"
LINES = "gpu-check.txt"
SCENARIO = "scenario.json"


def verdict_json(v: Verdict) -> dict[str, str]:
    return {"check": v.check, "status": v.status, "measured": v.measured, "expected": v.expected}


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write(out: Path, data: Mapping[str, Any], verdicts: Sequence[Verdict]) -> Path:
    """Write the report files into `out` (created if needed); the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    _write(out / REPORT, json.dumps(data, indent=2, sort_keys=False, default=repr) + "\n")
    _write(out / LINES, "".join(v.line() + "\n" for v in verdicts))
    if data.get("scenario"):
        _write(out / SCENARIO, json.dumps(data["scenario"], indent=2) + "\n")
    return out / REPORT
