"""Cyclic garbage collection paused while a large input is read or planned over (pure)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: the objects built (parsed Kubernetes objects, records, a pass's
    index) hold no cycles that need it, and every collection would walk the whole input (millions of
    dicts): it doubled the time of a large DRA check and of a large plan. Reference counting still
    frees everything dropped.

    On the way out everything is frozen (gc.freeze) before collection is enabled again: otherwise the first
    young-generation collection afterwards walks every object the pass made (a tenth of a large DRA
    check). The next pause unfreezes them into the oldest generation, so nothing stays out of the
    collector's reach for longer than one pass."""
    enabled = gc.isenabled()
    if enabled:
        gc.unfreeze()  # what the previous pause froze goes back to the oldest generation
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.enable()
