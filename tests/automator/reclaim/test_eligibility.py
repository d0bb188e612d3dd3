"""Issue 4 victim rules 0-8, each from both sides, through the public planner."""

from __future__ import annotations

import random
from typing import Any

import pytest

from automator.objects.keys import ObjectKey
from automator.objects.pdb import pdb_records
from automator.objects.pod import pod_record
from automator.reclaim import eligibility
from automator.reclaim.eligibility import PdbIndex
from automator.reclaim.model import PlannerConfig, PodUsage, Verdict
from automator.reclaim.planner import plan, usage_windows
from tests.automator import k8s

VICTIM = ObjectKey("ml", "v")


def verdict(
    *objs: Any, usage: dict[ObjectKey, PodUsage] | None = None, pre_priority: int = 1000, **victim_kw: Any
) -> Verdict:
    """Plan one 4-GPU preemptor against a full 4-GPU node holding the 4-GPU victim `v`; return v's verdict."""
    victim_kw.setdefault("priority", 100)
    state = k8s.cluster(
        k8s.node("n1", gpus=4),
        k8s.pod("v", gpus=4, node_name="n1", **victim_kw),
        k8s.preemptor("p", gpus=4, priority=pre_priority),
        *objs,
    )
    result = plan(state, k8s.idle("v") if usage is None else usage, PlannerConfig(), k8s.NOW)
    verdicts = result.verdicts[VICTIM]
    assert len(verdicts) == 1 and verdicts[0].preemptor == ObjectKey("ml", "p")
    chosen = [v.pod for d in result.decisions for v in d.victims]
    assert (VICTIM in chosen) == verdicts[0].eligible
    return verdicts[0]


def test_rule8_idle_pod_is_eligible() -> None:
    v = verdict()
    assert v.eligible and v.rule == "8-idle"


# rule 0
def test_rule0_pdb_with_no_disruptions_allowed_protects() -> None:
    v = verdict(k8s.pdb("b", {"matchLabels": {"app": "x"}}, 0), labels={"app": "x"})
    assert not v.eligible and v.rule == "0-pdb"


def test_rule0_pdb_allowing_a_disruption_does_not_protect() -> None:
    assert verdict(k8s.pdb("b", {"matchLabels": {"app": "x"}}, 1), labels={"app": "x"}).eligible


def test_rule0_pdb_not_selecting_the_pod_does_not_protect() -> None:
    assert verdict(k8s.pdb("b", {"matchLabels": {"app": "y"}}, 0), labels={"app": "x"}).eligible
    assert verdict(
        k8s.pdb("b", {"matchLabels": {"app": "x"}}, 0, namespace="other"), labels={"app": "x"}
    ).eligible


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        ({}, True),  # empty selector: every pod of the namespace (policy/v1)
        (None, False),  # null selector: none
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "z"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
        ({"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "app", "operator": "Exists"}]}, True),
    ],
)
def test_rule0_selector_forms(selector: Any, selected: bool) -> None:
    v = verdict(k8s.pdb("b", selector, 0), labels={"app": "x"})
    assert v.eligible is not selected


def test_rule0_pdb_without_status_protects() -> None:
    assert verdict(k8s.pdb("b", {}, None)).rule == "0-pdb"


def test_rule0_two_pdbs_protect_as_the_eviction_api_would_fail() -> None:
    v = verdict(k8s.pdb("a", {}, 1), k8s.pdb("b", {}, 1))
    assert not v.eligible and "several" in v.reason


def test_rule0_comes_before_rule1() -> None:
    pc = k8s.victim_class(minimum_preemptable_priority="500")
    v = verdict(pc, k8s.pdb("b", {}, 0), priority_class="batch")
    assert v.rule == "0-pdb"


# rule 1
def test_rule1_minimum_reached_skips_usage_checks() -> None:
    pc = k8s.victim_class(minimum_preemptable_priority="1000", toleration_seconds="-1")
    v = verdict(pc, priority_class="batch", usage={}, scheduled_ago=None)
    assert v.eligible and v.rule == "1-minimum-preemptable-priority"


def test_rule1_minimum_not_reached_falls_through() -> None:
    pc = k8s.victim_class(minimum_preemptable_priority="1001")
    v = verdict(pc, priority_class="batch", usage=k8s.busy("v"))
    assert not v.eligible and v.rule == "6-gpu-busy"


# rule 2
def test_rule2_negative_toleration_protects() -> None:
    v = verdict(k8s.victim_class(toleration_seconds="-1"), priority_class="batch")
    assert not v.eligible and v.rule == "2-toleration-negative"


def test_rule2_zero_toleration_does_not_protect() -> None:
    assert verdict(k8s.victim_class(toleration_seconds="0"), priority_class="batch").eligible


# rule 3
def test_rule3_not_scheduled_protects() -> None:
    v = verdict(scheduled_ago=None)
    assert not v.eligible and v.rule == "3-not-scheduled"


# rule 4
@pytest.mark.parametrize(
    ("annotations", "scheduled_ago", "eligible"),
    [
        ({}, 1799, False),  # default window 1800 s is also a minimum age
        ({}, 1800, True),
        ({"toleration_seconds": "3600"}, 3000, False),
        ({"toleration_seconds": "3600"}, 3600, True),
        ({"gpu_idle_seconds": "60", "cpu_idle_seconds": "600"}, 300, False),
        ({"gpu_idle_seconds": "60"}, 300, True),
    ],
)
def test_rule4_minimum_age(annotations: dict[str, str], scheduled_ago: float, eligible: bool) -> None:
    usage = {VICTIM: PodUsage(0.0, cpu_cores=0.0, gpu_recent_max=0.0)}
    v = verdict(
        k8s.victim_class(**annotations), priority_class="batch", scheduled_ago=scheduled_ago, usage=usage
    )
    assert v.eligible is eligible
    if not eligible:
        assert v.rule == "4-too-young"


# rule 5
def test_rule5_unknown_usage_protects() -> None:
    v = verdict(usage={})
    assert not v.eligible and v.rule == "5-usage-unknown"
    assert verdict(usage={VICTIM: PodUsage(None, gpu_recent_max=0.0)}).rule == "5-usage-unknown"
    assert verdict(usage={VICTIM: PodUsage(float("nan"))}).rule == "5-usage-unknown"


@pytest.mark.parametrize(("coverage", "eligible"), [(0.79, False), (0.8, True), (1.0, True)])
def test_rule5_coverage(coverage: float, eligible: bool) -> None:
    v = verdict(usage={VICTIM: PodUsage(0.0, coverage=coverage, gpu_recent_max=0.0)})
    assert v.eligible is eligible
    if not eligible:
        assert v.rule == "5-coverage-low"


# rule 6
@pytest.mark.parametrize(("activity", "eligible"), [(0.051, False), (0.05, True), (0.0, True)])
def test_rule6_threshold_default(activity: float, eligible: bool) -> None:
    v = verdict(usage={VICTIM: PodUsage(activity, gpu_recent_max=0.0)})
    assert v.eligible is eligible
    if not eligible:
        assert v.rule == "6-gpu-busy" and "0.051" in v.reason


def test_rule6_threshold_from_annotation() -> None:
    pc = k8s.victim_class(gpu_idle_usage_threshold="0.3")
    assert verdict(pc, priority_class="batch", usage={VICTIM: PodUsage(0.3, gpu_recent_max=0.0)}).eligible
    assert not verdict(
        pc, priority_class="batch", usage={VICTIM: PodUsage(0.31, gpu_recent_max=0.0)}
    ).eligible


# rule 7
@pytest.mark.parametrize(
    ("cpu", "rule"), [(None, "7-cpu-unknown"), (0.5, "7-cpu-busy"), (0.1, "8-idle"), (0.0, "8-idle")]
)
def test_rule7_cpu_checked_when_window_set(cpu: float | None, rule: str) -> None:
    pc = k8s.victim_class(cpu_idle_seconds="600", cpu_idle_usage_threshold="0.1")
    v = verdict(pc, priority_class="batch", usage={VICTIM: PodUsage(0.0, cpu_cores=cpu, gpu_recent_max=0.0)})
    assert v.rule == rule and v.eligible is (rule == "8-idle")


def test_rule7_cpu_ignored_without_window() -> None:
    assert verdict(usage={VICTIM: PodUsage(0.0, cpu_cores=None, gpu_recent_max=0.0)}).eligible


# defaults and malformed annotations
@pytest.mark.parametrize(
    "annotations",
    [
        {"gpu_idle_seconds": "abc"},
        {"gpu_idle_usage_threshold": "high"},
        {"toleration_seconds": "1.5"},
        {"minimum_preemptable_priority": "x"},
        {"gpu_idle_seconds": "-5"},
    ],
)
def test_malformed_annotation_protects_and_warns(annotations: dict[str, str]) -> None:
    pc = k8s.victim_class(**annotations)
    state = k8s.cluster(
        k8s.node("n1", gpus=4),
        k8s.pod("v", gpus=4, node_name="n1", priority_class="batch"),
        k8s.preemptor("p"),
        pc,
    )
    result = plan(state, k8s.idle("v"), PlannerConfig(), k8s.NOW)
    assert result.decisions == []
    assert result.verdicts[VICTIM][0].rule == "annotation-malformed"
    (warning,) = result.warnings
    assert warning.priority_class == "batch" and warning.pods == (VICTIM,)
    assert warning.annotation.endswith(next(iter(annotations)).replace("_", "-"))


def test_pod_without_class_uses_defaults() -> None:
    v = verdict(priority_class=None, usage={VICTIM: PodUsage(0.04, gpu_recent_max=0.0)})
    assert v.eligible and "1800 s" in v.reason


@pytest.mark.parametrize("window", ["0", None])
def test_zero_or_unset_window_falls_back_to_default(window: str | None) -> None:
    pc = k8s.victim_class(**({"gpu_idle_seconds": window} if window else {}))
    state = k8s.cluster(k8s.node("n1"), k8s.pod("v", node_name="n1", priority_class="batch"), pc)
    config = PlannerConfig(default_gpu_idle_seconds=900)
    assert usage_windows(state, config)[VICTIM].gpu_seconds == 900


def test_usage_windows_cover_only_gpu_holding_bound_pods() -> None:
    pc = k8s.victim_class(gpu_idle_seconds="600", cpu_idle_seconds="300")
    state = k8s.cluster(
        k8s.node("n1"),
        k8s.pod("v", node_name="n1", priority_class="batch"),
        k8s.pod("cpu-only", gpus=0, node_name="n1"),
        k8s.pod("done", node_name="n1", phase="Succeeded"),
        k8s.preemptor("p"),
        pc,
    )
    windows = usage_windows(state, PlannerConfig())
    assert set(windows) == {VICTIM}
    assert (windows[VICTIM].gpu_seconds, windows[VICTIM].cpu_seconds) == (600, 300)


def test_equal_priority_is_never_a_victim() -> None:
    state = k8s.cluster(
        k8s.node("n1", gpus=4), k8s.pod("v", gpus=4, node_name="n1", priority=1000), k8s.preemptor("p")
    )
    result = plan(state, k8s.idle("v"), PlannerConfig(), k8s.NOW)
    assert result.decisions == [] and VICTIM not in result.verdicts
    assert "not lower priority" in result.unresolved[0].reason


def test_lower_priority_from_priority_class_when_spec_priority_absent() -> None:
    state = k8s.cluster(
        k8s.node("n1", gpus=4),
        k8s.pod("v", gpus=4, node_name="n1", priority=None, priority_class="low"),
        k8s.priority_class("low", 5),
        k8s.preemptor("p"),
    )
    result = plan(state, k8s.idle("v"), PlannerConfig(), k8s.NOW)
    assert result.decisions[0].victims[0].priority == 5


def test_global_default_priority_applies_to_pods_without_class() -> None:
    state = k8s.cluster(
        k8s.node("n1", gpus=4),
        k8s.pod("v", gpus=4, node_name="n1", priority=None),
        k8s.priority_class("everyone", 2000, global_default=True),
        k8s.preemptor("p", priority=1000),
    )
    result = plan(state, k8s.idle("v"), PlannerConfig(), k8s.NOW)
    assert result.decisions == []  # the victim's default priority 2000 is not lower


def _random_selector(rng: random.Random, labels: Any) -> Any:
    kind = rng.randrange(5)
    if kind == 0:
        return None  # selects nothing
    if kind == 1:
        return {}  # selects every pod
    selector: dict[str, Any] = {"matchLabels": labels()}
    if kind >= 3:
        operator = rng.choice(("In", "NotIn", "Exists", "Bogus"))
        selector["matchExpressions"] = [{"key": "app", "operator": operator, "values": ["a"]}]
    return selector


@pytest.mark.parametrize("seed", range(60))
def test_pdbs_filed_by_their_first_label_cover_the_pods_checking_every_pdb_covers(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 14: a PDB whose selector is matchLabels alone is only checked for pods with its first label
    # (eligibility._anchors); the PDBs covering a pod, their order and the protection reason must be those of
    # checking every PDB, whatever the selectors (null, empty, None or unhashable values, bad operators).
    rng = random.Random(seed)
    values = ("a", "b", None, 1, True, 1.0, ["x"])

    def labels() -> dict[str, Any]:
        return {k: rng.choice(values) for k in rng.sample(["app", "tier", "team"], rng.randrange(4))}

    pdbs = [
        {
            "metadata": {"name": f"pdb-{i}", "namespace": "ml"},
            "spec": {"selector": _random_selector(rng, labels)},
            "status": {"disruptionsAllowed": rng.randrange(2)},
        }
        for i in range(rng.randrange(1, 9))
    ]
    pods = [pod_record({"metadata": {"namespace": "ml", "labels": labels()}}) for _ in range(20)]
    pdbs = pdb_records(pdbs)
    filed = [PdbIndex.build(pdbs).covering(pod) for pod in pods]
    monkeypatch.setattr(eligibility, "_maybe_selecting", lambda anchors, count, pod_labels: range(count))
    assert filed == [PdbIndex.build(pdbs).covering(pod) for pod in pods]
