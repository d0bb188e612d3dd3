"""Serving a wiring: its periodic jobs on an apscheduler (never two runs of a job at once), leader
election, the KEDA refresher and the HTTP server, until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler
from flask import Flask

from automator.dra.job import DraCheckJob
from automator.keda import wiring as keda
from automator.kube import LeaderElector
from automator.service.loop import Service
from automator.service.web import http_server, probe_app
from automator.settings import ServiceSettings
from steward_common.urls import redact_url

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    """A periodic job of the service (the reclaim pass is one; other features add theirs)."""

    id: str
    func: Callable[[], object]
    seconds: float


@dataclass
class Wiring:
    service: Service
    app: Flask
    elector: LeaderElector | None = None  # when leader election is on
    jobs: list[Job] = field(default_factory=list)  # scheduled by serve, the reclaim pass first
    dra: DraCheckJob | None = None  # the DRA check, unless --dra-check-interval 0


def _scheduler(jobs: list[Job]) -> BackgroundScheduler:
    scheduler = BackgroundScheduler(timezone=UTC)
    for job in jobs:
        scheduler.add_job(
            job.func,
            "interval",
            seconds=job.seconds,
            next_run_time=datetime.now(UTC),
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(job.seconds)),
            id=job.id,
        )
    return scheduler


def serve(settings: ServiceSettings, wiring: Wiring) -> int:
    service = wiring.service
    log.info(
        "starting: mode=%s interval=%gs prometheus=%s leader_election=%s",
        service.mode,
        service.interval,
        redact_url(settings.prometheus_url),
        wiring.elector is not None,
    )
    # The KEDA listeners bind before anything runs: a port in use stops the start before any pass.
    wiring.app.extensions[keda.EXTENSION].start()
    if wiring.elector is not None:
        wiring.elector.start()
    scheduler = _scheduler(wiring.jobs)
    scheduler.start()
    server = http_server(
        wiring.app,
        settings.listen_address,
        settings.port,
        settings.http_threads,
        per_source=settings.max_connections_per_source,
    )
    probes = None
    if settings.probe_port:  # its own listener and threads: floods of the other ports never reach it
        probes = http_server(probe_app(service), settings.listen_address, settings.probe_port, 2)
        threading.Thread(target=probes.run, name="probes", daemon=True).start()

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        # close() ends run()'s loop, which runs in this (the main) thread: call it from another.
        threading.Thread(target=server.close, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.run()
    except OSError:
        pass  # the socket closed under run() by stop()
    finally:
        if wiring.elector is not None:
            wiring.elector.stop(timeout=5)
        scheduler.shutdown(wait=True)
        wiring.app.extensions[keda.EXTENSION].stop()
        if probes is not None:
            probes.close()
    return 0
