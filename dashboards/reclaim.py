"""Reclaim activity: what the automator decided and did, what it could not do, and what it cost; and how
its KEDA endpoints answer."""

from __future__ import annotations

from typing import Any, Final

from dashboards import contracts as c
from dashboards import fleet
from dashboards import house as h

UID: Final = "gpu-steward-reclaim"


def _latency(title: str, description: str, bucket: str) -> Any:
    """Median and 95th percentile of a duration histogram, in seconds."""
    return h.timeseries(
        title,
        description,
        [h.Query(h.quantile(0.5, bucket), "p50"), h.Query(h.quantile(0.95, bucket), "p95")],
        unit=h.SECONDS,
    )


def build() -> Any:
    lay = h.Layout()
    lay.stats(
        h.stat(
            "Mode",
            "dry-run: decisions are only logged; enforce: the automator evicts.",
            f"max by (mode) ({c.AUTOMATOR_BUILD_INFO})",
            legend="{{mode}}",
            text_mode="name",
            colour=h.NEUTRAL,
        ),
        h.stat(
            "Leaders",
            "Replicas holding the lease and running passes: 1 is right, 0 means no pass runs.",
            f"sum({c.AUTOMATOR_IS_LEADER})",
            thresholds=h.steps(h.BAD, (1, h.BUSY), (2, h.BAD)),
        ),
        h.stat(
            "Since last good pass",
            "Time since a pass last finished without error. Passes run every --interval seconds.",
            f"time() - max({c.AUTOMATOR_LAST_SUCCESS})",
            unit=h.SECONDS,
            thresholds=h.steps(h.BUSY, (300, h.IDLE), (900, h.BAD)),
        ),
        h.stat(
            "Unresolved preemptors",
            "Pending higher-priority pods the last pass could not make room for.",
            f"sum({c.AUTOMATOR_UNRESOLVED})",
            thresholds=h.ZERO_IS_GOOD,
        ),
        h.stat(
            "Decisions in range",
            "Preemptors for which victims were chosen, over the dashboard's time range.",
            f"sum(increase({c.AUTOMATOR_DECISIONS}[{h.RANGE}]))",
            colour=h.ALLOCATED,
            decimals=0,
        ),
        h.stat(
            "Eviction calls in range",
            "Eviction API calls, all outcomes, over the dashboard's time range.",
            f"sum(increase({c.AUTOMATOR_EVICTIONS}[{h.RANGE}]))",
            colour=h.IDLE,
            decimals=0,
        ),
    )

    lay.row("Decisions and evictions")
    lay.add(
        h.timeseries(
            "Decisions",
            "Preemptors for which victims were chosen, by mode (in dry-run they are only logged).",
            [h.Query(h.increase_by(c.AUTOMATOR_DECISIONS, "mode"), "{{mode}}")],
            bars=True,
        ),
        w=8,
    )
    lay.add(
        h.timeseries(
            "Evictions by outcome",
            "Eviction API calls by result: ok, refused_pdb (a PodDisruptionBudget said no, HTTP 429), "
            "not_found, conflict, error. Refusals and errors make the automator re-plan.",
            [h.Query(h.increase_by(c.AUTOMATOR_EVICTIONS, "result"), "{{result}}")],
            bars=True,
            colours={"ok": h.BUSY, "error": h.BAD, "refused_pdb": h.IDLE},
        ),
        w=8,
    )
    lay.add(
        h.timeseries(
            "Unresolved preemptors by reason",
            "Preemptors the last pass could not make room for (by reason where the automator labels it).",
            [h.Query(f"sum by (reason) ({c.AUTOMATOR_UNRESOLVED})", "unresolved {{reason}}")],
        ),
        w=8,
    )
    lay.add(
        h.timeseries(
            "Allocated-but-idle GPUs",
            "The waste the automator works on: after a successful eviction it should fall.",
            [h.Query(c.FLEET_GPUS_IDLE, "idle GPUs")],
            unit=h.GPUS,
            colours={"idle GPUs": h.IDLE},
        ),
        w=12,
    )
    lay.add(fleet.idle_gpu_hours_trend(), w=12)

    lay.row("Passes and their cost")
    lay.add(
        h.timeseries(
            "Passes by result",
            "Reclaim passes by result (ok, prometheus_unavailable, kubernetes_error, error), and re-plans. "
            "A failed pass evicts nothing.",
            [
                h.Query(h.increase_by(c.AUTOMATOR_PASSES, "result"), "{{result}}"),
                h.Query(f"sum(increase({c.AUTOMATOR_REPLANS}[{h.RATE_INTERVAL}]))", "re-plans"),
            ],
            bars=True,
            colours={"ok": h.BUSY, "error": h.BAD},
        ),
        w=6,
    )
    lay.add(
        _latency(
            "Pass duration",
            "Median and 95th percentile of a pass (snapshot, queries, plan, actions).",
            c.AUTOMATOR_PASS_DURATION_BUCKET,
        ),
        w=6,
    )
    lay.add(
        _latency(
            "Prometheus query time",
            "Median and 95th percentile of each query the automator makes to Prometheus, failed ones "
            "included.",
            c.AUTOMATOR_QUERY_DURATION_BUCKET,
        ),
        w=6,
    )
    lay.add(
        h.timeseries(
            "Prometheus queries per pass",
            "Queries the last pass made: one per distinct idle window, whatever the pod count. Growth with "
            "the pod count would be a regression.",
            [h.Query(f"max({c.AUTOMATOR_QUERIES_PER_PASS})", "queries")],
        ),
        w=6,
    )
    lay.row("KEDA endpoints")
    lay.add(
        h.timeseries(
            "KEDA answers by status",
            "Requests KEDA made to the metrics-api endpoint (http: HTTP code) and the external scaler (grpc: "
            "gRPC code). 503 / UNAVAILABLE: no fresh value, KEDA's fallback applies (docs/keda.md).",
            [
                h.Query(
                    f"sum by (endpoint, status) (rate({c.AUTOMATOR_KEDA_REQUESTS}[{h.RATE_INTERVAL}]))",
                    "{{endpoint}} {{status}}",
                )
            ],
            colours={"http 200": h.BUSY, "grpc OK": h.BUSY, "http 503": h.BAD, "grpc UNAVAILABLE": h.BAD},
        ),
        w=6,
    )
    lay.add(
        h.timeseries(
            "KEDA cache age",
            "Seconds since the oldest cached KEDA query or pod list was refreshed successfully, and the "
            "queries kept fresh (one per signal and window, whatever the number of workloads).",
            [
                h.Query(f"max({c.AUTOMATOR_KEDA_CACHE_AGE})", "age"),
                h.Query(f"max({c.AUTOMATOR_KEDA_CACHED_QUERIES})", "queries kept"),
            ],
        ),
        w=6,
    )
    lay.add(
        _latency(
            "KEDA refresh duration",
            "Median and 95th percentile of a background refresh of the KEDA cache (its queries and lists).",
            c.AUTOMATOR_KEDA_REFRESH_DURATION_BUCKET,
        ),
        w=6,
    )
    lay.add(
        h.timeseries(
            "KEDA upstream errors",
            "Failed Prometheus queries and Kubernetes lists of the KEDA cache, per second.",
            [
                h.Query(f"sum(rate({c.AUTOMATOR_KEDA_PROMETHEUS_ERRORS}[{h.RATE_INTERVAL}]))", "Prometheus"),
                h.Query(f"sum(rate({c.AUTOMATOR_KEDA_KUBERNETES_ERRORS}[{h.RATE_INTERVAL}]))", "Kubernetes"),
            ],
        ),
        w=6,
    )
    return h.dashboard(
        UID,
        "GPU Steward / Reclaim activity",
        "The automator's decisions, evictions by outcome, unresolved preemptors, pass and query time.",
        lay,
    )
