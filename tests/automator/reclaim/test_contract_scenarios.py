"""Issue 4 semantics, sentence by sentence, black-box through the CLI.

Each scenario writes a kubectl-style `kind: List` and a usage file, runs `gpu-automator plan --output json`
(or `explain`) and reads only the contract's JSON keys. Times are relative to NOW, passed as --now.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from automator import cli
from automator.objects.keys import JsonObj
from steward_common.conventions import LAST_RECLAIM_ANNOTATION, RECLAIM_ANNOTATION
from tests.automator import k8s

NOW = k8s.ts(k8s.NOW)
GPU = k8s.GPU
MIN_PRIO = "minimum_preemptable_priority"


def usage(name: str, activity: float | None = 0.0, namespace: str = "ml", **extra: Any) -> JsonObj:
    entry: JsonObj = {"namespace": namespace, "name": name, **extra}
    if activity is not None:
        entry["gpu_activity"] = activity
        entry.setdefault("gpu_recent_max", activity)  # steady: the recent maximum is the average
    return entry


class Cli:
    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.tmp_path = tmp_path
        self.capsys = capsys

    def files(self, objs: list[JsonObj], pods: list[JsonObj]) -> list[str]:
        if not any(o["kind"] == "PriorityClass" and o["metadata"]["name"] == "reclaim" for o in objs):
            objs = [*objs, k8s.reclaim_class()]
        cluster = self.tmp_path / "cluster.yaml"
        cluster.write_text(
            yaml.safe_dump(
                {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": objs}
            )
        )
        usage_file = self.tmp_path / "usage.yaml"
        usage_file.write_text(yaml.safe_dump({"pods": pods}))
        return ["--cluster", str(cluster), "--usage", str(usage_file)]

    def call(self, *argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = self.capsys.readouterr()
        return code, out, err

    def plan(self, objs: list[JsonObj], pods: list[JsonObj], now: str | None = NOW, *flags: str) -> JsonObj:
        when = ["--now", now] if now is not None else []
        code, out, err = self.call("plan", *self.files(objs, pods), *when, "--output", "json", *flags)
        assert code == 0, err
        result: JsonObj = json.loads(out)
        return result

    def explain(self, pod: str, objs: list[JsonObj], pods: list[JsonObj]) -> str:
        code, out, err = self.call("explain", pod, *self.files(objs, pods), "--now", NOW)
        assert code == 0, err
        return out

    def fail(self, objs: list[JsonObj], pods: list[JsonObj], *extra: str) -> str:
        argv = ["plan", *self.files(objs, pods), *(extra or ("--now", NOW)), "--output", "json"]
        code, out, err = self.call(*argv)
        assert code == 2 and out == "", (code, out, err)
        return err


@pytest.fixture
def run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(tmp_path, capsys)


def evicted(result: JsonObj) -> dict[str, list[str]]:
    return {d["preemptor"]: d["victims"] for d in result["decisions"]}


def unresolved(result: JsonObj) -> list[str]:
    return [u["preemptor"] for u in result["unresolved"]]


def one_victim(victim: JsonObj, pre: JsonObj | None = None, *extra: JsonObj) -> list[JsonObj]:
    """A full 4-GPU node holding `victim` and a preemptor needing 4 GPUs."""
    return [k8s.node("n1", gpus=4), victim, pre or k8s.preemptor("p"), *extra]


# --- JSON shape -------------------------------------------------------------------------------------------


def test_json_shape_of_decisions_and_unresolved(run: Cli) -> None:
    objs = [
        k8s.node("n1", gpus=4),
        k8s.pod("v", gpus=4, node_name="n1"),
        k8s.preemptor("p"),
        k8s.preemptor("q", gpus=2, created_ago=10),
    ]
    result = run.plan(objs, [usage("v")])
    (decision,) = result["decisions"]
    assert decision["preemptor"] == "ml/p" and decision["node"] == "n1"
    assert decision["victims"] == ["ml/v"]
    assert decision["gpus_freed"] == 4 and type(decision["gpus_freed"]) is int
    (item,) = result["unresolved"]
    assert item["preemptor"] == "ml/q" and isinstance(item["reason"], str) and item["reason"]
    assert result["already_fit"] == []


# --- preemptors -----------------------------------------------------------------------------------------


def _not_unschedulable(pre: JsonObj) -> None:
    pre["status"]["conditions"][0]["reason"] = "SchedulerError"


def _scheduled_true(pre: JsonObj) -> None:
    pre["status"]["conditions"][0]["status"] = "True"


def _no_condition(pre: JsonObj) -> None:
    pre["status"]["conditions"] = []


def _running(pre: JsonObj) -> None:
    pre["status"]["phase"] = "Running"


def _bound(pre: JsonObj) -> None:
    pre["spec"]["nodeName"] = "elsewhere"


def _no_gpus(pre: JsonObj) -> None:
    pre["spec"]["containers"][0]["resources"]["limits"] = {}


def _other_class(pre: JsonObj) -> None:
    pre["spec"]["priorityClassName"] = "plain"


def _no_class(pre: JsonObj) -> None:
    del pre["spec"]["priorityClassName"]


def _gpu_request_other_resource(pre: JsonObj) -> None:
    pre["spec"]["containers"][0]["resources"]["limits"] = {"example.com/fpga": "4"}


@pytest.mark.parametrize(
    "spoil",
    [
        _not_unschedulable,
        _scheduled_true,
        _no_condition,
        _running,
        _bound,
        _no_gpus,
        _other_class,
        _no_class,
        _gpu_request_other_resource,
    ],
)
def test_each_missing_preemptor_condition_means_not_a_preemptor(run: Cli, spoil: Any) -> None:
    objs = one_victim(k8s.pod("v", gpus=4, node_name="n1"), None, k8s.priority_class("plain", 1000))
    assert evicted(run.plan(objs, [usage("v")])) == {"ml/p": ["ml/v"]}  # the unspoilt scenario acts
    spoil(objs[2])
    result = run.plan(objs, [usage("v")])
    assert result["decisions"] == [] and result["unresolved"] == [] and result["already_fit"] == []


@pytest.mark.parametrize(("value", "is_preemptor"), [("true", True), ("false", False), ("", False)])
def test_class_annotation_must_be_true(run: Cli, value: str, is_preemptor: bool) -> None:
    cls = k8s.priority_class("reclaim", 1000, {RECLAIM_ANNOTATION: value})
    objs = [*one_victim(k8s.pod("v", gpus=4, node_name="n1")), cls]
    assert bool(run.plan(objs, [usage("v")])["decisions"]) is is_preemptor


def _preemptor_with(containers: list[int], init: list[int]) -> JsonObj:
    pre = k8s.preemptor("p", gpus=1)
    pre["spec"]["containers"] = [
        {"name": f"c{i}", "resources": {"limits": {GPU: str(n)}}} for i, n in enumerate(containers)
    ]
    if init:
        pre["spec"]["initContainers"] = [
            {"name": f"i{i}", "resources": {"limits": {GPU: str(n)}}} for i, n in enumerate(init)
        ]
    return pre


@pytest.mark.parametrize(
    ("containers", "init", "victims"),
    [
        ([1, 1], [], 1),  # sum 2
        ([1, 1], [1], 1),  # max(2, 1): init containers are not added to the app containers
        ([1, 1], [3], 2),  # max(2, 3)
        ([1], [2, 3], 2),  # largest init container 3, not the sum 5 of them
        ([2, 3], [], None),  # sum 5 > the 4 reclaimable GPUs
    ],
)
def test_gpu_count_is_max_of_sum_and_largest_init(
    run: Cli, containers: list[int], init: list[int], victims: int | None
) -> None:
    objs = [
        k8s.node("n1", gpus=8),
        k8s.pod("busy", gpus=4, node_name="n1"),
        k8s.pod("v1", gpus=2, node_name="n1"),
        k8s.pod("v2", gpus=2, node_name="n1"),
        _preemptor_with(containers, init),
    ]
    result = run.plan(objs, [usage("busy", 0.9), usage("v1"), usage("v2")])
    if victims is None:
        assert unresolved(result) == ["ml/p"] and result["decisions"] == []
    else:
        assert len(result["decisions"][0]["victims"]) == victims


def test_preemptors_by_priority_then_creation_time(run: Cli) -> None:
    objs = [
        k8s.node("n1", gpus=4),
        k8s.pod("v", gpus=4, node_name="n1"),
        k8s.priority_class("reclaim-high", 2000, {RECLAIM_ANNOTATION: "true"}),
        k8s.preemptor("old-low", priority=1000, created_ago=9000),
        k8s.preemptor("new-high", priority=2000, priority_class="reclaim-high", created_ago=10),
    ]
    assert evicted(run.plan(objs, [usage("v")])) == {"ml/new-high": ["ml/v"]}
    objs[-1] = k8s.preemptor("new-same", priority=1000, created_ago=10)
    assert evicted(run.plan(objs, [usage("v")])) == {"ml/old-low": ["ml/v"]}


def test_priority_comes_from_the_class_when_spec_priority_is_absent(run: Cli) -> None:
    high = k8s.preemptor("high", priority=None, priority_class="reclaim-high", created_ago=10)
    low = k8s.preemptor("low", priority=None, created_ago=9000)
    objs = [
        *one_victim(k8s.pod("v", gpus=4, node_name="n1", priority=None, priority_class="batch"), high),
        k8s.priority_class("reclaim-high", 2000, {RECLAIM_ANNOTATION: "true"}),
        k8s.victim_class("batch", 100),
        low,
    ]
    assert evicted(run.plan(objs, [usage("v")])) == {"ml/high": ["ml/v"]}


def test_victims_and_freed_gpus_are_not_offered_to_the_next_preemptor(run: Cli) -> None:
    objs = [
        k8s.node("n1", gpus=4),
        k8s.pod("v", gpus=4, node_name="n1"),
        k8s.preemptor("first", gpus=2, created_ago=100),
        k8s.preemptor("second", gpus=2, created_ago=50),
    ]
    result = run.plan(objs, [usage("v")])
    assert evicted(result) == {"ml/first": ["ml/v"]} and unresolved(result) == ["ml/second"]
    objs += [k8s.node("n2", gpus=4), k8s.pod("w", gpus=4, node_name="n2")]
    result = run.plan(objs, [usage("v"), usage("w")])
    assert evicted(result) == {"ml/first": ["ml/v"], "ml/second": ["ml/w"]}


# --- cooldown -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stamp", "cooling"),
    [
        (k8s.ago(100), True),
        (k8s.ago(299), True),
        (k8s.ago(300), False),  # not younger than the cooldown any more
        (k8s.ago(3600), False),
        ("2025-06-01T11:58:20.500000Z", True),
        ("2025-06-01T13:58:20+02:00", True),  # 11:58:20Z, 100 s ago
        ("2025-06-01T06:55:00-05:00", False),  # 11:55:00Z, 300 s ago
        ("2025-06-01T14:00:00+02:00", True),  # 12:00:00Z: just now
    ],
)
def test_cooldown(run: Cli, stamp: str, cooling: bool) -> None:
    pre = k8s.preemptor("p", annotations={LAST_RECLAIM_ANNOTATION: stamp})
    result = run.plan(one_victim(k8s.pod("v", gpus=4, node_name="n1"), pre), [usage("v")])
    assert (result["decisions"] == []) is cooling
    assert (result["skipped_cooldown"] == ["ml/p"]) is cooling
    if cooling:
        assert unresolved(result) == ["ml/p"] and "cooldown" in result["unresolved"][0]["reason"]


def test_cooldown_flag_and_default_now_is_the_current_time(run: Cli) -> None:
    real_now = datetime.now(UTC)
    pre = k8s.preemptor("p", annotations={LAST_RECLAIM_ANNOTATION: k8s.ts(real_now - timedelta(seconds=100))})
    victim = k8s.pod("v", gpus=4, node_name="n1")
    victim["status"]["conditions"][0]["lastTransitionTime"] = k8s.ts(real_now - timedelta(hours=5))
    objs = one_victim(victim, pre)
    assert run.plan(objs, [usage("v")], None)["skipped_cooldown"] == ["ml/p"]
    assert run.plan(objs, [usage("v")], None, "--cooldown-seconds", "60")["decisions"]
    later = k8s.ts(real_now + timedelta(seconds=400))
    assert evicted(run.plan(objs, [usage("v")], later)) == {"ml/p": ["ml/v"]}


# --- victims: rules 0-8 -----------------------------------------------------------------------------------


def _victim(scheduled_ago: float | None = 7200, labels: dict[str, str] | None = None, **kw: Any) -> JsonObj:
    return k8s.pod(
        "v", gpus=4, node_name="n1", priority_class="batch", scheduled_ago=scheduled_ago, labels=labels, **kw
    )


def _rules_case(
    run: Cli,
    ann: dict[str, str],
    pods: list[JsonObj],
    extra: list[JsonObj] | None = None,
    scheduled_ago: float | None = 7200,
    pre_priority: int = 1000,
) -> bool:
    cls = k8s.victim_class("batch", 100, **ann)
    pre = k8s.preemptor("p", priority=pre_priority)
    objs = [*one_victim(_victim(scheduled_ago, labels={"app": "v"}), pre), cls, *(extra or [])]
    result = run.plan(objs, pods)
    if result["decisions"]:
        assert evicted(result) == {"ml/p": ["ml/v"]}
        return True
    assert unresolved(result) == ["ml/p"]
    return False


@pytest.mark.parametrize(
    ("allowed", "selector", "eligible"),
    [
        (0, {"matchLabels": {"app": "v"}}, False),
        (1, {"matchLabels": {"app": "v"}}, True),
        (0, {"matchLabels": {"app": "other"}}, True),
        (0, {"matchExpressions": [{"key": "app", "operator": "In", "values": ["v"]}]}, False),
    ],
)
def test_rule0_pdb_with_no_disruptions_allowed_protects_always(
    run: Cli, allowed: int, selector: JsonObj, eligible: bool
) -> None:
    pdb = k8s.pdb("guard", selector, allowed)
    # Even rule 1 (preemptor at the minimum) does not override rule 0.
    assert _rules_case(run, {MIN_PRIO: "500"}, [usage("v")], [pdb]) is eligible


@pytest.mark.parametrize(("minimum", "eligible"), [("1000", True), ("999", True), ("1001", False)])
def test_rule1_minimum_preemptable_priority_skips_all_other_checks(
    run: Cli, minimum: str, eligible: bool
) -> None:
    # Busy, negative toleration, just scheduled, usage unknown: only rule 1 can make it eligible.
    ann = {MIN_PRIO: minimum, "toleration_seconds": "-1"}
    assert _rules_case(run, ann, [], scheduled_ago=5) is eligible


@pytest.mark.parametrize(("toleration", "eligible"), [("-1", False), ("-3600", False), ("0", True)])
def test_rule2_negative_toleration_protects(run: Cli, toleration: str, eligible: bool) -> None:
    assert _rules_case(run, {"toleration_seconds": toleration}, [usage("v")]) is eligible


def test_rule3_not_yet_scheduled_is_protected(run: Cli) -> None:
    assert _rules_case(run, {}, [usage("v")], scheduled_ago=None) is False
    assert _rules_case(run, {}, [usage("v")], scheduled_ago=7200) is True


@pytest.mark.parametrize(
    ("ann", "cpu", "age"),
    [
        ({"toleration_seconds": "3600", "gpu_idle_seconds": "600"}, None, 3600),
        ({"toleration_seconds": "60", "gpu_idle_seconds": "2400"}, None, 2400),
        ({"gpu_idle_seconds": "600", "cpu_idle_seconds": "900", "cpu_idle_usage_threshold": "1"}, 0.5, 900),
        ({}, None, 1800),  # default window 1800 s
    ],
)
@pytest.mark.parametrize(("delta", "eligible"), [(-1, False), (0, True), (1, True)])
def test_rule4_scheduled_less_than_the_longest_window_ago(
    run: Cli, ann: dict[str, str], cpu: float | None, age: int, delta: int, eligible: bool
) -> None:
    entry = usage("v", 0.0, cpu_cores=cpu) if cpu is not None else usage("v")
    assert _rules_case(run, ann, [entry], scheduled_ago=age + delta) is eligible


@pytest.mark.parametrize(
    ("entry", "eligible"),
    [
        (None, False),  # pod not listed: unknown usage
        (usage("v", None), False),  # listed without gpu_activity
        (usage("v", None, coverage=1.0), False),
        (usage("v", 0.0, coverage=0.79), False),
        (usage("v", 0.0, coverage=0.8), True),  # exactly the required fraction is enough
        (usage("v", 0.0), True),  # coverage defaults to 1.0
        (usage("v", 0.0, namespace="other"), False),  # a same-named pod elsewhere is not this one
    ],
)
def test_rule5_unknown_or_poorly_covered_usage_protects(
    run: Cli, entry: JsonObj | None, eligible: bool
) -> None:
    assert _rules_case(run, {}, [entry] if entry else []) is eligible


@pytest.mark.parametrize(
    ("ann", "activity", "eligible"),
    [
        ({}, 0.05, True),  # default threshold; equal counts as idle
        ({}, 0.051, False),
        ({"gpu_idle_usage_threshold": "0.1"}, 0.1, True),
        ({"gpu_idle_usage_threshold": "0.1"}, 0.11, False),
        ({"gpu_idle_usage_threshold": "0"}, 0.0, True),
        ({"gpu_idle_usage_threshold": "0"}, 0.001, False),
    ],
)
def test_rule6_gpu_activity_above_threshold_protects(
    run: Cli, ann: dict[str, str], activity: float, eligible: bool
) -> None:
    assert _rules_case(run, ann, [usage("v", activity)]) is eligible


@pytest.mark.parametrize(
    ("ann", "cpu", "eligible"),
    [
        ({"cpu_idle_seconds": "600", "cpu_idle_usage_threshold": "0.5"}, None, False),  # unknown
        ({"cpu_idle_seconds": "600", "cpu_idle_usage_threshold": "0.5"}, 0.5, True),  # equal is idle
        ({"cpu_idle_seconds": "600", "cpu_idle_usage_threshold": "0.5"}, 0.6, False),
        ({"cpu_idle_seconds": "600"}, 0.0, True),  # default threshold 0 cores
        ({"cpu_idle_seconds": "600"}, 0.01, False),
        ({}, 40.0, True),  # cpu-idle-seconds unset: CPU not checked
        ({}, None, True),
        ({"cpu_idle_seconds": "0", "cpu_idle_usage_threshold": "0.5"}, 3.0, True),
    ],
)
def test_rule7_cpu_checked_only_with_a_cpu_window(
    run: Cli, ann: dict[str, str], cpu: float | None, eligible: bool
) -> None:
    entry = usage("v", 0.0, cpu_cores=cpu) if cpu is not None else usage("v", 0.0)
    assert _rules_case(run, ann, [entry]) is eligible


def test_rule8_otherwise_eligible_and_explain_names_the_rule(run: Cli) -> None:
    objs = [*one_victim(_victim()), k8s.victim_class("batch", 100)]
    assert "[8-idle]" in run.explain("ml/v", objs, [usage("v", 0.01)])
    out = run.explain("ml/v", objs, [usage("v", 0.5)])
    assert "protected [6-gpu-busy]" in out and "0.5" in out


def test_defaults_for_a_pod_with_no_priority_class(run: Cli) -> None:
    victim = k8s.pod("v", gpus=4, node_name="n1", priority=None, scheduled_ago=1800)
    objs = one_victim(victim)
    assert evicted(run.plan(objs, [usage("v", 0.05)])) == {"ml/p": ["ml/v"]}
    assert run.plan(objs, [usage("v", 0.06)])["decisions"] == []  # default threshold 0.05
    victim["status"]["conditions"][0]["lastTransitionTime"] = k8s.ago(1799)  # default window 1800 s
    assert run.plan(objs, [usage("v", 0.0)])["decisions"] == []


@pytest.mark.parametrize(
    "ann",
    [
        {"toleration_seconds": "soon"},
        {"gpu_idle_seconds": "half an hour"},
        {"gpu_idle_usage_threshold": "low"},
        {"gpu_idle_usage_threshold": "5"},  # a 0-1 ratio: 5 (percent?) would make every pod idle
        {"cpu_idle_seconds": "1.5"},
        {"cpu_idle_usage_threshold": "many"},
        {MIN_PRIO: "high"},
    ],
)
def test_malformed_annotation_protects_and_warns(run: Cli, ann: dict[str, str]) -> None:
    assert _rules_case(run, ann, [usage("v", 0.0, cpu_cores=0.0)]) is False
    objs = [*one_victim(_victim()), k8s.victim_class("batch", 100, **ann)]
    result = run.plan(objs, [usage("v", 0.0, cpu_cores=0.0)])
    (warning,) = result["warnings"]
    (key,) = ann
    assert warning["priority_class"] == "batch" and key.replace("_", "-") in warning["annotation"]
    assert "ml/v" in warning["pods"]
    assert "PriorityClass batch" in run.explain("ml/v", objs, [usage("v", 0.0, cpu_cores=0.0)])


def test_equal_priority_never_preempts(run: Cli) -> None:
    for prio, ok in ((1000, False), (1500, False), (999, True)):
        victim = k8s.pod("v", gpus=4, node_name="n1", priority=prio)
        assert bool(run.plan(one_victim(victim), [usage("v")])["decisions"]) is ok
    # Not even rule 1 makes an equal-priority pod a victim.
    victim = k8s.pod("v", gpus=4, node_name="n1", priority=1000, priority_class="batch")
    objs = [*one_victim(victim), k8s.victim_class("batch", 1000, **{MIN_PRIO: "0"})]
    assert run.plan(objs, [usage("v")])["decisions"] == []


def test_terminating_and_finished_pods_are_not_victims(run: Cli) -> None:
    objs = one_victim(k8s.pod("v", gpus=4, node_name="n1", terminating=True))
    result = run.plan(objs, [usage("v")])
    assert result["decisions"] == [] and unresolved(result) == ["ml/p"]


# --- per node: free GPUs, already fits, victim-set order ----------------------------------------------------


def test_terminating_pods_hold_their_gpus_finished_ones_do_not(run: Cli) -> None:
    base = [k8s.node("n1", gpus=8), k8s.pod("v", gpus=4, node_name="n1"), k8s.preemptor("p")]
    leaving = k8s.pod("leaving", gpus=4, node_name="n1", terminating=True)
    assert evicted(run.plan([*base, leaving], [usage("v"), usage("leaving")])) == {"ml/p": ["ml/v"]}
    for phase in ("Succeeded", "Failed"):
        done = k8s.pod("done", gpus=4, node_name="n1", phase=phase)
        result = run.plan([*base, done], [usage("v"), usage("done")])
        assert result["decisions"] == [] and result["already_fit"] == [
            {"preemptor": "ml/p", "node": "n1", "gpus_requested": 4, "free_gpus_before": 4}
        ]


def test_pending_bound_pod_holds_its_gpus(run: Cli) -> None:
    starting = k8s.pod("starting", gpus=4, node_name="n1", phase="Pending")
    objs = [k8s.node("n1", gpus=8), k8s.pod("v", gpus=4, node_name="n1"), starting, k8s.preemptor("p")]
    assert evicted(run.plan(objs, [usage("v")])) == {"ml/p": ["ml/v"]}


def test_already_fits_evicts_nothing(run: Cli) -> None:
    objs = [
        k8s.node("n1", gpus=8),
        k8s.pod("v", gpus=4, node_name="n1"),
        k8s.node("n0", gpus=4),
        k8s.pod("w", gpus=4, node_name="n0"),
        k8s.preemptor("p"),
    ]
    result = run.plan(objs, [usage("v"), usage("w")])
    assert result["decisions"] == [] and result["unresolved"] == []
    assert [(f["preemptor"], f["node"]) for f in result["already_fit"]] == [("ml/p", "n1")]
    assert "already fits on node n1" in run.explain("ml/p", objs, [usage("v"), usage("w")])
    code, out, _ = run.call("plan", *run.files(objs, [usage("v"), usage("w")]), "--now", NOW)
    assert code == 0 and "already fits on n1" in out and "evict " not in out


@pytest.mark.parametrize(
    "ages", [(7200, 3600, 3600), (3600, 7200, 7200), (2000, 90000, 1900), (1800, 1800, 1800)]
)
def test_eight_gpu_node_4_2_2_evicts_the_single_4_gpu_pod_whatever_the_ages(
    run: Cli, ages: tuple[int, int, int]
) -> None:
    objs = [
        k8s.node("n1", gpus=8),
        *[
            k8s.pod(n, gpus=g, node_name="n1", scheduled_ago=a)
            for n, g, a in zip("abc", (4, 2, 2), ages, strict=True)
        ],
        k8s.preemptor("p", gpus=4),
    ]
    result = run.plan(objs, [usage("a"), usage("b"), usage("c")])
    assert evicted(result) == {"ml/p": ["ml/a"]} and result["decisions"][0]["gpus_freed"] == 4


def test_fewest_victims_first(run: Cli) -> None:
    # {b, c} would free exactly 4 GPUs at lower priorities; one 6-GPU victim still wins.
    objs = [
        k8s.node("n1", gpus=10),
        k8s.pod("a", gpus=6, node_name="n1", priority=500),
        k8s.pod("b", gpus=2, node_name="n1", priority=1),
        k8s.pod("c", gpus=2, node_name="n1", priority=1),
        k8s.preemptor("p", gpus=4),
    ]
    assert evicted(run.plan(objs, [usage("a"), usage("b"), usage("c")])) == {"ml/p": ["ml/a"]}


def test_fewest_gpus_freed_second(run: Cli) -> None:
    objs = [
        k8s.node("n1", gpus=8),
        k8s.pod("big", gpus=4, node_name="n1", priority=1),
        k8s.pod("small", gpus=2, node_name="n1", priority=500, scheduled_ago=90000),
        k8s.pod("busy", gpus=2, node_name="n1"),
        k8s.preemptor("p", gpus=2),
    ]
    assert evicted(run.plan(objs, [usage("big"), usage("small"), usage("busy", 0.9)])) == {
        "ml/p": ["ml/small"]
    }


def _two_nodes(
    prios_a: tuple[int, int], prios_b: tuple[int, int], ages: tuple[int, int] = (7200, 7200)
) -> list[JsonObj]:
    return [
        k8s.node("a-node", gpus=4),
        k8s.node("b-node", gpus=4),
        k8s.pod("a1", gpus=2, node_name="a-node", priority=prios_a[0], scheduled_ago=ages[0]),
        k8s.pod("a2", gpus=2, node_name="a-node", priority=prios_a[1], scheduled_ago=ages[0]),
        k8s.pod("b1", gpus=2, node_name="b-node", priority=prios_b[0], scheduled_ago=ages[1]),
        k8s.pod("b2", gpus=2, node_name="b-node", priority=prios_b[1], scheduled_ago=ages[1]),
        k8s.preemptor("p", gpus=4),
    ]


ALL_IDLE = [usage(n) for n in ("a1", "a2", "b1", "b2")]


def test_lowest_highest_priority_third(run: Cli) -> None:
    # a-node: max 60, sum 70; b-node: max 40, sum 80. The highest victim priority decides first.
    result = run.plan(_two_nodes((10, 60), (40, 40)), ALL_IDLE)
    assert [d["node"] for d in result["decisions"]] == ["b-node"]


def test_lowest_sum_of_priorities_fourth(run: Cli) -> None:
    result = run.plan(_two_nodes((40, 40), (30, 40)), ALL_IDLE)
    assert evicted(result) == {"ml/p": ["ml/b1", "ml/b2"]}


def test_most_recently_scheduled_fifth(run: Cli) -> None:
    result = run.plan(_two_nodes((40, 40), (40, 40), ages=(9000, 3000)), ALL_IDLE)
    assert [d["node"] for d in result["decisions"]] == ["b-node"]
    result = run.plan(_two_nodes((40, 40), (40, 40), ages=(3000, 9000)), ALL_IDLE)
    assert [d["node"] for d in result["decisions"]] == ["a-node"]


def test_equal_sets_across_nodes_go_to_the_name_sorting_first(run: Cli) -> None:
    objs = [
        k8s.node("node-b", gpus=4),
        k8s.node("node-a", gpus=4),
        k8s.pod("aaa", gpus=4, node_name="node-b"),  # victim names sort the other way round
        k8s.pod("zzz", gpus=4, node_name="node-a"),
        k8s.preemptor("p"),
    ]
    result = run.plan(objs, [usage("aaa"), usage("zzz")])
    assert [(d["node"], d["victims"]) for d in result["decisions"]] == [("node-a", ["ml/zzz"])]


def test_best_set_across_nodes_wins_over_name_order(run: Cli) -> None:
    objs = [
        k8s.node("a-node", gpus=4),
        k8s.node("b-node", gpus=4),
        k8s.pod("a1", gpus=2, node_name="a-node"),
        k8s.pod("a2", gpus=2, node_name="a-node"),
        k8s.pod("b1", gpus=4, node_name="b-node"),
        k8s.preemptor("p"),
    ]
    assert evicted(run.plan(objs, [usage("a1"), usage("a2"), usage("b1")])) == {"ml/p": ["ml/b1"]}


def test_pdb_protected_pod_is_skipped_for_another_node(run: Cli) -> None:
    objs = [
        k8s.node("a-node", gpus=4),
        k8s.node("b-node", gpus=4),
        k8s.pod("guarded", gpus=4, node_name="a-node", labels={"app": "g"}),
        k8s.pod("other", gpus=4, node_name="b-node", scheduled_ago=90000),
        k8s.pdb("g", {"matchLabels": {"app": "g"}}, 0),
        k8s.preemptor("p"),
    ]
    result = run.plan(objs, [usage("guarded"), usage("other")])
    assert [(d["node"], d["victims"]) for d in result["decisions"]] == [("b-node", ["ml/other"])]
    assert "[0-pdb]" in run.explain("ml/guarded", objs, [usage("guarded"), usage("other")])


# --- fit checks ----------------------------------------------------------------------------------------


def _fit_case(run: Cli, a_node: JsonObj, pre: JsonObj) -> str | None:
    """a-node and b-node each full with one idle 4-GPU pod; the node chosen, or None."""
    objs = [
        a_node,
        k8s.node("b-node", gpus=4, labels={"pool": "b"}),
        k8s.pod("va", gpus=4, node_name="a-node"),
        k8s.pod("vb", gpus=4, node_name="b-node"),
        pre,
    ]
    result = run.plan(objs, [usage("va"), usage("vb")])
    nodes = [d["node"] for d in result["decisions"]]
    return nodes[0] if nodes else None


def _affinity(key: str, values: list[str]) -> JsonObj:
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


@pytest.mark.parametrize(
    ("a_node", "pre", "node"),
    [
        (k8s.node("a-node", gpus=4), k8s.preemptor("p"), "a-node"),
        (k8s.node("a-node", gpus=4), k8s.preemptor("p", nodeSelector={"pool": "b"}), "b-node"),
        (
            k8s.node("a-node", gpus=4, labels={"pool": "b"}),
            k8s.preemptor("p", nodeSelector={"pool": "b"}),
            "a-node",
        ),
        (k8s.node("a-node", gpus=4), k8s.preemptor("p", affinity=_affinity("pool", ["b"])), "b-node"),
        (k8s.node("a-node", gpus=4), k8s.preemptor("p", affinity=_affinity("pool", ["c"])), None),
        (
            k8s.node("a-node", gpus=4, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
            k8s.preemptor("p"),
            "b-node",
        ),
        (
            k8s.node("a-node", gpus=4, taints=[{"key": "k", "effect": "NoExecute"}]),
            k8s.preemptor("p"),
            "b-node",
        ),
        (
            k8s.node("a-node", gpus=4, taints=[{"key": "k", "effect": "PreferNoSchedule"}]),
            k8s.preemptor("p"),
            "a-node",
        ),
        (
            k8s.node("a-node", gpus=4, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
            k8s.preemptor(
                "p", tolerations=[{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]
            ),
            "a-node",
        ),
        (
            k8s.node("a-node", gpus=4, taints=[{"key": "k", "effect": "NoExecute"}]),
            k8s.preemptor("p", tolerations=[{"key": "k", "operator": "Exists"}]),
            "a-node",
        ),
        (k8s.node("a-node", gpus=4, unschedulable=True), k8s.preemptor("p"), "b-node"),
        (k8s.node("a-node", gpus=4, cpu="2"), k8s.preemptor("p", cpu="4"), "b-node"),
        (k8s.node("a-node", gpus=4, memory="1Gi"), k8s.preemptor("p", memory="2Gi"), "b-node"),
    ],
)
def test_fit_checks(run: Cli, a_node: JsonObj, pre: JsonObj, node: str | None) -> None:
    assert _fit_case(run, a_node, pre) == node


def test_next_set_on_the_node_when_the_best_does_not_fit(run: Cli) -> None:
    objs = [
        k8s.node("n1", gpus=8, cpu="16"),
        k8s.pod("cheap", gpus=2, node_name="n1", priority=10, cpu="1"),  # the best set, frees too little cpu
        k8s.pod("roomy", gpus=2, node_name="n1", priority=50, cpu="8"),
        k8s.pod("busy", gpus=4, node_name="n1", cpu="4"),
        k8s.preemptor("p", gpus=2, cpu="6"),
    ]
    result = run.plan(objs, [usage("cheap"), usage("roomy"), usage("busy", 0.9)])
    assert evicted(result) == {"ml/p": ["ml/roomy"]}
    objs[-1] = k8s.preemptor("p", gpus=2, cpu="2")
    result = run.plan(objs, [usage("cheap"), usage("roomy"), usage("busy", 0.9)])
    assert evicted(result) == {"ml/p": ["ml/cheap"]}


def test_unresolved_when_no_node_can_fit(run: Cli) -> None:
    objs = [*one_victim(k8s.pod("v", gpus=4, node_name="n1")), k8s.preemptor("big", gpus=8, created_ago=5)]
    result = run.plan(objs, [usage("v")])
    assert evicted(result) == {"ml/p": ["ml/v"]} and unresolved(result) == ["ml/big"]
    assert "preemptor unresolved" in run.explain("ml/big", objs, [usage("v")])


# --- bad input ------------------------------------------------------------------------------------------


def _spoiled(path: list[str | int], value: Any, target: str = "v") -> list[JsonObj]:
    objs = [
        *one_victim(k8s.pod("v", gpus=4, node_name="n1")),
        k8s.victim_class("batch", 100),
        k8s.pdb("guard", {"matchLabels": {"app": "x"}}, 1),
    ]
    obj: Any = next(o for o in objs if o["metadata"]["name"] == target)
    for step in path[:-1]:
        obj = obj[step]
    obj[path[-1]] = value
    return objs


@pytest.mark.parametrize(
    ("objs", "expected"),
    [
        (_spoiled(["spec", "containers", 0, "resources", "limits", GPU], "four"), ["Pod ml/v", GPU]),
        (_spoiled(["spec", "containers", 0, "resources", "limits", GPU], "1.5", "p"), ["Pod ml/p", GPU]),
        (_spoiled(["spec", "containers", 0, "resources", "requests", "cpu"], "fast"), ["Pod ml/v", "cpu"]),
        (_spoiled(["spec", "containers"], "main"), ["Pod ml/v", "spec.containers"]),
        (_spoiled(["spec", "priority"], "high"), ["Pod ml/v", "spec.priority"]),
        (_spoiled(["metadata", "creationTimestamp"], "yesterday", "p"), ["Pod ml/p", "creationTimestamp"]),
        (
            _spoiled(["status", "conditions", 0, "lastTransitionTime"], "2025-13-45T99:00:00Z"),
            ["Pod ml/v", "lastTransitionTime"],
        ),
        (_spoiled(["status", "allocatable", GPU], "eight", "n1"), ["Node n1", "status.allocatable"]),
        (_spoiled(["spec", "taints"], "none", "n1"), ["Node n1", "spec.taints"]),
        (_spoiled(["value"], "high", "batch"), ["PriorityClass batch", "value"]),
        (
            _spoiled(["status", "disruptionsAllowed"], "one", "guard"),
            ["PodDisruptionBudget ml/guard", "disruptionsAllowed"],
        ),
        (_spoiled(["metadata", "name"], "", "v"), ["Pod", "metadata.name"]),
    ],
)
def test_bad_cluster_exits_2_naming_object_and_field(
    run: Cli, objs: list[JsonObj], expected: list[str]
) -> None:
    err = run.fail(objs, [usage("v")])
    for text in expected:
        assert text in err


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"namespace": "ml", "name": "v", "gpu_activity": "idle"}, ["ml/v", "gpu_activity"]),
        ({"namespace": "ml", "name": "v", "gpu_activity": 1.2}, ["ml/v", "gpu_activity"]),
        ({"namespace": "ml", "name": "v", "gpu_activity": 0.0, "coverage": 1.5}, ["ml/v", "coverage"]),
        ({"namespace": "ml", "name": "v", "gpu_activity": 0.0, "cpu_cores": -1}, ["ml/v", "cpu_cores"]),
        ({"name": "v", "gpu_activity": 0.0}, ["pods[0]", "namespace"]),
    ],
)
def test_bad_usage_exits_2_naming_pod_and_field(run: Cli, entry: JsonObj, expected: list[str]) -> None:
    err = run.fail(one_victim(k8s.pod("v", gpus=4, node_name="n1")), [entry])
    for text in expected:
        assert text in err


@pytest.mark.parametrize("now", ["noon", "2025-06-01", "2025-06-01T12:00:00", "20250601T120000Z"])
def test_bad_now_exits_2(run: Cli, now: str) -> None:
    err = run.fail(one_victim(k8s.pod("v", gpus=4, node_name="n1")), [usage("v")], "--now", now)
    assert "--now" in err


@pytest.mark.parametrize(
    "now", ["2025-06-01T12:00:00Z", "2025-06-01T14:00:00+02:00", "2025-06-01T12:00:00.25Z"]
)
def test_now_accepts_rfc3339_with_z_or_offset(run: Cli, now: str) -> None:
    # The victim was scheduled exactly 1800 s (the default window) before 12:00:00Z.
    victim = k8s.pod("v", gpus=4, node_name="n1", priority=None, scheduled_ago=1800)
    assert evicted(run.plan(one_victim(victim), [usage("v")], now)) == {"ml/p": ["ml/v"]}
    early = "2025-06-01T13:59:59+02:00"
    assert run.plan(one_victim(victim), [usage("v")], early)["decisions"] == []
