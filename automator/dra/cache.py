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

from itertools import islice
from typing import Any

from automator.dra.model import Finding

# One pass's objects at most: a bound on what is kept even if a cluster lists millions of objects.
MAX_OBJECTS = 1_000_000

# (uid, resourceVersion): one version of one object (a uid names one object, of one kind)
Key = tuple[Any, Any]
# (its kind, what loading it made: a record or a parsed slice, the findings it gave, the key the records
# know it by: namespace/name of a pod, a node's name)
Entry = tuple[str, Any, tuple[Finding, ...], str]


class RecordCache:
    """Loaded records by uid and resourceVersion: the previous pass's, and the current pass's as it goes.

    The loader's loop (automator/dra/load.py) reads `previous` and fills `current` itself, inline."""

    def __init__(self, max_objects: int = MAX_OBJECTS) -> None:
        self.max_objects = max_objects
        self.previous: dict[Key, Entry] = {}
        self.current: dict[Key, Entry] = {}
        self.hits = 0  # of the last pass: objects not read again, and objects read and kept
        self.misses = 0

    def start(self) -> None:
        """A new pass: what it does not see again is forgotten when it finishes."""
        self.current = {}
        self.hits = self.misses = 0

    def put(self, key: Key, entry: Entry) -> None:
        """An object version read in this pass."""
        self.misses += 1
        if len(self.current) < self.max_objects:
            self.current[key] = entry

    def finish(self) -> None:
        """The pass is over: its versions are what the next pass looks up; the others are dropped."""
        current = self.current
        if len(current) > self.max_objects:
            current = dict(islice(current.items(), self.max_objects))
        self.previous, self.current = current, {}

    def __len__(self) -> int:
        return len(self.previous)
