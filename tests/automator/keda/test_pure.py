"""Signals, requests, selectors, workloads and values: the pure decisions of the KEDA endpoints."""

from __future__ import annotations

import math

import pytest

from automator.keda.request import ParamError, duration_seconds, parse_selector, question
from automator.keda.signals import AGGREGATIONS, GATES, PROFILES, SIGNALS, Base, query, signal
from automator.keda.values import NoValue, PodRef, compute, parse
from automator.keda.workloads import UnknownWorkload, resolve
from steward_common.series import RECORDED
from tests.automator.keda.fakes import NOW, cluster, fresh_result, sample, stamp

UTIL = SIGNALS["gpu_utilization"]


def pods(*names: str, started: float | None = None) -> list[PodRef]:
    return [PodRef("inference", n, f"uid-{n}", started) for n in names]


def value(names: tuple[str, ...], aggregation: str = "avg", **kw: float) -> float:
    reading = parse(fresh_result(), "q")
    return compute(UTIL, aggregation, pods(*names), reading, NOW, 120, 120, **kw).value


# --- values ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [("max", 60.0), ("min", 20.0), ("avg", 40.0), ("sum", 80.0), ("p95", 20 + 0.95 * 40)],
)
def test_aggregations_across_pods_and_gpus(aggregation: str, expected: float) -> None:
    assert value(("api-a", "api-b"), aggregation) == pytest.approx(expected)


def test_a_pod_on_a_shared_gpu_reads_only_its_own_usage() -> None:
    assert value(("api-b",)) == pytest.approx(20.0)
    assert value(("other-x",)) == pytest.approx(50.0)


def test_every_gpu_of_a_pod_counts() -> None:
    v = compute(UTIL, "avg", pods("db-0"), parse(fresh_result(), "q"), NOW, 120, 120)
    assert (v.value, v.pods, v.gpus) == (pytest.approx(20.0), 1, 2)


def test_no_running_pod_is_zero_with_zero_pods() -> None:
    v = compute(UTIL, "max", [], parse([], "q"), NOW, 120, 120)
    assert (v.value, v.pods, v.gpus) == (0.0, 0, 0)


def test_a_running_pod_without_data_is_no_value_never_zero() -> None:
    with pytest.raises(NoValue) as e:
        compute(UTIL, "max", pods("api-a", "ghost"), parse(fresh_result(), "q"), NOW, 120, 120)
    assert e.value.reason == "no_data"
    assert "ghost" in e.value.message


def test_all_pods_without_data_is_no_value() -> None:
    with pytest.raises(NoValue):
        compute(UTIL, "sum", pods("ghost"), parse([], "q"), NOW, 120, 120)


def test_stale_data_is_no_value() -> None:
    reading = parse(fresh_result(age=300), "q")
    with pytest.raises(NoValue) as e:
        compute(UTIL, "max", pods("api-a"), reading, NOW, 120, 120)
    assert e.value.reason == "stale"


def test_a_young_pod_without_data_is_pending_not_an_error() -> None:
    reading = parse(fresh_result(), "q")
    refs = [*pods("api-a"), PodRef("inference", "api-new", "uid-new", NOW - 30)]
    v = compute(UTIL, "avg", refs, reading, NOW, 120, 120)
    assert v.value == pytest.approx(60.0)
    assert v.pods_pending == ("api-new (no data)",)
    # Only young pods, none with data: still no value.
    with pytest.raises(NoValue):
        compute(UTIL, "avg", [PodRef("inference", "api-new", "u", NOW - 30)], reading, NOW, 120, 120)


def test_an_older_pod_of_the_same_name_is_not_read() -> None:
    result = [sample("api-a", "GPU-0", 0.9, uid="old"), stamp("api-a", NOW - 5, uid="old")]
    with pytest.raises(NoValue):
        compute(UTIL, "max", pods("api-a"), parse(result, "q"), NOW, 120, 120)


def test_without_pod_uid_labels_the_name_is_enough() -> None:
    result = [sample("api-a", "GPU-0", 0.9, uid=""), stamp("api-a", NOW - 5, uid="")]
    assert compute(UTIL, "max", pods("api-a"), parse(result, "q"), NOW, 120, 120).value == pytest.approx(90)


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf", "nope"])
def test_a_non_finite_sample_makes_the_pod_unknown(bad: str) -> None:
    result = fresh_result()
    result[0]["value"][1] = bad
    with pytest.raises(NoValue):
        compute(UTIL, "max", pods("api-a"), parse(result, "q"), NOW, 120, 120)


def test_age_is_the_oldest_pods() -> None:
    result = [*fresh_result()[:2], stamp("api-a", NOW - 10), stamp("api-b", NOW - 40)]
    v = compute(UTIL, "max", pods("api-a", "api-b"), parse(result, "q"), NOW, 120, 120)
    assert v.age_seconds == pytest.approx(40)


def test_scale_of_signals() -> None:
    result = [sample("api-a", "GPU-0", 2**30), stamp("api-a", NOW)]
    mib = compute(SIGNALS["memory_used_mib"], "sum", pods("api-a"), parse(result, "q"), NOW, 120, 120)
    assert mib.value == pytest.approx(1024)


# --- signals and queries -----------------------------------------------------------------------------


def test_every_gate_is_a_recorded_series() -> None:
    assert set(GATES) == set(Base)
    assert set(GATES.values()) <= set(RECORDED)


def test_one_query_per_base_and_window_names_its_window() -> None:
    for base in Base:
        q = query(base, 300)
        assert "[300s]" in q and GATES[base] in q


def test_profiles_name_known_signals_and_aggregations() -> None:
    assert {"vllm-inference", "triton-inference", "training", "batch"} <= set(PROFILES)
    for p in PROFILES.values():
        assert signal(p.signal) is not None and p.aggregation in AGGREGATIONS
        assert p.target > 0 and math.isfinite(p.activation)


def test_seed_signal_names_are_accepted() -> None:
    assert signal("power_draw") is SIGNALS["power_watts"]
    assert signal("temperature") is SIGNALS["temperature_celsius"]


# --- requests ----------------------------------------------------------------------------------------


def params(**kw: str) -> dict[str, str]:
    return {"namespace": "inference", "deployment": "api", **kw}


def test_profile_defaults_and_explicit_overrides() -> None:
    q = question(params(profile="triton-inference"))
    assert (q.signal.name, q.aggregation, q.window_seconds, q.target) == ("gpu_utilization", "avg", 120, 75)
    q = question(params(profile="triton-inference", signal="power_watts", aggregation="max", window="5m"))
    assert (q.signal.name, q.aggregation, q.window_seconds) == ("power_watts", "max", 300)


@pytest.mark.parametrize(
    ("given", "parameter"),
    [
        (params(profile="nope"), "profile"),
        (params(signal="nope"), "signal"),
        (params(signal="gpu_utilization", aggregation="median"), "aggregation"),
        (params(signal="gpu_utilization", window="5 minutes"), "window"),
        (params(signal="gpu_utilization", window="1s"), "window"),
        (params(signal="gpu_utilization", window="30d"), "window"),
        (params(), "signal"),
        ({"deployment": "api", "signal": "gpu_utilization"}, "namespace"),
        ({"namespace": "Bad_NS", "deployment": "api", "signal": "gpu_utilization"}, "namespace"),
        ({"namespace": "inference", "signal": "gpu_utilization"}, "deployment"),
        (params(selector="app=api", signal="gpu_utilization"), "deployment"),
        ({"namespace": "inference", "selector": "app in (a", "signal": "gpu_utilization"}, "selector"),
        ({"namespace": "inference", "selector": "app=a=b", "signal": "gpu_utilization"}, "selector"),
        ({"namespace": "inference", "selector": "app=a,", "signal": "gpu_utilization"}, "selector"),
        ({"namespace": "inference", "selector": "-bad=x", "signal": "gpu_utilization"}, "selector"),
        (params(signal="gpu_utilization", targetValue="NaN"), "targetValue"),
        (params(signal="gpu_utilization", metricType="Utilization"), "metricType"),
    ],
)
def test_bad_parameters_are_named(given: dict[str, str], parameter: str) -> None:
    with pytest.raises(ParamError) as e:
        question(given)
    assert e.value.parameter == parameter


def test_durations() -> None:
    assert duration_seconds("90s") == 90
    assert duration_seconds("1h30m") == 5400
    assert duration_seconds("2m") == 120


def test_selector_grammar() -> None:
    sel = parse_selector("app=api, tier in (web, batch),!canary,env!=dev,owner")
    ops = [(e["key"], e["operator"]) for e in sel["matchExpressions"]]
    assert ops == [
        ("app", "In"),
        ("tier", "In"),
        ("canary", "DoesNotExist"),
        ("env", "NotIn"),
        ("owner", "Exists"),
    ]


def test_resolve_workloads() -> None:
    ns = cluster()("inference")

    def names(**kw: str) -> list[str]:
        return [p.name for p in resolve(question(params(signal="gpu_utilization", **kw)).workload, ns)]

    assert names() == ["api-a", "api-b"]  # the Succeeded pod of an older ReplicaSet is not running
    assert [
        p.name
        for p in resolve(
            question({"namespace": "inference", "statefulset": "db", "signal": "idle_ratio"}).workload, ns
        )
    ] == ["db-0"]
    sel = question(
        {"namespace": "inference", "selector": "app in (api,other),tier!=web", "signal": "idle_ratio"}
    )
    assert [p.name for p in resolve(sel.workload, ns)] == ["other-x"]
    with pytest.raises(UnknownWorkload):
        resolve(question(params(deployment="missing", signal="idle_ratio")).workload, ns)
