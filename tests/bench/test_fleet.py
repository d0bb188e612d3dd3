"""The synthetic fleet's server: a scraper that connects and stays silent must not hold the other nodes'
scrapes (at 10,000 GPUs a starved Prometheus did, and 200-900 of 1,250 targets were up)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.bench import fleet
from tools.fakes.promserver import free_port


@pytest.fixture
def server() -> Iterator[str]:
    port = free_port()
    srv = fleet._FleetServer(port, nodes=2, seed=1, t0=time.time())
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_silent_connection_does_not_hold_another_scrape(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    silent = [socket.create_connection((host, int(port))) for _ in range(3)]
    try:
        # The handler's own timeout for a silent connection is 10 s; a scrape served before it ends
        # was served while the silent ones were held open.
        with urllib.request.urlopen(f"{server}/metrics?node={fleet.node_name(1)}", timeout=5) as r:
            body = r.read().decode()
    finally:
        for s in silent:
            s.close()
    assert f'node="{fleet.node_name(1)}"' in body
    assert body == fleet.render(1, 1, 0)


def test_an_unknown_node_is_not_found(server: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{server}/metrics?node=nope", timeout=5)
    assert err.value.code == 404
