"""Issue 14: the plan loop's shortcuts give what the general code gives (automator/reclaim/victims.py,
automator/reclaim/ranking.py)."""

from __future__ import annotations

import random

import pytest

from automator.objects.keys import JsonObj
from automator.reclaim import victims as victims_module
from automator.reclaim.cluster_index import ClusterIndex, index_cluster
from automator.reclaim.model import PlannerConfig
from automator.reclaim.ranking import _by_tie_key, _single, tie_key
from tests.automator import k8s


def _index(objs: list[JsonObj]) -> ClusterIndex:
    """The index of a node n with pods v0, v1... on it, all of them idle."""
    return index_cluster(k8s.cluster(*objs), k8s.idle(*(f"v{i}" for i in range(8))), PlannerConfig(), k8s.NOW)


@pytest.mark.parametrize("seed", range(20))
def test_names_sorted_by_tie_key_in_c_as_by_tie_key(seed: int) -> None:
    # prefixes, the empty name and characters beyond the Basic Multilingual Plane included
    rng = random.Random(seed)
    alphabet = "ab-0Z.\u00e9\U0001f600"
    names = list({"".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 6))) for _ in range(60)})
    assert _by_tie_key(names) == sorted(names, key=tie_key, reverse=True)


@pytest.mark.parametrize("seed", range(200))
def test_every_subset_of_a_few_pods_gives_the_branch_and_bounds_set(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    objs: list[JsonObj] = [k8s.node("n", gpus=8, cpu="16", memory="64Gi")]
    for i in range(rng.randrange(1, victims_module._FEW + 1)):
        objs.append(
            k8s.pod(
                f"v{i}",
                gpus=rng.choice((1, 1, 2, 4)),
                node_name="n",
                priority=rng.choice((10, 100, 300)),
                cpu=rng.choice(("1", "2", "8")),
                memory=rng.choice(("4Gi", "32Gi")),
                scheduled_ago=rng.choice((3600, 3600, 7200 + rng.randrange(100))),
                labels={"app": rng.choice(("a", "b"))},
            )
        )
    objs.append(k8s.pdb("pdb-a", {"matchLabels": {"app": "a"}}, rng.choice((0, 1, 2))))
    index = index_cluster(
        k8s.cluster(*objs), k8s.idle(*(f"v{i}" for i in range(8))), PlannerConfig(), k8s.NOW
    )
    pods = index.nodes["n"].candidates
    need = (rng.choice((1, 2, 4, 8)), rng.choice((-1, 1000, 9000)), rng.choice((-1, 40 * 2**30)))
    few = victims_module.best_set(pods, need, index.pdbs)
    monkeypatch.setattr(victims_module, "_FEW", 0)
    assert few == victims_module.best_set(pods, need, index.pdbs)


@pytest.mark.parametrize("seed", range(100))
def test_the_best_single_victim_is_the_first_that_frees_enough_in_sorted_order(seed: int) -> None:
    rng = random.Random(seed)
    objs: list[JsonObj] = [k8s.node("n", gpus=8, cpu="32", memory="64Gi")]
    for i in range(rng.randrange(1, 7)):
        objs.append(
            k8s.pod(
                f"v{i}",
                gpus=rng.choice((1, 2, 4)),
                node_name="n",
                priority=rng.choice((10, 100)),
                cpu=rng.choice(("1", "8")),
                scheduled_ago=rng.choice((3600, 7200)),
            )
        )
    index = index_cluster(
        k8s.cluster(*objs), k8s.idle(*(f"v{i}" for i in range(8))), PlannerConfig(), k8s.NOW
    )
    pods = index.nodes["n"].candidates
    need = (rng.choice((1, 2, 3, 4, 5)), rng.choice((-1, 0, 4000)), rng.choice((-1, 0)))
    # the straightforward reading: the first pod freeing enough, pods sorted by (GPUs, priority, run time)
    need_g, need_c, need_m = need
    ranked = sorted(pods, key=lambda p: (p.req.gpus, p.priority, round(p.age, 3), p.req.cpu_m, p.req.memory))
    first = next(
        (p for p in ranked if p.req.gpus >= need_g and p.req.cpu_m >= need_c and p.req.memory >= need_m), None
    )
    expected = (
        None if first is None else (1, first.req.gpus, first.priority, first.priority, round(first.age, 3))
    )
    assert _single(pods, *need) == expected
