"""The DRA loader's records kept from one pass to the next, by object version. Pure.

The service lists the same ResourceSlices, ResourceClaims, Pods and Nodes every pass, and most of them have
not changed: an object's `metadata.uid` and `metadata.resourceVersion` together name one version of it (the
API server gives every write a new resourceVersion), so the records read from that version (and the
`unparsable` findings reading it gave) are kept and used again instead of reading the object again.

- A changed object has a new resourceVersion: it is read again, and the old version's records are dropped.
- An object that is no longer listed is forgotten at the end of the pass that did not list it: each pass
  keeps only the versions it saw, so the cache never holds more than one pass's objects (and never more
  than MAX_OBJECTS).
- An object without a uid or a resourceVersion (a file, a test) is read every time and never kept.

Only sources whose resourceVersions come from an API server may use it (the service's Kubernetes adapter):
a hand-edited file can change an object and keep its resourceVersion. The records kept are never changed by
the loader or the checks (automator/dra/model.py: they are read-only once loaded).
"""

from __future__ import annotations

from typing import Any

from automator.dra.model import Finding

# One pass's objects at most: a bound on what is kept even if a cluster lists millions of objects.
MAX_OBJECTS = 1_000_000

# (kind, what loading the object made: a record or a parsed slice, the findings it gave)
Entry = tuple[str, Any, tuple[Finding, ...]]


class RecordCache:
    """Loaded records by (uid, resourceVersion): the previous pass's, and the current pass's as it goes."""

    def __init__(self, max_objects: int = MAX_OBJECTS) -> None:
        self.max_objects = max_objects
        self._previous: dict[tuple[str, str], Entry] = {}
        self._current: dict[tuple[str, str], Entry] = {}
        self.hits = 0  # of the last pass, for the benchmark and the tests
        self.misses = 0

    def start(self) -> None:
        """A new pass: what it does not see again is forgotten when it finishes."""
        self._current = {}
        self.hits = self.misses = 0

    def get(self, kind: str, uid: str, version: str) -> Entry | None:
        """What loading this version of the object made in the previous pass, or None."""
        key = (uid, version)
        entry = self._previous.get(key)
        if entry is None or entry[0] != kind:
            self.misses += 1
            return None
        self.hits += 1
        if len(self._current) < self.max_objects:
            self._current[key] = entry
        return entry

    def put(self, kind: str, uid: str, version: str, made: Any, findings: tuple[Finding, ...]) -> None:
        if len(self._current) < self.max_objects:
            self._current[(uid, version)] = (kind, made, findings)

    def finish(self) -> None:
        """The pass is over: its versions are what the next pass looks up; the others are dropped."""
        self._previous, self._current = self._current, {}

    def __len__(self) -> int:
        return len(self._previous)
