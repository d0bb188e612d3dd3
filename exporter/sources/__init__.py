"""GPU sources: `nvml` (a real node) and `mock` (a scenario file)."""

from __future__ import annotations


class SourceError(RuntimeError):
    """The source cannot start (e.g. NVML missing); the message says why."""
