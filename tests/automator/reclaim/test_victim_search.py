"""Issue 15: the victim-set search is exact (the set the contract's order names, never a pruned pool);
issue 14: the optimized planner decides as the straightforward one (tests/automator/oracle.py)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest

from automator.objects.cluster import ClusterState
from automator.objects.keys import JsonObj, ObjectKey
from automator.reclaim import planner as planner_module
from automator.reclaim import victims as victims_module
from automator.reclaim.cluster_index import index_cluster
from automator.reclaim.model import PlannerConfig, PodUsage
from automator.reclaim.planner import plan
from tests.automator import k8s
from tests.automator.oracle import brute_force, fits, oracle_plan, planner_outcome


def test_crowded_time_sliced_node_gets_eight_victims_one_of_them_big() -> None:
    # 16 time-sliced 1-GPU idle pods: two old priority-300 pods with 8 cpu each, 14 with 500m; 9 of 32 cpu
    # free. The preemptor needs 8 GPUs and 14 cpu: 7 small pods and one big one (8), not 10 pods.
    objs: list[JsonObj] = [k8s.node("ts", gpus=16, cpu="32")]
    for i in range(2):
        objs.append(
            k8s.pod(f"big-{i}", gpus=1, node_name="ts", priority=300, cpu="8", scheduled_ago=90000 + i)
        )
    for i in range(14):
        objs.append(k8s.pod(f"small-{i:02}", gpus=1, node_name="ts", priority=100, cpu="500m"))
    objs.append(k8s.preemptor("p", gpus=8, cpu="14"))
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")]
    result = plan(k8s.cluster(*objs), k8s.idle(*names), PlannerConfig(), k8s.NOW)
    (decision,) = result.decisions
    evicted = [v.pod.name for v in decision.victims]
    assert len(evicted) == 8
    assert [name for name in evicted if name.startswith("big")] == ["big-0"]  # the one with less run time


def test_a_valid_set_is_found_where_a_pruned_pool_found_none() -> None:
    # A PodDisruptionBudget lets only 6 of the 14 small pods go: every 8-victim set needs both big pods,
    # which rank last; a search among the best-ranked pods only reported the preemptor unresolved.
    objs: list[JsonObj] = [k8s.node("ts", gpus=16, cpu="64")]
    for i in range(2):
        objs.append(k8s.pod(f"big-{i}", gpus=1, node_name="ts", priority=300, cpu="8"))
    for i in range(14):
        objs.append(k8s.pod(f"small-{i:02}", gpus=1, node_name="ts", cpu="500m", labels={"app": "a"}))
    objs.append(k8s.pdb("small", {"matchLabels": {"app": "a"}}, 6))
    objs.append(k8s.preemptor("p", gpus=8, cpu="1"))
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")]
    result = plan(k8s.cluster(*objs), k8s.idle(*names), PlannerConfig(), k8s.NOW)
    assert result.unresolved == []
    (decision,) = result.decisions
    evicted = sorted(v.pod.name for v in decision.victims)
    assert len(evicted) == 8 and evicted[:2] == ["big-0", "big-1"]


def _random_node(rng: random.Random, pods: int, prefix: str = "") -> tuple[list[JsonObj], list[str]]:
    gpus = rng.choice((8, 16))
    objs: list[JsonObj] = [
        k8s.node(f"{prefix}n", gpus=gpus, cpu=str(rng.choice((16, 32, 64))), memory="256Gi")
    ]
    names: list[str] = []
    left = gpus
    for i in range(pods):
        if left <= 0:
            break
        g = min(left, rng.choice((1, 1, 1, 2, 2, 4)))
        left -= g
        name = f"{prefix}v{i:02}"
        objs.append(
            k8s.pod(
                name,
                gpus=g,
                node_name=f"{prefix}n",
                priority=rng.choice((10, 100, 100, 300)),
                cpu=rng.choice(("500m", "1", "2", "4", "8")),
                memory=rng.choice(("4Gi", "16Gi", "64Gi")),
                scheduled_ago=rng.choice((3600, 7200, 7200, 10000 + rng.randrange(5000))),
                labels={"app": rng.choice(("a", "b", "c"))},
            )
        )
        names.append(name)
    return objs, names


@pytest.mark.parametrize("seed", range(150))
def test_chosen_set_equals_brute_force_on_small_nodes(seed: int) -> None:
    rng = random.Random(seed)
    objs, names = _random_node(rng, rng.randrange(1, 11))
    objs.append(k8s.pdb("pdb-a", {"matchLabels": {"app": "a"}}, rng.choice((1, 2, 5))))
    objs.append(
        k8s.preemptor(
            "p",
            gpus=rng.choice((1, 2, 4, 8)),
            cpu=str(rng.choice((1, 8, 16, 30))),
            memory=rng.choice(("8Gi", "100Gi")),
        )
    )
    state = k8s.cluster(*objs)
    usage = k8s.idle(*names)
    config = PlannerConfig()
    index = index_cluster(state, usage, config, k8s.NOW)
    node = index.nodes["n"]
    (pre,) = index.preemptors
    assert pre.req is not None
    expected = brute_force(node.candidates, node.free(), pre.req, index.pdbs.remaining)
    result = plan(state, usage, config, k8s.NOW)
    chosen = [sorted(str(v.pod) for v in d.victims) for d in result.decisions + result.already_fit]
    if expected is None:
        assert chosen == [] and [str(u.preemptor) for u in result.unresolved] == ["ml/p"]
    else:
        assert chosen == [sorted(str(v.key) for v in expected[1])]


def _min_size(candidates: list[Any], free: tuple[int, int, int], req: Any, remaining: Any) -> int | None:
    for size in range(len(candidates) + 1):
        for combo in itertools.combinations(candidates, size):
            counts: dict[Any, int] = {}
            for v in combo:
                for p in v.pdbs:
                    counts[p] = counts.get(p, 0) + 1
            if fits(free, combo, req) and all(remaining.get(p, 0) >= n for p, n in counts.items()):
                return size
    return None


def _pods_on_n(
    node: JsonObj, count: int, draw: Callable[[], dict[str, Any]]
) -> tuple[list[JsonObj], list[str]]:
    """`node` (named n) and `count` pods on it, v00, v01..., each with the keyword arguments of `draw()`."""
    names = [f"v{i:02}" for i in range(count)]
    return [node, *(k8s.pod(name, node_name="n", **draw()) for name in names)], names


@pytest.mark.parametrize("seed", range(20))
def test_chosen_set_is_never_larger_than_needed_on_large_nodes(seed: int) -> None:
    rng = random.Random(1000 + seed)
    objs, names = _pods_on_n(
        k8s.node("n", gpus=24, cpu="48", memory="256Gi"),
        24,
        lambda: {
            "gpus": 1,
            "priority": rng.choice((10, 100, 300)),
            "cpu": rng.choice(("500m", "1", "6")),
            "scheduled_ago": 3600 + rng.randrange(10000),
        },
    )
    objs.append(k8s.preemptor("p", gpus=rng.choice((4, 6)), cpu=str(rng.choice((10, 20, 30)))))
    state = k8s.cluster(*objs)
    usage = k8s.idle(*names)
    index = index_cluster(state, usage, PlannerConfig(), k8s.NOW)
    node = index.nodes["n"]
    (pre,) = index.preemptors
    smallest = _min_size(node.candidates, node.free(), pre.req, index.pdbs.remaining)
    result = plan(state, usage, PlannerConfig(), k8s.NOW)
    sizes = [len(d.victims) for d in result.decisions]
    assert sizes == ([] if smallest is None else [smallest])


def test_a_search_cut_off_skips_the_node_and_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(victims_module, "SEARCH_BUDGET", 3)
    objs: list[JsonObj] = [k8s.node("ts", gpus=16, cpu="32")]
    for i in range(16):
        objs.append(k8s.pod(f"v{i:02}", gpus=1, node_name="ts", cpu=str(1 + i % 3), scheduled_ago=4000 + i))
    objs.append(k8s.preemptor("p", gpus=8, cpu="20"))
    names = [f"v{i:02}" for i in range(16)]
    result = plan(k8s.cluster(*objs), k8s.idle(*names), PlannerConfig(), k8s.NOW)
    assert result.decisions == []  # never a larger (or unproven) set
    (unresolved,) = result.unresolved
    assert "search cut off" in unresolved.reason and "ts" in unresolved.reason
    assert [(str(c.preemptor), c.node) for c in result.search_cut_off] == [("ml/p", "ts")]


def _random_cluster(seed: int) -> tuple[ClusterState, dict[ObjectKey, PodUsage]]:
    rng = random.Random(seed)
    objs: list[JsonObj] = [
        k8s.reclaim_class("reclaim", 1000),
        k8s.reclaim_class("reclaim-high", 2000),
        k8s.victim_class("scavenger", 10, minimum_preemptable_priority="1500"),
    ]
    usage: dict[ObjectKey, PodUsage] = {}
    for n in range(rng.randrange(1, 6)):
        name = f"node-{n}"
        model = rng.choice(("a100", "h100"))
        taints = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}] if rng.random() < 0.15 else None
        objs.append(k8s.node(name, gpus=8, cpu="64", labels={"gpu": model}, taints=taints))
        left = 8
        for i in range(rng.randrange(2, 9)):
            g = min(left, rng.choice((1, 1, 2, 4)))
            if g <= 0:
                break
            left -= g
            pod_name = f"{name}-p{i}"
            scavenger = rng.random() < 0.2
            objs.append(
                k8s.pod(
                    pod_name,
                    gpus=g,
                    node_name=name,
                    priority=rng.choice((100, 100, 300, 1500)),
                    priority_class="scavenger" if scavenger else None,
                    cpu=rng.choice(("1", "4", "16")),
                    scheduled_ago=rng.choice((3600, 7200, 9000)),
                    labels={"app": rng.choice(("a", "b"))},
                    terminating=rng.random() < 0.05,
                )
            )
            roll = rng.random()
            if roll < 0.7:
                usage[ObjectKey("ml", pod_name)] = PodUsage(0.0 if roll < 0.5 else 0.9)
    objs.append(k8s.pdb("pdb-a", {"matchLabels": {"app": "a"}}, rng.choice((0, 1, 3))))
    for i in range(rng.randrange(1, 7)):
        high = rng.random() < 0.3
        spec: dict[str, Any] = {}
        if rng.random() < 0.4:
            spec["nodeSelector"] = {"gpu": rng.choice(("a100", "h100"))}
        objs.append(
            k8s.preemptor(
                f"pre-{i}",
                gpus=rng.choice((1, 2, 4, 8)),
                priority=2000 if high else 1000,
                priority_class="reclaim-high" if high else "reclaim",
                cpu=rng.choice(("1", "8", "40")),
                created_ago=100 + rng.randrange(50),
                **spec,
            )
        )
    return k8s.cluster(*objs), usage


@pytest.mark.parametrize("ranked", [False, True], ids=["full-search", "ranked-search"])
@pytest.mark.parametrize("seed", range(200))
def test_planner_decides_as_the_straightforward_oracle(
    seed: int, ranked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ranked: the fleet-scale path (nodes searched in the order of their bounds, reclaim/ranking.py),
    # which a pass takes once full verdicts are no longer recorded.
    if ranked:
        monkeypatch.setattr(planner_module, "VERDICT_LIMIT", 0)
    state, usage = _random_cluster(seed)
    config = PlannerConfig()
    assert planner_outcome(state, usage, config, k8s.NOW) == oracle_plan(state, usage, config, k8s.NOW)


@pytest.mark.parametrize("seed", range(30))
def test_dominance_pruning_keeps_the_same_set(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Single pods that are better victims than others in every set (same GPUs, priority and budgets, more
    # cpu and memory, less run time) cut the search; the set found must be the one found without the cut.
    rng = random.Random(5000 + seed)
    objs, names = _pods_on_n(
        k8s.node("n", gpus=20, cpu="80", memory="512Gi"),
        20,
        lambda: {
            "gpus": rng.choice((1, 1, 2)),
            "priority": rng.choice((10, 100)),
            "cpu": f"{rng.randrange(100, 4000)}m",
            "memory": f"{rng.choice((1, 2, 4))}Gi",
            "scheduled_ago": rng.choice((3600, 3600, 3600 + rng.randrange(5000))),
        },
    )
    objs.append(k8s.preemptor("p", gpus=rng.choice((4, 8)), cpu=str(rng.choice((10, 20, 30)))))
    state, usage = k8s.cluster(*objs), k8s.idle(*names)
    with_cut = planner_outcome(state, usage, PlannerConfig(), k8s.NOW)
    monkeypatch.setattr(victims_module, "_dominates", lambda a, b: False)
    monkeypatch.setattr(victims_module, "SEARCH_BUDGET", 10**8)
    assert with_cut == planner_outcome(state, usage, PlannerConfig(), k8s.NOW)


def _full_plan(state: ClusterState, usage: dict[ObjectKey, PodUsage], config: PlannerConfig) -> list[Any]:
    result = plan(state, usage, config, k8s.NOW)
    return [result.decisions, result.already_fit, result.unresolved, result.search_cut_off]


@pytest.mark.parametrize("budget", [0, 1, 2, 3, 10])
def test_the_ranked_search_keeps_the_eviction_budget(budget: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # The fleet-scale path must stop the pass at --max-evictions-per-pass as the full search does (it used to
    # commit every set it found, whatever the budget).
    objs: list[JsonObj] = []
    names = []
    for n in range(4):
        objs.append(k8s.node(f"n{n}", gpus=8))
        names.append(f"v{n}")
        objs.append(k8s.pod(names[-1], gpus=8, node_name=f"n{n}"))
    objs += [k8s.preemptor(f"p{i}", gpus=8, created_ago=100 + i) for i in range(4)]
    state, usage = k8s.cluster(*objs), k8s.idle(*names)
    config = PlannerConfig(max_evictions_per_pass=budget)
    full = _full_plan(state, usage, config)
    assert len(full[0]) == min(budget, 4)
    monkeypatch.setattr(planner_module, "VERDICT_LIMIT", 0)
    assert _full_plan(state, usage, config) == full


def test_no_victims_key_is_the_key_of_the_empty_set() -> None:
    # the constant a node that fits as it is gets (victims.NO_VICTIMS) is set_key of no victims
    assert victims_module.set_key(()) == victims_module.NO_VICTIMS


def test_the_ranked_search_reads_past_fitting_nodes_the_preemptor_may_not_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 14: a shape's nodes that fit as they are come first in its ranking and the other nodes are
    # ranked only when a preemptor reads past them. Here the shape's only fitting node (a0, where p0 already
    # fits) is ruled out for p1 by its nodeSelector: the h100 nodes are then ranked and searched, and p1
    # gets the victim the full search gives it.
    objs: list[JsonObj] = [k8s.node("a0", labels={"gpu": "a100"})]
    names = []
    for n in range(2):
        objs.append(k8s.node(f"h{n}", labels={"gpu": "h100"}))
        for i in range(2):
            names.append(f"v{n}{i}")
            objs.append(k8s.pod(names[-1], gpus=4, node_name=f"h{n}", scheduled_ago=7200 + 10 * n + i))
    selective = k8s.preemptor("p1", gpus=1, created_ago=100)
    selective["spec"]["nodeSelector"] = {"gpu": "h100"}
    objs += [k8s.preemptor("p0", gpus=1, created_ago=200), selective]
    state, usage = k8s.cluster(*objs), k8s.idle(*names)
    full = _full_plan(state, usage, PlannerConfig())
    assert [d.node for d in full[1]] == ["a0"]
    assert [(d.preemptor.name, d.node, len(d.victims)) for d in full[0]] == [("p1", "h0", 1)]
    monkeypatch.setattr(planner_module, "VERDICT_LIMIT", 0)
    assert _full_plan(state, usage, PlannerConfig()) == full
