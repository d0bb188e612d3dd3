"""The attributor that stands in when the real one cannot be built (pure)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from exporter.model import ATTRIBUTION_SOURCES, Attribution, ContainerRef


class DegradedAttributor:
    """Everything unattributed and every attribution source reported down (status 0)."""

    def refresh(self) -> None:
        pass

    def attribute(
        self, pids: Sequence[int], devices: Mapping[int, Collection[str]] | None = None
    ) -> dict[int, Attribution]:
        return {pid: Attribution("unresolved") for pid in pids}

    def allocations(self) -> dict[str, list[ContainerRef]]:
        return {}

    def status(self) -> dict[str, bool]:
        return dict.fromkeys(ATTRIBUTION_SOURCES, False)
