"""The automator's user documentation and manifests against the code, so neither can drift silently.

docs/automator.md, docs/automator-cli.md and docs/reclaim.md are parsed for flags, variables, defaults,
metric names, the worked example and the /decisions example, and compared with what the parsers, the
planner, the service and the metrics registry really do. deploy/automator/ is loaded with PyYAML (kubectl
is not available) and checked against the flags and against the requests the Kubernetes adapter sends.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.utils import parse_quantity
from prometheus_client import CollectorRegistry

from automator import cli, settings
from automator.dra.job import DraCheckJob, SnapshotDraCluster
from automator.keda.kube import ClusterLister, NamespaceLister
from automator.kube import DraKubernetesAdapter, KubernetesAdapter, LeaderElector
from automator.metrics import AutomatorMetrics
from automator.objects.keys import ObjectKey
from automator.ports import EvictionOutcome, Mode
from automator.reclaim.model import PlannerConfig
from automator.reclaim.snapshot import load_cluster, load_usage
from automator.service import main as service
from steward_common import conventions
from steward_common.conventions import (
    ANN_CPU_IDLE_SECONDS,
    ANN_CPU_IDLE_THRESHOLD,
    ANN_GPU_IDLE_SECONDS,
    ANN_GPU_IDLE_THRESHOLD,
    ANN_MIN_PREEMPTABLE_PRIORITY,
    ANN_TOLERATION_SECONDS,
    PLUGIN_PREFIX,
)
from steward_common.settingspec import Setting
from tests.automator.fakes import FakeKube, FakePrometheus
from tools.fakes.fakekube import FakeApiServer

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs"
SERVICE_DOC = DOCS / "automator.md"
CLI_DOC = DOCS / "automator-cli.md"
RECLAIM_DOC = DOCS / "reclaim.md"
EXAMPLE = Path(__file__).parents[1] / "fixtures" / "docs_example"
DEPLOY = REPO / "deploy" / "automator"
EXAMPLE_NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


# --- helpers -------------------------------------------------------------------------------------------


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("gpu-automator has no subcommands")


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def mentions(text: str, flag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def section(text: str, heading: str) -> str:
    """The body of a `## heading` section, up to the next heading of level 2."""
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def table_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def same_value(documented: str, actual: Any) -> bool:
    try:
        return float(documented) == float(actual)
    except (TypeError, ValueError):
        return documented == str(actual)


# --- 1. flags and environment variables -----------------------------------------------------------------


@pytest.mark.usefixtures("clean_env")
def test_every_option_of_every_subcommand_is_documented() -> None:
    docs = {"plan": CLI_DOC.read_text(), "explain": CLI_DOC.read_text(), "run": SERVICE_DOC.read_text()}
    docs["dra-check"] = (DOCS / "dra.md").read_text()
    docs["keda"] = (DOCS / "keda.md").read_text()
    docs["backtest"] = CLI_DOC.read_text()
    missing = [
        f"{name} {flag} (not in {'docs/automator.md' if name == 'run' else 'docs/automator-cli.md'})"
        for name, parser in subparsers().items()
        for action in options(parser)
        for flag in action.option_strings
        if not mentions(docs[name], flag)
    ]
    assert not missing


@pytest.mark.usefixtures("clean_env")
def test_every_documented_flag_and_variable_exists() -> None:
    parsers = subparsers()
    flags = {flag for p in parsers.values() for a in options(p) for flag in a.option_strings}
    variables = {s.env for s in settings.ALL_SETTINGS}
    for doc in (SERVICE_DOC, CLI_DOC):
        text = doc.read_text()
        unknown_flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)) - flags
        assert not unknown_flags, f"{doc.name}: {sorted(unknown_flags)}"
        unknown_vars = set(re.findall(r"GPU_STEWARD_[A-Z][A-Z_]*", text)) - variables
        assert not unknown_vars, f"{doc.name}: {sorted(unknown_vars)}"


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize(
    ("doc", "heading", "subcommand"),
    [
        (SERVICE_DOC, "Configuration", "run"),
        (CLI_DOC, "Planner flags", "plan"),
        (CLI_DOC, "Kueue flags", "plan"),
    ],
)
def test_flag_tables_give_the_real_variable_and_default(doc: Path, heading: str, subcommand: str) -> None:
    declared: tuple[Setting[Any], ...] = {
        "Planner flags": settings.PLANNER_SETTINGS,
        "Kueue flags": settings.KUEUE_SETTINGS,
    }.get(heading, settings.ALL_SETTINGS)
    by_flag = {s.flag: s for s in declared}
    parser_flags = {f for a in options(subparsers()[subcommand]) for f in a.option_strings}
    assert set(by_flag) <= parser_flags  # the declarations are what the parser offers
    rows = table_rows(section(doc.read_text(), heading))[1:]
    assert rows
    documented: set[str] = set()
    for flag_cell, env_cell, default_cell, *_ in rows:
        flag = re.findall(r"--[a-z][a-z-]*", flag_cell)[0]
        setting = by_flag[flag]
        documented.add(flag)
        assert code_spans(env_cell)[0] == setting.env, flag
        if setting.default is None:  # computed at run time (lease namespace, leader election): in words
            assert default_cell, flag
            continue
        shown = (code_spans(default_cell) or default_cell.split())[0]
        assert same_value(shown, setting.convert(setting.default)) or shown == setting.default, (
            f"{flag}: documented {shown!r}, real {setting.default!r}"
        )
    assert documented == set(by_flag), f"{doc.name} {heading}: {sorted(set(by_flag) - documented)}"


@pytest.mark.usefixtures("clean_env")
def test_help_names_the_same_variables_the_docs_do() -> None:
    text = SERVICE_DOC.read_text()
    for name, parser in subparsers().items():
        for env in re.findall(r"env\s+(GPU_STEWARD_[A-Z_]+)", parser.format_help()):
            assert env in text, f"gpu-automator {name} --help names {env}, docs/automator.md does not"


# --- 2. docs/reclaim.md ---------------------------------------------------------------------------------


def console_runs(text: str) -> Iterator[tuple[list[str], str]]:
    """(argv after `gpu-automator`, expected stdout) for every `$ gpu-automator ...` in console blocks."""
    for block in fenced(text, "console"):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            assert lines[i].startswith("$ gpu-automator "), lines[i]
            command = lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            i += 1
            output = []
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            yield shlex.split(command)[1:], "\n".join(output)


def test_worked_example_output_is_the_real_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], clean_env: None
) -> None:
    example = section(RECLAIM_DOC.read_text(), "Worked example")
    runs = list(console_runs(example))
    assert len(runs) >= 3 and runs[0][0][0] == "plan"
    monkeypatch.chdir(REPO)
    for argv, expected in runs:
        # The example must run on its own fixture, which nobody else's test edits.
        for flag in ("--cluster", "--usage"):
            path = REPO / argv[argv.index(flag) + 1]
            assert path.parent == EXAMPLE and path.is_file(), path
        assert cli.main(argv) == 0, argv
        out = capsys.readouterr().out
        assert out.rstrip("\n") == expected, f"gpu-automator {' '.join(argv)}"


def test_gang_example_output_is_the_real_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], clean_env: None
) -> None:
    runs = list(console_runs(section(RECLAIM_DOC.read_text(), "Gang example")))
    assert [argv[0] for argv, _ in runs] == ["plan", "plan", "explain"]
    monkeypatch.chdir(REPO)
    for argv, expected in runs:
        assert (REPO / argv[argv.index("--cluster") + 1]).parent.name == "gang_example"
        assert cli.main(argv) == 0, argv
        assert capsys.readouterr().out.rstrip("\n") == expected, f"gpu-automator {' '.join(argv)}"


def test_notice_example_output_is_the_real_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], clean_env: None
) -> None:
    runs = list(console_runs(section(RECLAIM_DOC.read_text(), "Notice example")))
    assert [argv[0] for argv, _ in runs] == ["plan", "plan", "plan", "explain"]
    monkeypatch.chdir(REPO)
    for argv, expected in runs:
        assert (REPO / argv[argv.index("--cluster") + 1]).parent.name == "notice_example"
        assert "--notice-seconds" in argv
        assert cli.main(argv) == 0, argv
        assert capsys.readouterr().out.rstrip("\n") == expected, f"gpu-automator {' '.join(argv)}"


def test_worked_example_usage_block_is_the_fixture() -> None:
    (block,) = fenced(section(RECLAIM_DOC.read_text(), "Worked example"), "yaml")
    assert yaml.safe_load(block) == yaml.safe_load((EXAMPLE / "usage.yaml").read_text())


def test_annotation_table_matches_the_planner_defaults() -> None:
    defaults = PlannerConfig()
    expected = {
        ANN_MIN_PREEMPTABLE_PRIORITY: "none",
        ANN_TOLERATION_SECONDS: defaults.default_toleration_seconds,
        ANN_GPU_IDLE_SECONDS: defaults.default_gpu_idle_seconds,
        ANN_GPU_IDLE_THRESHOLD: defaults.default_gpu_idle_threshold,
        ANN_CPU_IDLE_SECONDS: 0,
        ANN_CPU_IDLE_THRESHOLD: 0,
    }
    text = section(RECLAIM_DOC.read_text(), "Victim annotations (on the victim's PriorityClass)")
    assert f"`{PLUGIN_PREFIX}`" in text
    rows = {code_spans(r[0])[0]: r for r in table_rows(text)[1:]}
    assert {PLUGIN_PREFIX + key for key in rows} == set(expected)
    for key, (_, default, _meaning) in rows.items():
        assert same_value(default, expected[PLUGIN_PREFIX + key]), key
    assert "equal counts as idle" in rows["gpu-idle-usage-threshold"][2]


def test_eligibility_table_lists_every_rule_of_the_code_in_order() -> None:
    source = "".join(
        (REPO / "automator" / "reclaim" / name).read_text()
        for name in ("eligibility.py", "planner.py", "victims.py")
    )
    code_rules = set(re.findall(r'"(\d-[a-z-]+|[a-z]+-malformed|excluded)"', source))
    text = section(RECLAIM_DOC.read_text(), "Which pods can be victims")
    table = [span for row in table_rows(text)[1:] for span in code_spans(row[0])]
    numbered = [r for r in table if r[0].isdigit()]
    assert numbered == sorted(numbered, key=lambda r: int(r[0])), "rules out of order"
    assert [r[0] for r in numbered if r[0] != "5" and r[0] != "7"] == list("0123468")
    assert code_rules <= set(re.findall(r"`([\w-]+)`", text)), sorted(code_rules - set(table))
    defaults = PlannerConfig()
    assert f"below {defaults.min_coverage}" in text
    assert f"cooldown (default {defaults.cooldown_seconds} s)" in RECLAIM_DOC.read_text()


def test_reclaim_doc_explains_preemption_policy_never() -> None:
    enabling = section(RECLAIM_DOC.read_text(), "Enabling it")
    assert "preemptionPolicy: Never" in enabling
    assert "gpu-steward.io/reclaim-idle-gpus" in enabling
    # the reason, not just the setting: the default scheduler would preempt busy pods itself
    assert re.search(r"busy.*pods", enabling, flags=re.S)


# --- 4. the service's endpoints and metrics -------------------------------------------------------------


def example_service(mode: Mode = Mode.DRY_RUN) -> service.Service:
    return service.Service(
        kube=FakeKube(load_cluster(EXAMPLE / "cluster.yaml")),
        prom=FakePrometheus(load_usage(EXAMPLE / "usage.yaml")),
        config=PlannerConfig(),
        mode=mode,
        interval=30,
        metrics=AutomatorMetrics(CollectorRegistry()),
        clock=lambda: EXAMPLE_NOW,
    )


def test_decisions_example_is_what_the_service_answers() -> None:
    documented = [
        json.loads(b) for b in fenced(section(SERVICE_DOC.read_text(), "Endpoints"), "json") if '"acted"' in b
    ]
    assert len(documented) == 1
    svc = example_service()
    svc.run_once()
    real = service.create_app(svc).test_client().get("/decisions").get_json()
    assert real["result"] == "ok" and real["decisions"]  # the example must show a real decision
    for body in (documented[0], real):
        body["duration_seconds"] = "measured"
    assert documented[0] == real


def test_endpoints_table_is_the_app_routes() -> None:
    app = service.create_app(example_service())
    dra = DraCheckJob(SnapshotDraCluster(Path("unused.yaml")), None, 60, CollectorRegistry())
    service.add_dra_route(app, dra)  # registered by build() unless --dra-check-interval 0
    routes = {r.rule for r in app.url_map.iter_rules() if r.endpoint != "static"}
    table = {code_spans(r[0])[0] for r in table_rows(section(SERVICE_DOC.read_text(), "Endpoints"))[1:]}
    assert table == routes == {"/healthz", "/readyz", "/metrics", "/decisions", "/dra"}


def exposed_metrics() -> dict[str, set[str]]:
    """Metric name as /metrics shows it -> its label names (created series are omitted)."""
    metrics = AutomatorMetrics(CollectorRegistry())
    names: dict[str, set[str]] = {}
    for family in metrics.registry.collect():
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        names[name] = labels
    return names


def test_metrics_table_is_the_registry() -> None:
    table: dict[str, set[str]] = {}
    for row in table_rows(section(SERVICE_DOC.read_text(), "Metrics"))[1:]:
        name, _, labels = code_spans(row[0])[0].partition("{")
        table[name] = set(filter(None, labels.rstrip("}").split(",")))
    assert table == exposed_metrics()
    # every metric name mentioned anywhere in the page exists
    mentioned = set(re.findall(r"gpu_steward_automator_[a-z_]+", SERVICE_DOC.read_text()))
    assert mentioned <= set(table), sorted(mentioned - set(table))


def test_service_doc_says_what_is_real_and_what_is_fake() -> None:
    text = section(SERVICE_DOC.read_text(), "What is verified, and how")
    needed_words = (
        "real Prometheus",
        "pytest-httpserver",
        "tools/fakes/fakekube.py",
        "Against fakes",
        "Against real parts",
    )
    for needed in needed_words:
        assert needed in text, needed
    assert "Not verified" in text


# --- 3. deploy/automator --------------------------------------------------------------------------------


def manifests() -> dict[str, list[dict[str, Any]]]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), path.name
            by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind


def test_manifests_are_well_formed_and_all_in_the_kustomization() -> None:
    docs = manifests()
    (kustomization,) = docs.pop("Kustomization")
    files = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    # The namespace object is deploy/namespace's, shared by every part.
    (namespace,) = yaml.safe_load_all((DEPLOY.parent / "namespace" / "namespace.yaml").read_text())
    ns = namespace["metadata"]["name"]
    # Each object names its namespace itself: a kustomization-wide one would land on the cluster-scoped
    # admission policy too (kustomize does not know it as cluster-scoped).
    assert "namespace" not in kustomization
    for kind, objects in docs.items():
        for obj in objects:
            assert obj["metadata"]["name"], kind
            if kind not in CLUSTER_SCOPED:
                assert obj["metadata"]["namespace"] == ns, (kind, obj["metadata"]["name"])
            else:
                assert "namespace" not in obj["metadata"], (kind, obj["metadata"]["name"])


CLUSTER_SCOPED = (
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def test_admission_policy_allows_exactly_the_written_annotations() -> None:
    (policy,) = manifests()["ValidatingAdmissionPolicy"]
    (written,) = [v for v in policy["spec"]["variables"] if v["name"] == "written"]
    listed = re.findall(r'"([^"]+)"', written["expression"])
    assert listed == list(conventions.WRITTEN_ANNOTATIONS)
    (condition,) = policy["spec"]["matchConditions"]
    deployment, _ = container(manifests())
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = deployment["metadata"]["namespace"]
    assert f'"system:serviceaccount:{namespace}:{account}"' in condition["expression"]
    (binding,) = manifests()["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]


def container(docs: dict[str, list[dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (deployment,) = docs["Deployment"]
    (main,) = deployment["spec"]["template"]["spec"]["containers"]
    return deployment, main


def parsed_deployment_args(monkeypatch: pytest.MonkeyPatch) -> settings.ServiceSettings:
    """The Deployment's command, args and GPU_STEWARD_* variables through the real `run` parser."""
    _, main = container(manifests())
    assert main["command"][:2] == ["gpu-automator", "run"]
    for env in main.get("env", []):
        if env["name"].startswith("GPU_STEWARD_"):
            monkeypatch.setenv(env["name"], str(env["value"]))
    args = subparsers()["run"].parse_args(main["command"][2:] + main.get("args", []))
    return settings.service_settings(args)  # raises SettingError on a bad flag or variable


def test_deployment_uses_real_flags_and_defaults_to_dry_run(
    monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    docs = manifests()
    _, main = container(docs)
    known = {s.env for s in settings.ALL_SETTINGS}
    ours = {e["name"] for e in main["env"] if e["name"].startswith("GPU_STEWARD_")}
    assert ours <= known, sorted(ours - known)
    args = parsed_deployment_args(monkeypatch)
    assert args.mode == "dry-run"
    # the manifest says, next to the setting, how to turn enforce on
    text = (DEPLOY / "deployment.yaml").read_text()
    before = text[: text.index("- name: GPU_STEWARD_MODE")].splitlines()[-4:]
    assert any(line.strip().startswith("#") and "enforce" in line for line in before)
    identity = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in main["env"]}
    assert identity["POD_NAME"] == "metadata.name" and identity["POD_NAMESPACE"] == "metadata.namespace"


def test_probes_service_and_monitor_hit_the_served_port(
    monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    docs = manifests()
    _, main = container(docs)
    args = parsed_deployment_args(monkeypatch)
    port = args.port
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}

    def resolve(p: str | int) -> int:
        return ports[p] if isinstance(p, str) else p

    assert main["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert main["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):  # the probe port, outside the main port's limits
        assert resolve(main[probe]["httpGet"]["port"]) == args.probe_port != port, probe
    (svc,) = docs["Service"]
    (svc_port,) = svc["spec"]["ports"]
    assert resolve(svc_port["targetPort"]) == port
    (monitor,) = docs["ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == svc_port["name"] and endpoint["path"] == "/metrics"
    labels = docs["Deployment"][0]["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()


def test_deployment_security_and_resources(monkeypatch: pytest.MonkeyPatch, clean_env: None) -> None:
    docs = manifests()
    deployment, main = container(docs)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert int(pod["securityContext"]["runAsUser"]) > 0
    sc = main["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
    assert not sc.get("privileged")
    resources = main["resources"]
    assert parse_quantity(resources["requests"]["cpu"]) > 0
    assert parse_quantity(resources["limits"]["memory"]) >= parse_quantity(resources["requests"]["memory"])
    # two replicas only make sense with leader election on, or both would act
    if deployment["spec"]["replicas"] > 1:
        assert parsed_deployment_args(monkeypatch).leader_election is not False
    assert pod["serviceAccountName"] == docs["ServiceAccount"][0]["metadata"]["name"]


# RBAC: the requests the adapter really sends, recorded by an HTTP server, against the roles.

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def rbac_request(method: str, path: str) -> tuple[str, str, str, str | None]:
    """(apiGroup, resource[/subresource], verb, namespace) of a Kubernetes API request."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    verbs = {"GET": "get" if len(rest) > 1 else "list", "POST": "create", "PUT": "update"}
    verb = verbs.get(method, method.lower())
    return group, resource, verb, namespace


Request = tuple[str, str, str, str | None]


def recorded_api_calls(fake_kube: FakeApiServer, lease_namespace: str) -> set[Request]:
    """Every call the adapters make, against the fake API server (tools/fakes/fakekube.py), which records
    them."""
    fake_kube.put(
        {
            "kind": "Pod",
            "metadata": {"name": "train-a", "namespace": "ml", "uid": "u-1"},
            "spec": {"nodeName": "node-1", "containers": [{"name": "main"}]},
            "status": {"phase": "Running"},
        }
    )
    api = client.ApiClient(client.Configuration(host=fake_kube.url))
    kube = KubernetesAdapter(api, identity="replica-0", kueue=True)
    kube.snapshot()  # with Kueue on: its objects and the Jobs are listed too
    pod = ObjectKey("ml", "train-a")
    assert kube.get_pod(pod) is not None
    assert kube.evict(pod, uid="u-1", dry_run=True).outcome is EvictionOutcome.OK
    assert kube.evict(pod, uid="u-1").outcome is EvictionOutcome.OK
    kube.annotate_preemptor(pod, {conventions.LAST_RECLAIM_ANNOTATION: EXAMPLE_NOW.isoformat()}, uid="u-1")
    kube.event(pod, "Normal", "GpuIdleReclaimed", "test", uid="u-1")
    NamespaceLister(api).namespace("ml")  # the KEDA on-demand cache's reads (docs/keda.md)
    keda = ClusterLister(api)  # the KEDA declared mode's reads: ScaledObjects, then the declared namespaces
    keda.scaled_objects()
    keda.namespaces(frozenset({"ml"}))
    DraKubernetesAdapter(kube).dra_objects()  # the DRA check's reads (discovery needs no rule)
    elector = LeaderElector(api, "gpu-steward-automator", lease_namespace, "replica-0", 4, 3, 1)
    # take the free Lease (read, create), then renew it once (read, update): every call the election makes
    assert elector.try_acquire_or_renew() and elector.try_acquire_or_renew()
    # discovery (/apis, /apis/GROUP/VERSION) is every authenticated client's (system:discovery): no rule
    calls = [
        c for c in fake_kube.requests() if len(c.path.strip("/").split("/")) > 3 or c.path.startswith("/api/")
    ]
    assert [c.method for c in calls if "/leases" in c.path] == ["GET", "POST", "GET", "PUT"]
    assert all(c.code < 400 or c.path.endswith("/leases/gpu-steward-automator") for c in calls), calls
    return {rbac_request(c.method, c.path) for c in calls}


def allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", [])
        for r in rules
    )


# One version of each gang API: the adapter lists the first one a cluster serves.
GANG_APIS_SERVED = (
    "scheduling.k8s.io/v1alpha2",
    "scheduling.k8s.io/v1alpha1",
    "scheduling.x-k8s.io/v1alpha1",
    "scheduling.volcano.sh/v1beta1",
    "scheduling.run.ai/v2alpha2",
)


def test_rbac_allows_exactly_the_writes_the_adapter_makes() -> None:
    with FakeApiServer(
        gang_apis=GANG_APIS_SERVED, kueue_apis=["kueue.x-k8s.io/v1beta2"]
    ).start() as fake_kube:
        check_rbac(fake_kube)


def test_rbac_of_kueue_writes_is_the_kueue_component_and_nothing_else() -> None:
    """`--kueue boost|deactivate` write one thing, a merge patch of a Workload (and Events, the base's):
    deploy/components/kueue grants exactly that, the base ClusterRole never does (`off` grants nothing)."""
    component = [
        doc for doc in yaml.safe_load_all((DEPLOY.parent / "components" / "kueue" / "rbac.yaml").read_text())
    ]
    (role,) = [d for d in component if d["kind"] == "ClusterRole"]
    (binding,) = [d for d in component if d["kind"] == "ClusterRoleBinding"]
    deployment, _ = container(manifests())
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = deployment["metadata"]["namespace"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    (base,) = manifests()["ClusterRole"]
    assert not allows(base["rules"], "kueue.x-k8s.io", "workloads", "patch")
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "train", "namespace": "ml", "uid": "w-1"},
        "spec": {"active": True},
    }
    with FakeApiServer([workload], kueue_apis=["kueue.x-k8s.io/v1beta2"]).start() as fake_kube:
        kube = KubernetesAdapter(client.ApiClient(client.Configuration(host=fake_kube.url)), kueue=True)
        key, version = ObjectKey("ml", "train"), "kueue.x-k8s.io/v1beta2"
        kube.patch_workload(key, version, {"metadata": {"annotations": {"a": "b"}}}, uid="w-1")
        kube.patch_workload(key, version, {"spec": {"active": False}}, uid="w-1")
        kube.workload_event(key, version, "w-1", "Normal", conventions.KUEUE_REASON_DEACTIVATED, "test")
        writes = {rbac_request(c.method, c.path) for c in fake_kube.writes()}
    assert {(g, r, v) for g, r, v, _ in writes} == {
        ("kueue.x-k8s.io", "workloads", "patch"),
        ("", "events", "create"),
    }
    for group, resource, verb, _ in writes:
        assert allows(role["rules"] + base["rules"], group, resource, verb), (group, resource, verb)
    assert role["rules"] == [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["patch"]}
    ]


def check_rbac(fake_kube: FakeApiServer) -> None:
    docs = manifests()
    deployment, _ = container(docs)
    namespace = deployment["metadata"]["namespace"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    (cluster_role,) = docs["ClusterRole"]
    (role,) = docs["Role"]
    (cluster_binding,) = docs["ClusterRoleBinding"]
    (binding,) = docs["RoleBinding"]
    assert cluster_binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] and binding["roleRef"]["kind"] == "Role"
    assert subject in cluster_binding["subjects"] and subject in binding["subjects"]
    assert role["metadata"]["namespace"] == namespace  # the Lease lives in $POD_NAMESPACE

    calls = recorded_api_calls(fake_kube, namespace)
    resources = {(g, r) for g, r, _, _ in calls}
    expected = {
        ("", "nodes"), ("", "pods"), ("scheduling.k8s.io", "priorityclasses"),
        ("policy", "poddisruptionbudgets"), ("", "pods/eviction"), ("", "events"),
        ("coordination.k8s.io", "leases"), ("apps", "deployments"), ("apps", "replicasets"),
        ("apps", "statefulsets"), ("keda.sh", "scaledobjects"), ("resource.k8s.io", "resourceslices"),
        ("resource.k8s.io", "resourceclaims"), ("resource.k8s.io", "deviceclasses"),
        ("scheduling.k8s.io", "podgroups"), ("scheduling.k8s.io", "workloads"),
        ("scheduling.x-k8s.io", "podgroups"), ("scheduling.volcano.sh", "podgroups"),
        ("scheduling.run.ai", "podgroups"), ("kueue.x-k8s.io", "workloads"),
        ("kueue.x-k8s.io", "clusterqueues"), ("kueue.x-k8s.io", "localqueues"), ("batch", "jobs"),
    }  # fmt: skip
    assert resources == expected  # the recorder saw every kind of call, so the check below is complete
    for group, resource, verb, ns in calls:
        if resource == "leases":
            assert ns == namespace and allows(role["rules"], group, resource, verb), (resource, verb)
        else:
            assert allows(cluster_role["rules"], group, resource, verb), (group, resource, verb)
    # least privilege: no verb the code never calls, reads included (no get/watch "just in case")
    made = {(g, r, v) for g, r, v, _ in calls}
    for rules in (cluster_role["rules"], role["rules"]):
        for rule in rules:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        assert (g, r, v) in made, f"granted but never used: {v} {g or 'core'}/{r}"


# --- 6. conventions and the architecture note -----------------------------------------------------------


def test_every_event_reason_and_annotation_key_is_documented() -> None:
    service_doc, reclaim_doc = SERVICE_DOC.read_text(), RECLAIM_DOC.read_text()
    for reason in conventions.EVENT_REASONS:
        assert f"`{'Normal' if reason in NORMAL_REASONS else 'Warning'} {reason}`" in service_doc, reason
    for key in conventions.CLASS_ANNOTATIONS:
        short = key.removeprefix(conventions.PLUGIN_PREFIX)
        assert f"`{short}`" in reclaim_doc or key in reclaim_doc, key
    assert f"`{conventions.LAST_RECLAIM_ANNOTATION}`" in reclaim_doc
    notice = section(reclaim_doc, "Notice")
    for key in (*conventions.NOTICE_ANNOTATIONS, conventions.DEFER_UNTIL_ANNOTATION):
        assert f"`{key}" in notice, key
    for reason in conventions.NoticeWithdrawal:
        assert f"`{reason}`" in notice, reason


NORMAL_REASONS = {
    conventions.REASON_VICTIM,
    conventions.REASON_PREEMPTOR,
    conventions.REASON_NOTICE_WITHDRAWN,
}


def test_architecture_note_names_real_contract_homes() -> None:
    text = (DOCS / "architecture.md").read_text()
    rows = table_rows(section(text, "Who owns each contract"))[1:]
    homes = [span for row in rows for span in code_spans(row[1]) if span.endswith(".py")]
    assert "steward_common/conventions.py" in homes and "automator/settings.py" in homes
    assert "steward_common/series.py" in homes
    for home in homes:
        assert (REPO / home).is_file(), home


def test_architecture_note_draws_the_import_contracts() -> None:
    """The layer line, the independent packages and tools/ in docs/architecture.md are the contracts'."""
    text = (DOCS / "architecture.md").read_text()
    linter = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = linter["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers" and c["containers"] == ["automator"]]
    assert f"   {' > '.join(layers['layers'])}\n" in text
    (independent,) = [c for c in contracts if c["type"] == "independence" and "automator.dra" in c["modules"]]
    named = ", ".join(m.removeprefix("automator.") + "/" for m in independent["modules"])
    assert f"{named} are independent of each other" in text
    assert "tools" in linter["root_packages"] and "never imported by it" in text
    assert any(c["type"] == "forbidden" and c["forbidden_modules"] == ["tools"] for c in contracts)
    assert any(c["type"] == "acyclic_siblings" for c in contracts) and "no import circle" in text
