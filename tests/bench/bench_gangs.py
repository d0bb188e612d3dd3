"""Gang benchmark: the planner pass at 5,000 nodes x 8 GPUs with a quarter of the GPU pods in gangs of 2-8
members and a fifth of the preemptors in gangs, against the same cluster with the gang keys removed.

`main()` returns a markdown section for docs/benchmarks.md (tests/bench/run_all.py).
"""

from __future__ import annotations

import copy
import random
import time
from typing import Any

from automator.objects.cluster import ClusterState
from automator.objects.keys import JsonObj, ObjectKey
from automator.reclaim.model import PodUsage
from automator.reclaim.planner import plan
from steward_common.conventions import GANG_COSCHEDULING_LABEL
from tests.bench.bench_planner import NOW, UNBUDGETED, generate_objects

NODES, PREEMPTORS, REPEATS = 5000, 500, 5
GOAL = 1.5  # the pass with gangs at most 1.5x the pass without


def _gpus(pod: JsonObj) -> int:
    return int(pod["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu", 0))


def _chunks(pods: list[JsonObj], rng: random.Random, low: int, high: int) -> list[list[JsonObj]]:
    chunks: list[list[JsonObj]] = []
    i = 0
    while i + low <= len(pods):
        size = rng.randint(low, high)
        chunks.append(pods[i : i + size])
        i += size
    return chunks


def gang_objects(
    seed: int = 4,
) -> tuple[list[JsonObj], list[JsonObj], dict[ObjectKey, PodUsage], dict[str, int]]:
    """(objects with gang keys, the same objects without them, usage, counts)."""
    (nodes, pods, classes, pdbs), usage = generate_objects(NODES, PREEMPTORS, seed)
    rng = random.Random(seed)
    by_namespace: dict[tuple[str, bool], list[JsonObj]] = {}
    for pod in pods:
        if _gpus(pod):
            pending = "nodeName" not in pod["spec"]
            by_namespace.setdefault((pod["metadata"]["namespace"], pending), []).append(pod)
    counts = {"victim gangs": 0, "victim members": 0, "preemptor gangs": 0, "preemptor members": 0}
    for (namespace, pending), members in sorted(by_namespace.items(), key=lambda kv: kv[0]):
        share = members[: len(members) // (5 if pending else 4)]
        for g, gang in enumerate(_chunks(share, rng, 2, 4 if pending else 8)):
            for pod in gang:
                pod["metadata"]["labels"][GANG_COSCHEDULING_LABEL] = (
                    f"{'p' if pending else 'v'}-{namespace}-{g}"
                )
            kind = "preemptor" if pending else "victim"
            counts[f"{kind} gangs"] += 1
            counts[f"{kind} members"] += len(gang)
    with_gangs = nodes + pods + classes + pdbs
    without = copy.deepcopy(with_gangs)
    for obj in without:
        obj["metadata"].get("labels", {}).pop(GANG_COSCHEDULING_LABEL, None)
    return with_gangs, without, usage, counts


def _state(objects: list[JsonObj]) -> ClusterState:
    kinds: dict[str, list[JsonObj]] = {"Node": [], "Pod": [], "PriorityClass": [], "PodDisruptionBudget": []}
    for obj in objects:
        kinds[obj["kind"]].append(obj)
    return ClusterState.from_objects(
        kinds["Node"], kinds["Pod"], kinds["PriorityClass"], kinds["PodDisruptionBudget"]
    )


def measure() -> dict[str, Any]:
    with_objects, without_objects, usage, counts = gang_objects()
    states = {"gangs": _state(with_objects), "no gang keys": _state(without_objects)}
    best = dict.fromkeys(states, float("inf"))
    results: dict[str, Any] = {}
    for _ in range(REPEATS):  # alternated, so both sides see the same machine
        for name, state in states.items():
            started = time.process_time()
            results[name] = plan(state, usage, UNBUDGETED, NOW)
            best[name] = min(best[name], time.process_time() - started)
    return {"best": best, "results": results, "counts": counts}


def main() -> str:
    m = measure()
    best, results, counts = m["best"], m["results"], m["counts"]
    ratio = best["gangs"] / best["no gang keys"]
    rows = "\n".join(
        f"| {name} | {best[name] * 1000:,.0f} ms | {len(r.decisions)} "
        f"({sum(len(d.victims) for d in r.decisions)} victims) | {len(r.unresolved)} |"
        for name, r in results.items()
    )
    verdict = "met" if ratio <= GOAL else "NOT met"
    return (
        "## Gangs in the planner\n\n"
        "Command: `make bench` (all benchmarks), or for this section alone "
        "`.venv/bin/python -m tests.bench.run_all bench_gangs`.\n\n"
        f"The planner benchmark's cluster at {NODES:,} nodes x 8 GPUs with {PREEMPTORS} preemptors "
        f"(tests/bench/bench_gangs.py): a quarter of each namespace's GPU pods in coscheduling gangs of 2-8 "
        f"members ({counts['victim gangs']} gangs, {counts['victim members']} pods, spread over nodes) and a "
        f"fifth of the preemptors in gangs of 2-4 ({counts['preemptor gangs']} gangs, "
        f"{counts['preemptor members']} pods), against the same objects with the gang label removed. CPU "
        f"time of one pass (`plan()`), best of {REPEATS} runs of each, alternated; no eviction budget.\n\n"
        "| cluster | pass (CPU) | decisions | unresolved |\n|---|---|---|---|\n"
        f"{rows}\n\n"
        f"Goal: the pass with gangs at most {GOAL}x the pass without: {ratio:.2f}x, {verdict}.\n"
    )
