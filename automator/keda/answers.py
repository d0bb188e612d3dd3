"""Where KEDA's questions are answered: the declared table, or the on-demand cache when the cluster does not
serve the ScaledObject API (pure: standard library threads only; the sources are passed in).

Each refresh lists the ScaledObjects: when that works the declared mode answers; when the API is absent
(KEDA not installed) or refused (RBAC) the on-demand mode does, as before declared questions existed. The
log says which mode runs and why, once per change; until the first refresh every question is warming_up.
"""

from __future__ import annotations

import logging
import threading
from typing import Final, Protocol

from automator.keda.cache import Answer, KedaCache
from automator.keda.declared import ObjectName
from automator.keda.metrics import KedaMetrics
from automator.keda.request import Question
from automator.keda.table import DeclaredSource, DeclaredTable, ScaledObjectsAbsent
from automator.keda.values import NoValue
from automator.ports import KubernetesUnavailable

log = logging.getLogger(__name__)


class Answerer(Protocol):
    """What the HTTP and gRPC endpoints read (KedaAnswers; the on-demand KedaCache alone in tests)."""

    metrics: KedaMetrics | None

    @property
    def refresh_seconds(self) -> float: ...

    def answer(
        self,
        q: Question,
        waiters: threading.BoundedSemaphore | None = None,
        scaled_object: ObjectName | None = None,
        client: str | None = None,
    ) -> Answer: ...

    def target_of(self, scaled_object: ObjectName) -> tuple[str, str] | None:
        """The listed ScaledObject's scale target; None in on-demand mode or when not listed."""
        ...

    @property
    def declared(self) -> bool:
        """Whether the answers are the declared ones (a ScaledObject not listed is then warming up)."""
        ...


STARTING: Final = "starting"
DECLARED: Final = "declared"
ON_DEMAND: Final = "on-demand"


class KedaAnswers:
    def __init__(
        self,
        table: DeclaredTable,
        ondemand: KedaCache,
        source: DeclaredSource | None,
        metrics: KedaMetrics | None = None,
    ) -> None:
        """`source` None: no ScaledObject can be read, the on-demand mode runs from the start."""
        self.table, self.ondemand, self.source = table, ondemand, source
        self.metrics = metrics
        self.refresh_seconds = table.config.refresh_seconds
        self.mode = STARTING if source is not None else ON_DEMAND
        self.why = "no refresh yet" if source is not None else "no ScaledObject source"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warming = 0  # warming_up answers since the last refresh (a count: nothing per question)
        self._warming_streak = 0  # consecutive refreshes with some
        if metrics is not None:
            metrics.cache_age.set_function(self.age)

    def age(self) -> float:
        """Seconds since the answers were last computed (the on-demand cache's oldest entry's age)."""
        return self.table.age() if self.mode == DECLARED else self.ondemand.oldest_age()

    def answer(
        self,
        q: Question,
        waiters: threading.BoundedSemaphore | None = None,
        scaled_object: ObjectName | None = None,
        client: str | None = None,
    ) -> Answer:
        """NoValue (503), NotDeclared (404, declared mode), UnknownWorkload (404) or the answer. `client`:
        the caller's address, which the on-demand mode's per-client bound counts."""
        try:
            mode = self.mode
            if mode == DECLARED:
                return self.table.answer(q, scaled_object)
            if mode == ON_DEMAND:
                return self.ondemand.answer(q, waiters, client=client)
            raise NoValue("warming_up", "the ScaledObjects have not been read yet")
        except NoValue as e:
            if e.reason == "warming_up":
                self._warming += 1  # a lost increment under a race only delays the alert by a refresh
            raise

    def target_of(self, scaled_object: ObjectName) -> tuple[str, str] | None:
        return self.table.target_of(scaled_object) if self.mode == DECLARED else None

    @property
    def declared(self) -> bool:
        return self.mode == DECLARED

    def refresh(self) -> None:
        """One refresh of the mode's source; switches mode when the ScaledObject API appears or goes."""
        if self.source is None:
            return  # the on-demand cache refreshes itself
        self._warming_streak = self._warming_streak + 1 if self._warming else 0
        self._warming = 0
        if self.metrics is not None:
            self.metrics.warming_up_refreshes.set(self._warming_streak)
        try:
            table = self.table.refresh(self.source)
        except ScaledObjectsAbsent as e:
            if self.mode == DECLARED:
                self.table.forget()  # its answers and series would stay as they were, forever
            self._switch(ON_DEMAND, f"the ScaledObject API is {e}: questions are fetched when asked")
            return
        except KubernetesUnavailable as e:  # never listed yet: every question stays warming_up
            log.warning("KEDA: cannot list ScaledObjects yet: %s", e)
            return
        self._switch(
            DECLARED,
            f"{len(table.declared.scaled_objects)} ScaledObjects declare {len(table.results)} questions",
        )

    def _switch(self, mode: str, why: str) -> None:
        if mode != self.mode:
            log.info("KEDA: %s mode: %s", mode, why)
        self.mode, self.why = mode, why
        if self.metrics is not None:
            self.metrics.declared_mode.set(1.0 if mode == DECLARED else 0.0)

    def _loop(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception:  # a bug must not stop the refresh: answers would only go stale (503)
                log.exception("KEDA refresh failed")
            if self._stop.wait(self.refresh_seconds):
                return

    def start(self) -> None:
        """The refresh thread (the first refresh at once)."""
        if self._thread is None and self.source is not None:
            self._thread = threading.Thread(target=self._loop, name="keda-declared-refresh", daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.ondemand.stop(timeout)
