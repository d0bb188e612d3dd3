"""Fixtures shared by the automator suites."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU_STEWARD_* (or pod identity) variables, so the defaults are the code's own."""
    for name in list(os.environ):
        if name.startswith("GPU_STEWARD_") or name in ("POD_NAME", "POD_NAMESPACE"):
            monkeypatch.delenv(name)
