"""The Kubernetes adapter reads gang group objects where the cluster serves their API (against the fake API
server, tools/fakes/fakekube.py, which serves only the gang APIs it is told to)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kubernetes import client

from automator.kube.adapter import KubernetesAdapter
from automator.objects.gang import GangSource
from tools.fakes.fakekube import FakeApiServer

ALL = (
    "scheduling.k8s.io/v1alpha2",
    "scheduling.k8s.io/v1alpha1",
    "scheduling.x-k8s.io/v1alpha1",
    "scheduling.volcano.sh/v1beta1",
    "scheduling.run.ai/v2alpha2",
)


def _group(api: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "ml"}, "spec": spec}


OBJECTS = [
    _group("scheduling.k8s.io/v1alpha2", "PodGroup", "wg", {"schedulingPolicy": {"gang": {"minCount": 2}}}),
    _group(
        "scheduling.k8s.io/v1alpha1",
        "Workload",
        "wl",
        {"podGroups": [{"name": "w", "policy": {"gang": {"minCount": 3}}}]},
    ),
    _group("scheduling.x-k8s.io/v1alpha1", "PodGroup", "co", {"minMember": 4}),
    _group("scheduling.volcano.sh/v1beta1", "PodGroup", "vo", {"minMember": 5}),
    _group("scheduling.run.ai/v2alpha2", "PodGroup", "ka", {"minMember": 6}),
]
EXPECTED = {
    (GangSource.POD_GROUP, "wg"): {"": 2},
    (GangSource.WORKLOAD, "wl"): {"w": 3},
    (GangSource.COSCHEDULING, "co"): {"": 4},
    (GangSource.VOLCANO, "vo"): {"": 5},
    (GangSource.KAI, "ka"): {"": 6},
}


def _read(served: tuple[str, ...]) -> dict[tuple[GangSource, str], dict[str, Any]]:
    with FakeApiServer(OBJECTS, gang_apis=served).start() as kube:
        adapter = KubernetesAdapter(client.ApiClient(client.Configuration(host=kube.url)))
        groups = adapter.snapshot().groups
        listed = [c.path for c in kube.requests() if "podgroups" in c.path or "workloads" in c.path]
    assert len(listed) == len(served)  # one list per API served, none for the others
    return {(g.source, g.name): dict(g.needed) for g in groups}


def test_every_served_gang_api_is_listed() -> None:
    assert _read(ALL) == EXPECTED


@pytest.mark.parametrize("served", ALL)
def test_each_gang_api_alone(served: str) -> None:
    group = served.rpartition("/")[0]
    kinds = {"scheduling.k8s.io/v1alpha2": "PodGroup", "scheduling.k8s.io/v1alpha1": "Workload"}
    found = _read((served,))
    assert len(found) == 1
    ((source, _),) = found
    assert str(source).startswith(group) and str(source).endswith(kinds.get(served, "PodGroup"))


def test_no_gang_api_served_is_no_error_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with FakeApiServer(OBJECTS).start() as kube:
        adapter = KubernetesAdapter(client.ApiClient(client.Configuration(host=kube.url)))
        with caplog.at_level(logging.INFO, logger="automator.kube.adapter"):
            assert adapter.snapshot().groups == []
            assert adapter.snapshot().groups == []
    lines = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
    assert len(lines) == 1 and "podgroups.scheduling.x-k8s.io" in lines[0]
