"""The DRA loader's records kept across passes by (uid, resourceVersion) (automator/objects/cache.py).

A pass through the cache gives the report a fresh load gives; a changed object (new resourceVersion) is read
again, a deleted one is forgotten, objects without a version are never kept, unparsable fields keep their
findings."""

from __future__ import annotations

import copy
from typing import Any

from prometheus_client import CollectorRegistry

from automator.dra.checks import check
from automator.dra.job import DraCheckJob
from automator.dra.load import load_api_objects, load_objects, parse_usage
from automator.dra.model import OVERCOMMITTED, UNPARSABLE, Report
from automator.kube import DraKubernetesAdapter, KubernetesAdapter
from automator.objects.cache import RecordCache
from tests.automator.dra.test_dra_checks import hami_objects, hami_usage
from tests.automator.dra.test_dra_service import api_for
from tests.automator.fixtures.dra import builders as b
from tools.fakes.fakekube import FakeApiServer

Obj = dict[str, Any]


def versioned(objects: list[Obj]) -> list[Obj]:
    """The objects as the API server lists them: each with a uid and a resourceVersion."""
    out = copy.deepcopy(objects)
    for i, obj in enumerate(out):
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{i}")
        meta["resourceVersion"] = str(100 + i)
    return out


def run(objects: list[Obj], cache: RecordCache | None = None) -> Report:
    if cache is None:
        records = load_objects((obj, "API") for obj in objects)
    else:
        records = load_api_objects(objects, cache)
    return check(records, parse_usage({"containers": hami_usage()}, "usage"))


def fresh(objects: list[Obj]) -> Report:
    return run(copy.deepcopy(objects))


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def test_second_pass_reads_nothing_again_and_reports_the_same() -> None:
    objects, cache = versioned(hami_objects()), RecordCache()
    first = run(objects, cache)
    assert first == fresh(objects) and first.devices
    loaded = cache.misses
    assert cache.hits == 0 and loaded == len(objects) - sum(o["kind"] == "DeviceClass" for o in objects)
    assert run(objects, cache) == first
    assert (cache.hits, cache.misses, len(cache)) == (loaded, 0, loaded)


def test_a_changed_object_is_read_again() -> None:
    objects, cache = versioned(hami_objects()), RecordCache()
    run(objects, cache)
    claim = next(o for o in objects if o["kind"] == "ResourceClaim" and o["status"].get("allocation"))
    result = claim["status"]["allocation"]["devices"]["results"][0]
    result["consumedCapacity"] = {"memory": "1000Ti"}  # more than any device holds
    claim["metadata"]["resourceVersion"] = "9999"  # the API server's answer to the write
    second = run(objects, cache)
    assert cache.misses == 1
    assert second == fresh(objects)
    assert any(f.kind == OVERCOMMITTED for f in second.findings)


def test_the_version_not_the_content_decides() -> None:
    """An object whose resourceVersion did not change is not read again (the API server never does that;
    a file can, which is why only the Kubernetes adapter's objects go through the cache)."""
    objects, cache = versioned(hami_objects()), RecordCache()
    first = run(objects, cache)
    find(objects, "Node", "gpu-node-a")["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    assert run(objects, cache) == first
    assert run(objects) != first  # read again without the cache: mixed-mode


def test_a_deleted_object_is_forgotten() -> None:
    objects, cache = versioned(hami_objects()), RecordCache()
    run(objects, cache)
    pod = next(o for o in objects if o["kind"] == "Pod")
    rest = [o for o in objects if o is not pod]
    assert run(rest, cache) == fresh(rest)  # its claim is orphaned now
    assert len(cache) == cache.hits == len(rest) - sum(o["kind"] == "DeviceClass" for o in rest)
    run([pod, *rest], cache)
    assert cache.misses == 1  # back (same uid and version): read again, not remembered


def test_objects_without_a_version_are_never_kept() -> None:
    objects, cache = hami_objects(), RecordCache()
    first = run(objects, cache)
    assert run(objects, cache) == first == fresh(objects)
    assert len(cache) == cache.hits == 0


def test_unparsable_fields_keep_their_findings_on_every_pass() -> None:
    objects = versioned(
        [
            b.node("n1", {"nvidia.com/gpu": "lots"}),
            b.resource_slice("n1", [b.hami_device("n1", 0), {"name": 7}]),
            b.claim("ml", "a-gpu", [b.result("n1", 0, {"memory": "??"})], ["a"]),
            b.claim("ml", "b-gpu", [b.result("n1", 0, {"memory": "1Gi"})], ["b"]),
            {"kind": "Pod", "metadata": {"name": "a", "namespace": "ml", "uid": "p", "resourceVersion": "1"}},
            {"kind": "Pod", "metadata": {"namespace": "ml", "uid": "q", "resourceVersion": "1"}},
        ]
    )
    objects[3]["status"]["reservedFor"] = "b"  # a string where a list belongs
    objects[4]["spec"] = []
    cache = RecordCache()
    first = run(objects, cache)
    unparsable = [f for f in first.findings if f.kind == UNPARSABLE]
    assert len(unparsable) == 6, unparsable
    assert run(objects, cache) == first == fresh(objects)
    assert cache.misses == 0 and cache.hits == 5  # the pod without a name is reported, never kept


def test_an_older_slice_generation_still_loses_after_the_cache() -> None:
    old = b.resource_slice("n1", [b.hami_device("n1", 0, memory=40 * b.GIB)], generation=1)
    new = b.resource_slice("n1", [b.hami_device("n1", 0)], generation=2)
    old["metadata"]["name"] = "old"
    objects = versioned([b.node("n1"), new, old, b.shared_claim("ml", "a", "n1", 0, "10", "50Gi", "a")])
    cache = RecordCache()
    first = run(objects, cache)
    assert not [f for f in first.findings if f.kind == OVERCOMMITTED]
    assert run(list(reversed(objects)), cache) == first == fresh(objects)


def test_the_cache_is_bounded() -> None:
    objects, cache = versioned(hami_objects()), RecordCache(max_objects=3)
    first = run(objects, cache)
    assert run(objects, cache) == first and len(cache) == 3


def test_the_job_over_the_api_reads_changed_claims_again(fake_kube: FakeApiServer) -> None:
    for obj in hami_objects():
        fake_kube.put(obj)
    adapter = DraKubernetesAdapter(KubernetesAdapter(api_for(fake_kube.url)))
    cache = RecordCache()
    job = DraCheckJob(adapter, None, 60, CollectorRegistry(), write_events=False, record_cache=cache)
    plain = DraCheckJob(adapter, None, 60, CollectorRegistry(), write_events=False)
    first, again = job.run_once(), job.run_once()
    assert first is not None and again is not None and plain.run_once() is not None
    assert first.report == again.report == plain.last_ok.report  # type: ignore[union-attr]
    assert cache.misses == 0 and cache.hits == len(cache) > 0
    claim = next(o for o in fake_kube.objects_of("resourceclaims") if o["status"].get("allocation"))
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {"memory": "1000Ti"}
    fake_kube.put(claim)  # a write: a new resourceVersion
    changed = job.run_once()
    assert changed is not None and changed.report is not None and cache.misses == 1
    assert any(f.kind == OVERCOMMITTED for f in changed.report.findings)
    plain.run_once()
    assert changed.report == plain.last_ok.report  # type: ignore[union-attr]


def test_a_version_of_another_kind_is_not_taken_from_the_cache() -> None:
    objects, cache = versioned(hami_objects()), RecordCache()
    run(objects, cache)
    claim = next(o for o in objects if o["kind"] == "ResourceClaim")
    impostor = b.node("impostor", {"nvidia.com/gpu": "1"})
    impostor["metadata"].update(
        uid=claim["metadata"]["uid"], resourceVersion=claim["metadata"]["resourceVersion"]
    )
    kindless = {"metadata": dict(claim["metadata"])}
    rest = [o for o in objects if o is not claim]
    assert run([*rest, impostor, kindless], cache) == fresh([*rest, impostor, kindless])
    assert cache.misses == 1  # the node, read
