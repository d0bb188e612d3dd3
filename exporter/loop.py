"""The collection loop: a background thread reads the source every `interval` seconds, attributes
processes and allocations, and keeps the result as a snapshot of ready-made samples. A scrape only wraps
the last snapshot (exporter/exposition.py): it never calls NVML or the kubelet.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from exporter.families import FamilyData, gpu_families
from exporter.model import Attribution, ContainerRef, GpuSample
from exporter.ports import Attributor, Source
from exporter.view import GpuView, gpu_view

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    families: tuple[FamilyData, ...]
    views: tuple[GpuView, ...]
    attribution: Mapping[str, bool]
    monotonic: float  # when it was taken, on the loop's clock
    timestamp: float  # when it was taken, Unix seconds
    duration_seconds: float


class FamilyExtension(Protocol):
    """Extra families built from the same views (the dcgm compatibility names)."""

    def __call__(self, views: Sequence[GpuView], node: str) -> list[FamilyData]: ...


@dataclass
class CollectionLoop:
    """Reads the source in a background thread and keeps the last snapshot."""

    source: Source
    attributor: Attributor
    node: str
    interval: float
    extensions: Sequence[FamilyExtension] = ()
    # /healthz fails when no collection completed for this many intervals (a hung or failing source).
    stale_intervals: float = 6.0
    on_snapshot: Callable[[Snapshot], object] | None = None  # e.g. render the exposition once
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    collection_errors: int = 0
    read_errors: Counter[tuple[str, ...]] = field(default_factory=Counter)
    last_attempt: float | None = None  # loop clock
    started: float | None = None  # loop clock: when the loop was built (the first collection's deadline)
    _snapshot: Snapshot | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        if self.started is None:
            self.started = self.clock()

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def collect_once(self) -> Snapshot | None:
        """One collection; on a source failure keep the previous snapshot (its age grows)."""
        started = self.clock()
        try:
            gpus = self.source.collect()
        except Exception:
            log.exception("collection from source %s failed", self.source.name)
            self.collection_errors += 1
            self.last_attempt = self.clock()
            return None
        owners, allocations, status = self._attribution(gpus)
        views = [gpu_view(g, owners, allocations.get(g.uuid, [])) for g in gpus]
        for g in gpus:
            for fld, error in g.errors.items():
                self.read_errors[(self.node, str(g.index), g.uuid, g.model, fld, error)] += 1
        families = gpu_families(views, self.node, self.read_errors)
        for extension in self.extensions:
            families.extend(extension(views, self.node))
        finished = self.clock()
        self._snapshot = Snapshot(
            families=tuple(families),
            views=tuple(views),
            attribution=status,
            monotonic=finished,
            timestamp=self.wall_clock(),
            duration_seconds=finished - started,
        )
        self.last_attempt = finished
        if self.on_snapshot is not None:
            self.on_snapshot(self._snapshot)
        return self._snapshot

    def _attribution(
        self, gpus: Sequence[GpuSample]
    ) -> tuple[dict[int, Attribution], dict[str, list[ContainerRef]], dict[str, bool]]:
        """Owners of unowned PIDs, allocations and status; a failing attributor degrades, never raises."""
        try:
            self.attributor.refresh()
        except Exception:
            log.exception("attribution refresh failed")
        failed: dict[str, bool] = {}
        pids = sorted({p.pid for g in gpus for p in g.processes if p.owner is None})
        owners: dict[int, Attribution] = {}
        if pids:
            try:
                # pid -> GPUs it runs on: lets the attributor pick the container holding that GPU.
                devices: dict[int, set[str]] = {}
                for g in gpus:
                    for p in g.processes:
                        devices.setdefault(p.pid, set()).add(g.uuid)
                owners = self.attributor.attribute(pids, devices=devices)
            except Exception:
                log.exception("attributing %d PIDs failed", len(pids))
                failed["proc"] = False
        try:
            allocations = self.attributor.allocations()
        except Exception:
            log.exception("reading allocations failed")
            allocations, failed["podresources"] = {}, False
        try:
            status = dict(self.attributor.status())
        except Exception:
            log.exception("attribution status failed")
            status = {}
        return owners, allocations, {**status, **failed}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpu-collection", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        next_run = self.clock()
        while not self._stop.is_set():
            try:
                self.collect_once()
            except Exception:  # a bug in attribution or rendering must not end collection
                log.exception("collection failed")
                self.collection_errors += 1
            # Fixed rate; a collection that overran skips the missed slots instead of bunching up.
            next_run += self.interval
            now = self.clock()
            if next_run < now:
                next_run = now + self.interval - (now - next_run) % self.interval
            self._stop.wait(next_run - now)

    def healthy(self, now: float | None = None) -> bool:
        """A collection completed within the last `stale_intervals` intervals (counted from the start
        while none has): a hung NVML call or a source failing every time fails /healthz."""
        now = self.clock() if now is None else now
        snap = self._snapshot
        since = snap.monotonic if snap is not None else self.started
        assert since is not None
        return now - since <= self.stale_intervals * self.interval

    def ready(self) -> bool:
        """The first snapshot exists (/readyz): before it a scrape would serve no GPU series."""
        return self._snapshot is not None
