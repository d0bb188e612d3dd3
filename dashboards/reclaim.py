"""Reclaim activity: what the automator decided and did, what it could not do, and what it cost; and how
its KEDA endpoints answer."""

from __future__ import annotations

from typing import Any, Final

from dashboards import contracts as c
from dashboards import fleet
from dashboards import house as h
from dashboards import panels as p

UID: Final = "gpu-steward-reclaim"
# A replica that loses the lease keeps its last gauge values: count the leader's only.
_LEADER: Final = f"on (job, instance) ({c.AUTOMATOR_IS_LEADER} == 1)"
_LEADER_ONLY: Final = f"{c.AUTOMATOR_UNRESOLVED} and {_LEADER}"
# GPU-hours = the mean of the GPUs held by reclaim over the range x the range in hours (a standby exports 0).
_RECLAIMED_GPU_HOURS: Final = (
    f"sum(avg_over_time({c.AUTOMATOR_RECLAIMED_GPUS_HELD}[{h.RANGE}])) * {h.RANGE_S} / 3600"
)


def build() -> Any:
    return h.dashboard(
        UID,
        "GPU Steward / Reclaim activity",
        "The automator's decisions, evictions by outcome, unresolved preemptors, pass and query time.",
        [_summary, _decisions_and_evictions, _kueue, _passes_and_their_cost, _keda_endpoints],
    )


def _in_range(title: str, description: str, counter: str, colour: str) -> Any:
    """A counter's increase over the dashboard's time range."""
    return p.stat(title, description, f"sum(increase({counter}[{h.RANGE}]))", colour=colour, decimals=0)


def _summary(lay: h.Layout) -> None:
    lay.stats(
        p.stat(
            "Mode",
            "dry-run: decisions are only logged; enforce: the automator evicts.",
            f"max by (mode) ({c.AUTOMATOR_BUILD_INFO})",
            legend="{{mode}}",
            text_mode="name",
            colour=h.NEUTRAL,
        ),
        p.stat(
            "Leaders",
            "Replicas holding the lease and running passes: 1 is right, 0 means no pass runs.",
            f"sum({c.AUTOMATOR_IS_LEADER})",
            thresholds=h.steps(h.BAD, (1, h.BUSY), (2, h.BAD)),
        ),
        p.since_stat(
            "Since last good pass",
            "Time since a pass last finished without error. Passes run every --interval seconds.",
            f"time() - max({c.AUTOMATOR_LAST_SUCCESS})",
        ),
        p.problem_stat(
            "Unresolved preemptors",
            "Pending higher-priority pods the last pass could not make room for.",
            f"sum({_LEADER_ONLY})",
        ),
        _in_range(
            "Decisions in range",
            "Preemptors for which victims were chosen, over the dashboard's time range.",
            c.AUTOMATOR_DECISIONS,
            h.ALLOCATED,
        ),
        _in_range(
            "Eviction calls in range",
            "Eviction API calls, all outcomes, over the dashboard's time range.",
            c.AUTOMATOR_EVICTIONS,
            h.IDLE,
        ),
        _in_range(
            "GPUs freed by accepted evictions",
            "GPUs of the victims whose eviction the API accepted (enforce mode), over the dashboard's time "
            "range. A count of GPUs handed back, not GPU-hours: how long the preemptor then uses them is not "
            "observed (docs/automator.md, Reclaimed GPUs).",
            c.AUTOMATOR_RECLAIMED_GPUS,
            h.BUSY,
        ),
        p.stat(
            "Reclaimed GPU-hours in range",
            "GPU time run by pods on the node the automator reclaimed for them (their reclaim-node "
            "annotation), over the dashboard's time range: the mean GPUs they held x the range's hours.",
            _RECLAIMED_GPU_HOURS,
            colour=h.BUSY,
            decimals=1,
        ),
    )


def _decisions_and_evictions(lay: h.Layout) -> None:
    lay.row("Decisions and evictions")
    lay.line(
        8,
        p.counts_by(
            "Decisions",
            "Preemptors for which victims were chosen, by mode (in dry-run they are only logged).",
            c.AUTOMATOR_DECISIONS,
            "mode",
        ),
        p.counts_by(
            "Evictions by outcome",
            "Eviction API calls by result: ok, refused_pdb (a PodDisruptionBudget said no, HTTP 429), "
            "not_found, conflict, error. Refusals and errors make the automator re-plan.",
            c.AUTOMATOR_EVICTIONS,
            "result",
            {"ok": h.BUSY, "error": h.BAD, "refused_pdb": h.IDLE},
        ),
        p.series(
            "Unresolved preemptors by reason",
            "Preemptors the leader's last pass could not make room for, by reason (docs/automator.md, "
            "Unresolved preemptors by reason).",
            f"sum by (reason) ({_LEADER_ONLY})",
            "{{reason}}",
        ),
    )
    lay.line(
        12,
        p.series(
            "Allocated-but-idle GPUs",
            "The waste the automator works on: after a successful eviction it should fall.",
            c.FLEET_GPUS_IDLE,
            "idle GPUs",
            unit=h.GPUS,
            colours={"idle GPUs": h.IDLE},
        ),
        fleet.idle_gpu_hours_trend(),
    )
    lay.line(
        8,
        p.series(
            "Pods under notice",
            "Pods carrying a notice (gpu-steward.io/reclaim-notice) as the leader's last pass read them: "
            "told they will be evicted after a deadline unless they use their GPUs (docs/reclaim.md, "
            "Notice).",
            f"sum({c.AUTOMATOR_UNDER_NOTICE} and {_LEADER})",
            "under notice",
        ),
        p.counts_by(
            "Notices withdrawn by reason",
            "Notices withdrawn: busy (the owner resumed work), usage-unknown, deferred (the owner objected), "
            "opted-out, preemptor-started/-gone/-fits, other-victims, not-planned, malformed.",
            c.AUTOMATOR_NOTICES_WITHDRAWN,
            "reason",
            {"busy": h.BUSY, "deferred": h.IDLE, "malformed": h.BAD},
        ),
        p.timeseries(
            "Notices given and ended in eviction",
            "Victims given notice, and accepted evictions of victims whose notice had passed, per step.",
            [
                p.Query(f"sum(increase({c.AUTOMATOR_NOTICES}[{h.RATE_INTERVAL}]))", "given"),
                p.Query(f"sum(increase({c.AUTOMATOR_EVICTIONS_AFTER_NOTICE}[{h.RATE_INTERVAL}]))", "evicted"),
            ],
            bars=True,
        ),
    )


def _leader(gauge: str) -> str:
    """A gauge of the leader's last pass (a standby keeps its last values)."""
    return f"max({gauge} and {_LEADER})"


def _kueue(lay: h.Layout) -> None:
    lay.row("Kueue")
    lay.line(
        8,
        p.timeseries(
            "Kueue: GPU quota waited for and held idle",
            "Kueue Workloads waiting for GPU quota and the GPUs they need, and the GPU quota admitted "
            "Workloads hold while idle for one of them (the leader's last pass; 0 with --kueue off). Idle "
            "quota next to waiting GPUs is what --kueue boost or deactivate hands over (docs/kueue.md).",
            [
                p.Query(_leader(c.AUTOMATOR_KUEUE_WAITING_GPUS), "GPUs waited for"),
                p.Query(_leader(c.AUTOMATOR_KUEUE_IDLE_QUOTA), "idle GPUs of quota held"),
                p.Query(_leader(c.AUTOMATOR_KUEUE_WAITING), "Workloads waiting"),
            ],
            colours={"GPUs waited for": h.ALLOCATED, "idle GPUs of quota held": h.IDLE},
        ),
        p.timeseries(
            "Kueue writes",
            "Boosts written and removed and Workloads deactivated, by mode (dry-run: only logged).",
            [p.Query(p.increase_by(c.AUTOMATOR_KUEUE_ACTIONS, "action, mode"), "{{action}} {{mode}}")],
            bars=True,
        ),
    )


def _passes_and_their_cost(lay: h.Layout) -> None:
    lay.row("Passes and their cost")
    passes = [
        p.Query(p.increase_by(c.AUTOMATOR_PASSES, "result"), "{{result}}"),
        p.Query(f"sum(increase({c.AUTOMATOR_REPLANS}[{h.RATE_INTERVAL}]))", "re-plans"),
    ]
    lay.line(
        6,
        p.timeseries(
            "Passes by result",
            "Reclaim passes by result (ok, prometheus_unavailable, kubernetes_error, error), and re-plans. "
            "A failed pass evicts nothing.",
            passes,
            bars=True,
            colours={"ok": h.BUSY, "error": h.BAD},
        ),
        p.latency(
            "Pass duration",
            "Median and 95th percentile of a pass (snapshot, queries, plan, actions).",
            c.AUTOMATOR_PASS_DURATION_BUCKET,
        ),
        p.latency(
            "Prometheus query time",
            "Median and 95th percentile of each query the automator makes to Prometheus, failed ones "
            "included.",
            c.AUTOMATOR_QUERY_DURATION_BUCKET,
        ),
        p.series(
            "Prometheus queries per pass",
            "Queries the last pass made: one per distinct idle window, whatever the pod count. Growth with "
            "the pod count would be a regression.",
            f"max({c.AUTOMATOR_QUERIES_PER_PASS})",
            "queries",
        ),
    )


def _keda_endpoints(lay: h.Layout) -> None:
    lay.row("KEDA endpoints")
    lay.line(
        6,
        p.series(
            "KEDA answers by status",
            "Requests KEDA made to the metrics-api endpoint (http: HTTP code) and the external scaler (grpc: "
            "gRPC code). 503 / UNAVAILABLE: no fresh value, KEDA's fallback applies (docs/keda.md).",
            p.rate_by(c.AUTOMATOR_KEDA_REQUESTS, f"{c.AUTOMATOR_KEDA_TRANSPORT}, status"),
            f"{{{{{c.AUTOMATOR_KEDA_TRANSPORT}}}}} {{{{status}}}}",
            colours={"http 200": h.BUSY, "grpc OK": h.BUSY, "http 503": h.BAD, "grpc UNAVAILABLE": h.BAD},
        ),
        p.timeseries(
            "KEDA cache age",
            "Seconds since the oldest cached KEDA query or pod list was refreshed successfully, and the "
            "queries kept fresh (one per signal and window, whatever the number of workloads).",
            [
                p.Query(f"max({c.AUTOMATOR_KEDA_CACHE_AGE})", "age"),
                p.Query(f"max({c.AUTOMATOR_KEDA_CACHED_QUERIES})", "queries kept"),
            ],
        ),
        p.latency(
            "KEDA refresh duration",
            "Median and 95th percentile of a background refresh of the KEDA cache (its queries and lists).",
            c.AUTOMATOR_KEDA_REFRESH_DURATION_BUCKET,
        ),
        p.timeseries(
            "KEDA upstream errors",
            "Failed Prometheus queries and Kubernetes lists of the KEDA cache, per second.",
            [
                p.Query(p.rate_by(c.AUTOMATOR_KEDA_PROMETHEUS_ERRORS), "Prometheus"),
                p.Query(p.rate_by(c.AUTOMATOR_KEDA_KUBERNETES_ERRORS), "Kubernetes"),
            ],
        ),
    )
