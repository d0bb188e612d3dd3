"""The declared mode: questions read from ScaledObjects, answered from a table computed once per refresh;
requests only read it. Includes the floods that once evicted a real workload's entry."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import yaml
from flask import Flask
from prometheus_client import CollectorRegistry

from automator.keda.answers import DECLARED, ON_DEMAND, KedaAnswers
from automator.keda.auth import AuthConfig
from automator.keda.cache import CacheConfig, KedaCache
from automator.keda.declared import declarations, key_of
from automator.keda.http import blueprint
from automator.keda.metrics import KedaMetrics
from automator.keda.request import METRICS_PATH, question
from automator.keda.table import DeclaredTable, NotDeclared, TableConfig
from automator.keda.values import NoValue
from tests.automator.keda.fakes import (
    NOW,
    SCALER_ADDRESS,
    FakeDeclaredSource,
    FakePrometheus,
    fresh_result,
    scaled_object,
)

TRITON = "deployment=api&profile=triton-inference"
DECLARED_URL = f"{METRICS_PATH}?namespace=inference&{TRITON}"


def _answers(
    objects: list[dict[str, Any]], prom: Any = None, source: FakeDeclaredSource | None = None
) -> tuple[KedaAnswers, FakeDeclaredSource, FakePrometheus]:
    prom = prom or FakePrometheus(fresh_result())
    source = source or FakeDeclaredSource(objects)
    metrics = KedaMetrics(CollectorRegistry())
    table = DeclaredTable(prom, TableConfig(), metrics, clock=lambda: NOW)
    ondemand = KedaCache(prom, source.kube, CacheConfig(refresh_seconds=3600), metrics, clock=lambda: NOW)
    ondemand.ensure_started = lambda: None  # type: ignore[method-assign]  # refreshes run by hand here
    return KedaAnswers(table, ondemand, source, metrics), source, prom


def _client(answers: KedaAnswers, auth: AuthConfig | None = None) -> Any:
    app = Flask("t")
    app.register_blueprint(blueprint(answers, auth or AuthConfig(), answers.metrics))
    return app.test_client()


def _get(client: Any, url: str) -> tuple[int, dict[str, Any]]:
    r = client.get(url)
    return r.status_code, json.loads(r.data)


def _available(answers: KedaAnswers, workload: str = "deployment/api") -> float | None:
    assert answers.metrics is not None
    for metric in answers.metrics.workload_available.collect():
        for s in metric.samples:
            if s.labels == {"workload_namespace": "inference", "workload": workload}:
                return float(s.value)
    return None


# --- which triggers declare what --------------------------------------------------------------------------


def test_triggers_that_point_here_declare_their_questions() -> None:
    objects = [
        scaled_object("a", TRITON, "statefulset=db&signal=gpu_utilization&window=5m"),
        scaled_object("b", external={"profile": "training"}),  # the workload: the scale target (api)
        scaled_object("c", namespace="other", external={"deployment": "x", "profile": "batch"}),
        {  # not ours: another path, another scaler, another trigger type
            "kind": "ScaledObject",
            "metadata": {"name": "d", "namespace": "inference"},
            "spec": {
                "scaleTargetRef": {"name": "api"},
                "triggers": [
                    {"type": "metrics-api", "metadata": {"url": "http://x/metrics?namespace=inference"}},
                    {"type": "external", "metadata": {"scalerAddress": "other-scaler:9000", "profile": "x"}},
                    {"type": "cpu", "metadata": {"value": "50"}},
                ],
            },
        },
    ]
    d = declarations(objects, ["gpu-steward-automator.gpu-steward.svc"])
    keys = {(k[0], k[1], k[2], k[3], k[5]) for k in d.questions}
    assert keys == {
        ("inference", "deployment", "api", "gpu_utilization", 120),
        ("inference", "statefulset", "db", "gpu_utilization", 300),
        ("inference", "deployment", "api", "gpu_utilization", 300),
        ("other", "deployment", "x", "memory_used_percent", 300),
    }
    assert d.scaled_objects == {("inference", n) for n in "abd"} | {("other", "c")}
    assert d.problems == ()


def test_a_bad_trigger_or_another_namespace_is_a_problem_not_a_question() -> None:
    objects = [
        scaled_object("bad", "deployment=api&profile=nope"),
        # A tenant's ScaledObject cannot make the service compute another namespace's answers.
        {
            "kind": "ScaledObject",
            "metadata": {"name": "sneaky", "namespace": "tenant"},
            "spec": {
                "triggers": [
                    {
                        "type": "metrics-api",
                        "metadata": {
                            "url": "http://h/keda/v1/metrics?namespace=inference&deployment=api&profile=training"
                        },
                    }
                ]
            },
        },
        "not an object",
    ]
    d = declarations(objects, [])  # type: ignore[arg-type]
    assert d.questions == {}
    assert len(d.problems) == 2
    assert "bad trigger 0: profile" in d.problems[0] and "own namespace" in d.problems[1]


# --- answers ----------------------------------------------------------------------------------------------


def test_a_declared_question_is_answered_from_the_table_without_io() -> None:
    answers, source, prom = _answers([scaled_object("api-gpu", TRITON)])
    client = _client(answers)
    assert _get(client, DECLARED_URL)[1]["error"] == "warming_up"  # before the first refresh
    answers.refresh()
    assert answers.mode == DECLARED
    queries, lists = len(prom.queries), source.pod_lists
    for _ in range(50):
        status, body = _get(client, DECLARED_URL)
        assert (
            status == 200 and body["value"] == pytest.approx(40.0) and body["profile"] == "triton-inference"
        )
    # The same question spelled out (no profile) is the same declared answer.
    status, body = _get(
        client, f"{METRICS_PATH}?namespace=inference&deployment=api&signal=gpu_utilization&window=2m"
    )
    assert status == 200 and body["value"] == pytest.approx(40.0)
    assert (len(prom.queries), source.pod_lists) == (queries, lists)  # requests caused no I/O
    assert _available(answers) == 1.0


def test_an_undeclared_question_is_404_not_declared_and_costs_nothing() -> None:
    answers, source, prom = _answers([scaled_object("api-gpu", TRITON)])
    answers.refresh()
    client = _client(answers)
    table = answers.table.table
    status, body = _get(client, f"{METRICS_PATH}?namespace=elsewhere&deployment=api&profile=training")
    assert status == 404 and body["error"] == "not_declared"
    assert "no ScaledObject in namespace elsewhere declares" in body["message"]
    assert answers.table.table is table and len(prom.queries) == 1 and source.pod_lists == 1


def test_a_scaled_object_created_since_the_last_refresh_is_warming_up_until_the_next() -> None:
    answers, source, _ = _answers([scaled_object("api-gpu", TRITON)])
    answers.refresh()
    source.objects.append(scaled_object("db-gpu", external={"statefulset": "db", "profile": "training"}))
    q = question({"namespace": "inference", "statefulset": "db", "profile": "training"})
    with pytest.raises(NoValue) as e:
        answers.answer(q, scaled_object=("inference", "db-gpu"))
    assert e.value.reason == "warming_up"
    with pytest.raises(NotDeclared):
        answers.answer(q, scaled_object=("inference", "api-gpu"))  # listed, and does not declare it
    answers.refresh()
    assert answers.answer(q, scaled_object=("inference", "db-gpu")).value.value == pytest.approx(20.0)


def test_queries_per_refresh_are_the_distinct_signal_and_window_pairs() -> None:
    windows = ("1m", "2m", "5m")
    objects = [
        scaled_object(f"so-{i}", f"deployment=api&signal=gpu_utilization&aggregation={a}&window={w}")
        for i, (a, w) in enumerate((a, w) for a in ("avg", "max", "sum", "p95") for w in windows)
    ]
    objects.append(scaled_object("mem", "deployment=api&signal=memory_used_mib&window=1m"))
    objects.append(scaled_object("mem2", "deployment=api&signal=memory_used_bytes&window=1m"))
    answers, source, prom = _answers(objects)
    answers.refresh()
    table = answers.table.table
    assert table is not None and len(table.results) == 14
    # gpu_utilization x 3 windows, and one query for both memory signals at 1m (MiB is bytes scaled).
    assert len(prom.queries) == 4 == table.queries
    answers.refresh()
    assert len(prom.queries) == 8 and source.pod_lists == 2 and source.object_lists == 2


def test_one_malformed_answer_fails_its_own_pair_only() -> None:
    good = fresh_result()

    def prom(expr: str) -> Any:
        if "[300s]" in expr:
            return [{"metric": "not a dict", "value": None}, 7]  # malformed: parse raises
        return good

    objects = [scaled_object("a", TRITON), scaled_object("b", "deployment=api&profile=training")]
    answers, _, _ = _answers(objects, prom=prom)
    answers.refresh()
    q = question({"namespace": "inference", "deployment": "api", "profile": "triton-inference"})
    assert answers.answer(q).value.value == pytest.approx(40.0)
    with pytest.raises(NoValue) as e:
        answers.answer(question({"namespace": "inference", "deployment": "api", "profile": "training"}))
    assert e.value.reason == "prometheus_unavailable"
    assert answers.metrics is not None and answers.metrics.declared_failing._value.get() == 1


def test_unreachable_sources_fail_loudly_and_recover() -> None:
    answers, source, prom = _answers([scaled_object("api-gpu", TRITON)])
    answers.refresh()
    q = question({"namespace": "inference", "deployment": "api", "profile": "triton-inference"})
    prom.down = True
    answers.refresh()
    with pytest.raises(NoValue) as e:
        answers.answer(q)
    assert e.value.reason == "prometheus_unavailable" and _available(answers) == 0.0
    prom.down, source.down = False, True  # the ScaledObject list fails: the last declarations still count
    answers.refresh()
    assert answers.answer(q).value.value == pytest.approx(40.0)


def test_the_scaled_object_api_absent_is_on_demand_mode(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    answers, source, _ = _answers([], source=FakeDeclaredSource(absent=True))
    answers.refresh()
    assert answers.mode == ON_DEMAND
    assert "on-demand mode: the ScaledObject API is scaledobjects.keda.sh v1alpha1: not served" in caplog.text
    q = question({"namespace": "inference", "deployment": "api", "profile": "triton-inference"})
    answers.ondemand.answer(q)  # starts the first fetches, waited for
    assert answers.answer(q).value.value == pytest.approx(40.0)
    source.absent = False
    source.objects.append(scaled_object("api-gpu", TRITON))
    answers.refresh()
    assert answers.mode == DECLARED and answers.answer(q).value.value == pytest.approx(40.0)
    source.absent = True  # KEDA uninstalled: the declared answers and their series go
    answers.refresh()
    assert answers.mode == ON_DEMAND and answers.table.table is None
    answers.stop()


def test_external_scaler_address_must_name_this_automator() -> None:
    objects = [scaled_object("x", external={"profile": "training"})]
    assert declarations(objects, ["gpu-steward-automator.gpu-steward.svc"]).questions
    assert not declarations(objects, ["other.example"]).questions
    for address in (SCALER_ADDRESS.upper(), "dns:///gpu-steward-automator.gpu-steward.svc:9000",
                    "gpu-steward-automator.gpu-steward.svc.:9000"):  # fmt: skip
        objects[0]["spec"]["triggers"][0]["metadata"]["scalerAddress"] = address
        assert declarations(objects, ["gpu-steward-automator.gpu-steward.svc"]).questions, address


# --- the red-team floods --------------------------------------------------------------------------------


def test_floods_of_undeclared_questions_leave_the_declared_answer_and_its_series_alone() -> None:
    answers, source, prom = _answers([scaled_object("api-gpu", TRITON)])
    answers.refresh()
    client = _client(answers)
    queries, lists = len(prom.queries), source.pod_lists
    floods = [
        # new namespaces, new windows (all but the declared 120 s), new selectors
        *(f"{METRICS_PATH}?namespace=ns-{i}&deployment=api&profile=training" for i in range(300)),
        *(f"{METRICS_PATH}?namespace=inference&deployment=api&signal=gpu_utilization&window={w}s"
          for w in range(30, 330) if w != 120),
        *(f"{METRICS_PATH}?namespace=inference&selector=app%3Dx{i}&profile=training" for i in range(600)),
    ]  # fmt: skip
    errors: list[str] = []

    def flood(urls: list[str]) -> None:
        c = _client(answers)
        for url in urls:
            status, body = _get(c, url)
            if (status, body.get("error")) != (404, "not_declared"):
                errors.append(f"{url}: {status} {body}")

    threads = [threading.Thread(target=flood, args=(floods[i::6],)) for i in range(6)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):  # the declared workload, during the flood
        status, body = _get(client, DECLARED_URL)
        assert status == 200 and body["value"] == pytest.approx(40.0)
        assert _available(answers) == 1.0
    for t in threads:
        t.join()
    assert errors == []
    assert (len(prom.queries), source.pod_lists) == (queries, lists)  # no query, no list from the flood
    answers.refresh()
    assert len(prom.queries) - queries == 1 and source.pod_lists - lists == 1  # per refresh: constant
    assert _get(client, DECLARED_URL)[0] == 200 and _available(answers) == 1.0
    assert answers.metrics is not None
    workloads = {
        s.labels["workload"] for m in answers.metrics.workload_available.collect() for s in m.samples
    }
    assert workloads == {"deployment/api"}  # no series for what was only asked


def test_a_stopped_scaled_object_loses_its_answer_and_its_series() -> None:
    answers, source, _ = _answers([scaled_object("api-gpu", TRITON)])
    answers.refresh()
    assert _available(answers) == 1.0
    source.objects.clear()
    answers.refresh()
    q = question({"namespace": "inference", "deployment": "api", "profile": "triton-inference"})
    with pytest.raises(NotDeclared):
        answers.answer(q)
    assert _available(answers) is None
    assert answers.table.table is not None and key_of(q) not in answers.table.table.results


def test_warming_up_refreshes_count_the_refreshes_in_a_row_with_warming_up_answers() -> None:
    answers, source, _ = _answers([scaled_object("api-gpu", TRITON)])
    source.down = True  # the ScaledObjects cannot be listed: no table yet
    assert answers.metrics is not None
    streak = answers.metrics.warming_up_refreshes
    q = question({"namespace": "inference", "deployment": "api", "profile": "triton-inference"})
    for expected in (1, 2, 3):
        with pytest.raises(NoValue, match="not been read yet"):
            answers.answer(q)
        answers.refresh()
        assert streak._value.get() == expected
    source.down = False
    answers.refresh()  # no warming_up answered since the last refresh: the streak ends
    assert streak._value.get() == 0 and answers.answer(q).value.value == pytest.approx(40.0)


def test_answers_of_a_refresh_too_long_ago_are_stale() -> None:
    now = [NOW]
    answers, _, _ = _answers([scaled_object("api-gpu", TRITON)])
    answers.table.clock = lambda: now[0]
    answers.refresh()
    q = question({"namespace": "inference", "deployment": "api", "profile": "triton-inference"})
    assert answers.answer(q).value.value == pytest.approx(40.0)
    now[0] += 121  # no refresh since (the refresh thread died, say): past --keda-max-age-seconds
    with pytest.raises(NoValue) as e:
        answers.answer(q)
    assert e.value.reason == "stale"


def test_not_declared_names_the_scaled_object_that_would_declare_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from automator.cli import main

    answers, _, _ = _answers([])
    answers.refresh()
    q = question({"namespace": "inference", "statefulset": "db", "signal": "power_watts", "window": "5m"})
    with pytest.raises(NotDeclared) as e:
        answers.answer(q)
    suggested = str(e.value).split("`")[1]
    assert suggested.startswith("gpu-automator keda scaledobject --namespace inference --statefulset db")
    # The command it names prints a ScaledObject that declares exactly this question.
    assert main([*suggested.split()[1:], "--target-value", "100"]) == 0
    (so,) = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d["kind"] == "ScaledObject"]
    assert key_of(q) in declarations([so], []).questions


@pytest.mark.parametrize("selector", ["app=api", "app in (a,b),tier notin (x),!legacy,gpu"])
def test_the_suggested_command_carries_a_selector_kubectl_reads(selector: str) -> None:
    from automator.keda.declared import kubectl_selector
    from automator.keda.request import parse_selector, selector_text

    canonical = selector_text(parse_selector(selector))
    assert selector_text(parse_selector(kubectl_selector(canonical))) == canonical
