"""Evictions whose outcome cannot be known, through the real adapter against the fake API server.

A 5xx (the API server's own 504 at its request timeout, a proxy's 502/503) or a timeout may hide an
eviction that still commits: the pass must not evict a second victim for the same preemptor.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from automator.kube import KubernetesAdapter
from automator.ports import Mode
from automator.reclaim.model import PlannerConfig
from automator.service.actuator import run_pass
from tests.automator import k8s
from tests.automator.fakes import FakePrometheus
from tests.automator.reclaim.test_reclaim_safety import two_nodes_objects
from tools.fakes.fakekube import FakeApiServer

EVICTION = r"/api/v1/namespaces/ml/pods/[^/]+/eviction"


def _load(fake_kube: FakeApiServer) -> KubernetesAdapter:
    for obj in two_nodes_objects():
        fake_kube.put(obj)
    return KubernetesAdapter(client.ApiClient(client.Configuration(host=fake_kube.url)), request_timeout=2)


def _real_evictions(fake_kube: FakeApiServer) -> list[str]:
    return [
        c.path
        for c in fake_kube.requests("POST")
        if c.path.endswith("/eviction") and "dryRun" not in str(c.body)
    ]


@pytest.mark.parametrize("code", [500, 502, 503, 504])
def test_a_5xx_on_the_first_victim_evicts_nothing_else_that_pass(fake_kube: FakeApiServer, code: int) -> None:
    kube = _load(fake_kube)
    # Dry runs pass; the first real eviction gets the 5xx, whichever victim the planner picks first.
    fake_kube.answer("POST", EVICTION, 201, {"kind": "Status", "code": 201}, times=4, body_contains="dryRun")
    fake_kube.fail("POST", EVICTION, code, "Timeout", "the server was unable to return a response in time")
    result = run_pass(kube, FakePrometheus(k8s.idle("x", "y")), PlannerConfig(), Mode.ENFORCE, k8s.NOW)
    assert len(_real_evictions(fake_kube)) == 1, _real_evictions(fake_kube)
    assert result.replans == 0 and "no known outcome" in result.reason
    assert [a.result for a in result.actions if a.kind == "evict"] == ["unknown"]
