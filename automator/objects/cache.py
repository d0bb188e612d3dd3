"""Records kept from one pass to the next, by object version, for any kind. Pure.

The service lists the same objects every pass, and most of them have not changed: an object's
`metadata.uid` and `metadata.resourceVersion` together name one version of it (the API server gives every
write a new resourceVersion), so the record decoded from that version is kept and used again instead of
decoding the object again.

- A changed object has a new resourceVersion: it is decoded again, and the old version's record is dropped.
- An object that is not listed in a pass is forgotten when that pass finishes: each pass keeps only the
  versions it saw, so the cache never holds more than one pass's objects (and never more than max_objects).
- An object without a uid or a resourceVersion (a file, a test) is decoded every time and never kept.

Only sources whose resourceVersions come from an API server may use it (the Kubernetes adapter's lists): a
hand-edited file can change an object and keep its resourceVersion. A record kept here is handed to every
later pass that lists the same version, so it must be immutable (a frozen record, a tuple of them); whoever
needs to change one changes a copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from operator import itemgetter
from typing import Any, Generic, TypeVar

# A bound on what is kept, whatever a cluster lists.
MAX_OBJECTS = 1_000_000

R = TypeVar("R")

# (uid, resourceVersion): one version of one object
Key = tuple[str, str]

_METADATA = itemgetter("metadata")
_VERSION = itemgetter("uid", "resourceVersion")


def version_key(obj: Mapping[str, Any]) -> Key | None:
    """The object's (uid, resourceVersion), or None when it does not name both (then it is never kept)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    if type(uid) is str and uid and type(version) is str and version:
        return uid, version
    return None


class RecordCache(Generic[R]):
    """Decoded records by (uid, resourceVersion): the previous pass's, and the current pass's as it goes.

    A pass is `start()`; then per listed object either the previous pass's record (`get`, and `keep` when
    the caller takes it) or a newly decoded one (`put`), or both at once with `decoded`; then `finish()`.
    A uid names one object of one kind, so a caller that keeps several kinds in one cache checks that the
    record it gets is of the object's kind before it keeps it."""

    def __init__(self, max_objects: int = MAX_OBJECTS) -> None:
        self.max_objects = max_objects
        self._previous: dict[Key, R] = {}
        self._current: dict[Key, R] = {}
        self.hits = 0  # of the last pass: versions not decoded again
        self.misses = 0  # of the last pass: versions decoded (and kept, up to max_objects)

    def start(self) -> None:
        """A new pass: what it does not see again is forgotten when it finishes."""
        self._current = {}
        self.hits = self.misses = 0

    def get(self, key: Key | None) -> R | None:
        """The record the previous pass kept for this object version, or None."""
        return None if key is None else self._previous.get(key)

    def get_listed(self, objects: Sequence[Mapping[str, Any]]) -> tuple[list[Key], list[R | None]] | None:
        """The version keys of all the objects and `get` of each, or None when one of them does not name
        its version as the API server's objects all do (then the caller goes object by object with
        `version_key`).

        It runs over every listed object of every pass, and is most of an unchanged pass's time beside the
        checks: the versions are looked up in C (`map` over item getters) rather than object by object."""
        try:
            keys: list[Key] = list(map(_VERSION, map(_METADATA, objects)))
        except (LookupError, TypeError):  # a field missing, an object or metadata that is no map, ...
            return None
        return keys, list(map(self._previous.get, keys))

    def keep(self, key: Key, record: R) -> None:
        """The previous pass's record of this version (from `get`) is this pass's too."""
        self.hits += 1
        self._current[key] = record

    def put(self, key: Key | None, record: R) -> None:
        """A record decoded in this pass; kept only for a version named by a uid and a resourceVersion
        (strings, not empty), and only while the pass has kept fewer than max_objects."""
        if key is None:
            return
        uid, version = key
        if type(uid) is not str or not uid or type(version) is not str or not version:
            return
        self.misses += 1
        if len(self._current) < self.max_objects:
            self._current[key] = record

    def decoded(self, obj: Mapping[str, Any], decode: Callable[[Mapping[str, Any]], R]) -> R:
        """The object's record: the previous pass's for its version, else `decode(obj)` (kept)."""
        key = version_key(obj)
        if key is not None:
            kept = self._previous.get(key)
            if kept is not None:
                self.keep(key, kept)
                return kept
        record = decode(obj)
        self.put(key, record)
        return record

    def finish(self) -> None:
        """The pass is over: its versions are what the next pass looks up; the others are dropped."""
        current = self._current
        if len(current) > self.max_objects:
            current = dict(islice(current.items(), self.max_objects))
        self._previous, self._current = current, {}

    def __len__(self) -> int:
        return len(self._previous)
