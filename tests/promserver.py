"""The Prometheus and exporter launchers live in tools/promserver.py (the demo uses them too); the test
suites import them from here."""

from tools.promserver import (
    ROOT,
    Prometheus,
    free_port,
    start_backfilled_prometheus,
    start_mock_exporter,
    start_prometheus,
    stop,
    wait_http,
)

__all__ = [
    "ROOT",
    "Prometheus",
    "free_port",
    "start_backfilled_prometheus",
    "start_mock_exporter",
    "start_prometheus",
    "stop",
    "wait_http",
]
