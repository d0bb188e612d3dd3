"""Running gpu-automator from a test: in process through cli.main, or as `python -m automator`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from automator import cli

REPO = Path(__file__).resolve().parents[2]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """cli.main(argv) in this process: its exit code, stdout and stderr."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_module(*argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m automator argv` run from the repository root, output as text, exit code unchecked."""
    return subprocess.run(
        [sys.executable, "-m", "automator", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=120,
    )
