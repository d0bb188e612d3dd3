"""The record cache by (uid, resourceVersion), for any kind (automator/objects/cache.py).

An unchanged object version is not decoded again, a changed one is, one not listed in a pass is forgotten at
the pass's end, one without a uid or a resourceVersion is never kept, and the cache is bounded. The DRA
loader's use of it: tests/automator/dra/test_dra_cache.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from automator.objects.cache import RecordCache, version_key

Obj = dict[str, Any]


def obj(name: str, uid: Any = None, version: Any = "1", **more: Any) -> Obj:
    meta: Obj = {"name": name, "resourceVersion": version, **more}
    if uid is not False:
        meta["uid"] = uid or f"uid-{name}"
    return {"kind": "Thing", "metadata": meta}


class Decoder:
    """A decode function that counts its calls and makes an immutable record: (name, version)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, o: Mapping[str, Any]) -> tuple[str, str]:
        self.calls += 1
        return o["metadata"]["name"], o["metadata"].get("resourceVersion")


def one_pass(
    cache: RecordCache[tuple[str, str]], objects: list[Obj], decode: Decoder
) -> list[tuple[str, str]]:
    cache.start()
    records = [cache.decoded(o, decode) for o in objects]
    cache.finish()
    return records


def test_an_unchanged_version_is_not_decoded_again() -> None:
    cache: RecordCache[tuple[str, str]] = RecordCache()
    decode, objects = Decoder(), [obj("a"), obj("b")]
    first = one_pass(cache, objects, decode)
    assert (decode.calls, cache.misses, cache.hits, len(cache)) == (2, 2, 0, 2)
    again = one_pass(cache, objects, decode)
    assert again == first and all(x is y for x, y in zip(again, first, strict=True))
    assert (decode.calls, cache.misses, cache.hits, len(cache)) == (2, 0, 2, 2)


def test_a_new_resource_version_is_decoded_again_and_the_old_one_dropped() -> None:
    cache: RecordCache[tuple[str, str]] = RecordCache()
    decode = Decoder()
    one_pass(cache, [obj("a"), obj("b")], decode)
    assert one_pass(cache, [obj("a", version="2"), obj("b")], decode) == [("a", "2"), ("b", "1")]
    assert (decode.calls, cache.misses, cache.hits, len(cache)) == (3, 1, 1, 2)
    assert cache.get(("uid-a", "1")) is None and cache.get(("uid-a", "2")) == ("a", "2")


def test_an_object_not_listed_is_forgotten_at_the_end_of_the_pass() -> None:
    cache: RecordCache[tuple[str, str]] = RecordCache()
    decode = Decoder()
    one_pass(cache, [obj("a"), obj("b")], decode)
    one_pass(cache, [obj("b")], decode)
    assert len(cache) == 1 and cache.get(("uid-a", "1")) is None
    one_pass(cache, [obj("a"), obj("b")], decode)
    assert decode.calls == 3 and cache.misses == 1  # back with the same version: decoded again


@pytest.mark.parametrize(
    "meta",
    [
        {"name": "a", "resourceVersion": "1"},
        {"name": "a", "uid": "u"},
        {"name": "a", "uid": "", "resourceVersion": "1"},
        {"name": "a", "uid": "u", "resourceVersion": ""},
        {"name": "a", "uid": 7, "resourceVersion": "1"},
        {"name": "a", "uid": "u", "resourceVersion": ["1"]},
    ],
)
def test_an_object_without_uid_or_resource_version_is_never_kept(meta: Obj) -> None:
    cache: RecordCache[tuple[str, str]] = RecordCache()
    decode, objects = Decoder(), [{"kind": "Thing", "metadata": meta}]
    assert version_key(objects[0]) is None
    one_pass(cache, objects, decode)
    one_pass(cache, objects, decode)
    assert (decode.calls, len(cache), cache.hits, cache.misses) == (2, 0, 0, 0)


def test_objects_that_are_no_maps_have_no_version() -> None:
    assert version_key({"metadata": None}) is None and version_key({}) is None
    cache: RecordCache[int] = RecordCache()
    assert cache.get_listed([{"metadata": "x"}]) is None and cache.get_listed([{}]) is None


def test_listed_versions_are_looked_up_together_and_kept_only_when_taken() -> None:
    cache: RecordCache[tuple[str, str]] = RecordCache()
    decode, objects = Decoder(), [obj("a"), obj("b")]
    one_pass(cache, objects, decode)
    cache.start()
    listed = cache.get_listed([obj("a"), obj("b", version="2")])
    assert listed == ([("uid-a", "1"), ("uid-b", "2")], [("a", "1"), None])
    cache.keep(("uid-a", "1"), ("a", "1"))
    cache.finish()
    assert len(cache) == 1 and cache.hits == 1  # b's old version was not listed, its new one not decoded


def test_the_cache_is_bounded() -> None:
    cache: RecordCache[tuple[str, str]] = RecordCache(max_objects=2)
    decode, objects = Decoder(), [obj(n) for n in "abcde"]
    assert one_pass(cache, objects, decode) == [(n, "1") for n in "abcde"]
    assert len(cache) == 2
    assert one_pass(cache, objects, decode) == [(n, "1") for n in "abcde"]
    assert len(cache) == 2 and cache.hits == 2 and decode.calls == 8
