"""A cap on the connections one source address holds at once on a listener (pure: standard library).

The main port and the KEDA HTTPS listener each have one: a single client reconnecting slowly cannot take
every connection slot or worker from the others. Memory: one counter per source with an open connection.
"""

from __future__ import annotations

import threading


class SourceLimits:
    def __init__(self, per_source: int) -> None:
        self.per_source = per_source
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()
        self.refused = 0  # connections closed at once for their source's cap (since start)

    def acquire(self, source: str) -> bool:
        """True when the source may open one more connection (then `release` it when it closes)."""
        with self._lock:
            held = self._open.get(source, 0)
            if held >= self.per_source:
                self.refused += 1
                return False
            self._open[source] = held + 1
            return True

    def release(self, source: str) -> None:
        with self._lock:
            held = self._open.get(source, 0) - 1
            if held > 0:
                self._open[source] = held
            else:
                self._open.pop(source, None)

    def held(self, source: str) -> int:
        with self._lock:
            return self._open.get(source, 0)
