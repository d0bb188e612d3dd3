"""Fixtures shared by every suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tools.fakes.fakekube import FakeApiServer


@pytest.fixture
def fake_kube() -> Iterator[FakeApiServer]:
    """An empty fake Kubernetes API server (tools/fakes/fakekube.py), started; `put()` objects into it."""
    kube = FakeApiServer().start()
    try:
        yield kube
    finally:
        kube.stop()
