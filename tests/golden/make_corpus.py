"""The golden corpus: what `plan --output json`, `explain` and `dra-check --output json` answer today.

Each case writes its input files, runs `gpu-automator` in this process (cli.main) and records its exit
code, stdout and stderr. Small outputs are stored verbatim, big ones as sha256 and size, so a change of
any byte shows. An exception escaping cli.main is recorded as `exception` (the pass crashed instead of
answering with a clean error).

Cases: the planner benchmark's clusters (tests/bench/bench_planner.py) at 125, 300, 1,250 and 5,000 nodes,
seeds 1, 4 and 9, with the default eviction budget and without one; every cluster file in tests/ and
deploy/demo/; malformed variants of each kind read (one field of one object given a wrong type or value);
the DRA benchmark clusters (tests/bench/bench_dra.py) and the DRA fixtures; numbers (not quantity strings)
whose reading decides a fit, read through their text (`cpu: 16.1` is 16100 millicores, not 16101).

Regenerate: `PYTHONPATH=$PWD .venv/bin/python -m tests.golden.make_corpus` (writes tests/golden/corpus.json);
tests/golden/test_golden.py compares a fresh run with it byte for byte.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).with_name("corpus.json")
NOW = "2025-06-01T12:00:00Z"
VERBATIM_BYTES = 8192  # larger outputs are stored as sha256 and size
PLAN_SIZES = ((125, 10), (300, 24), (1250, 100), (5000, 500))  # nodes, preemptors
SEEDS = (1, 4, 9)
HEAVY_NODES = 1250  # cases from this size up form the test's slow group
DOCS_EXAMPLE = REPO / "tests/automator/fixtures/docs_example"
DRA_FIXTURES = REPO / "tests/automator/fixtures/dra"
DEMO = REPO / "deploy/demo"


@dataclass(frozen=True)
class Case:
    name: str
    heavy: bool
    # writes the inputs into the directory and returns the command line
    build: Callable[[Path], list[str]]


def run_case(case: Case) -> dict[str, Any]:
    """Run one case in a fresh directory; the directory's path is replaced by `<tmp>` in the outputs."""
    from automator import cli

    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        argv = case.build(Path(tmp))
        out, err = io.StringIO(), io.StringIO()
        record: dict[str, Any] = {}
        with redirect_stdout(out), redirect_stderr(err):
            try:
                record["code"] = cli.main(argv)
            except SystemExit as exc:
                record["code"] = exc.code
            except Exception as exc:
                record["exception"] = f"{type(exc).__name__}: {exc}".replace(tmp, "<tmp>")
        record["stdout"] = _stored(out.getvalue().replace(tmp, "<tmp>"))
        record["stderr"] = _stored(err.getvalue().replace(tmp, "<tmp>"))
    return record


def _stored(text: str) -> Any:
    data = text.encode()
    if len(data) <= VERBATIM_BYTES:
        return text
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


# -- the planner benchmark's clusters


def _bench_files(directory: Path, nodes: int, preemptors: int, seed: int) -> tuple[Path, Path]:
    from tests.bench.bench_planner import generate_objects

    (node_objs, pod_objs, classes, pdbs), usage = generate_objects(nodes, preemptors, seed)
    items = [*classes, *node_objs, *pdbs, *pod_objs]
    cluster = directory / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    pods = [
        {
            "namespace": k.namespace,
            "name": k.name,
            "gpu_activity": u.gpu_activity,
            "coverage": u.coverage,
            "cpu_cores": u.cpu_cores,
            "gpu_recent_max": u.gpu_recent_max,
        }
        for k, u in usage.items()
    ]
    usage_file = directory / "usage.json"
    usage_file.write_text(json.dumps({"pods": pods}))
    return cluster, usage_file


def _bench_case(nodes: int, preemptors: int, seed: int, budget: bool, command: list[str]) -> Case:
    def build(directory: Path) -> list[str]:
        cluster, usage = _bench_files(directory, nodes, preemptors, seed)
        argv = [*command, "--cluster", str(cluster), "--usage", str(usage), "--now", NOW]
        return argv if budget else [*argv, "--max-evictions-per-pass", "10000"]

    label = "budget" if budget else "unbudgeted"
    what = "-".join(c.replace("/", "_") for c in command if c != "--output")
    return Case(f"bench-{nodes}-seed{seed}-{label}-{what}", nodes >= HEAVY_NODES, build)


def _bench_cases() -> Iterator[Case]:
    for nodes, preemptors in PLAN_SIZES:
        for seed in SEEDS:
            for budget in (True, False):
                yield _bench_case(nodes, preemptors, seed, budget, ["plan", "--output", "json"])
                if nodes == PLAN_SIZES[0][0]:
                    # explain reruns the plan: the preemptor and a running pod of the smallest size
                    for pod in ("team-0/pending-0", "team-0/node-00000-p0", "team-1/pending-1"):
                        yield _bench_case(nodes, preemptors, seed, budget, ["explain", pod])


# -- the cluster files in tests/ and deploy/demo/


def _items(path: Path) -> list[Any]:
    doc = yaml.safe_load(path.read_text())
    items: list[Any] = doc["items"]
    return items


def _idle_usage(items: list[Any]) -> dict[str, Any]:
    """Every scheduled pod of the cluster measured idle."""
    pods = [
        {"namespace": p["metadata"].get("namespace", "default"), "name": p["metadata"]["name"]}
        for p in items
        if isinstance(p, dict) and p.get("kind") == "Pod" and (p.get("spec") or {}).get("nodeName")
    ]
    return {"pods": [{**p, "gpu_activity": 0.0, "gpu_recent_max": 0.0, "coverage": 1.0} for p in pods]}


def _file_case(name: str, cluster: Path, usage: Path | None, command: list[str]) -> Case:
    def build(directory: Path) -> list[str]:
        usage_path = usage
        if usage_path is None:
            usage_path = directory / "usage.yaml"
            usage_path.write_text(yaml.safe_dump(_idle_usage(_items(cluster))))
        return [*command, "--cluster", str(cluster), "--usage", str(usage_path), "--now", NOW]

    return Case(name, False, build)


def _file_cases() -> Iterator[Case]:
    plan_json = ["plan", "--output", "json"]
    docs_cluster, docs_usage = DOCS_EXAMPLE / "cluster.yaml", DOCS_EXAMPLE / "usage.yaml"
    yield _file_case("docs-example-plan", docs_cluster, docs_usage, plan_json)
    yield _file_case("docs-example-plan-text", docs_cluster, docs_usage, ["plan"])
    yield _file_case("docs-example-plan-idle", docs_cluster, None, plan_json)
    for item in _items(docs_cluster):
        if item.get("kind") == "Pod":
            meta = item["metadata"]
            pod = f"{meta.get('namespace', 'default')}/{meta['name']}"
            yield _file_case(
                f"docs-example-explain-{pod.replace('/', '_')}", docs_cluster, docs_usage, ["explain", pod]
            )
    demo = DEMO / "cluster.yaml"
    yield _file_case("demo-plan-idle", demo, None, plan_json)
    for item in _items(demo):
        if item.get("kind") == "Pod":
            meta = item["metadata"]
            pod = f"{meta.get('namespace', 'default')}/{meta['name']}"
            yield _file_case(f"demo-explain-{pod.replace('/', '_')}", demo, None, ["explain", pod])
    for name, cluster, usage in (
        ("dra-fixture-hami", DRA_FIXTURES / "hami-cluster.yaml", DRA_FIXTURES / "hami-usage.yaml"),
        ("dra-demo", DEMO / "dra-cluster.yaml", DEMO / "dra-usage.yaml"),
    ):
        yield _dra_file_case(f"{name}-json", cluster, usage, ["--output", "json"])
        yield _dra_file_case(f"{name}-text", cluster, usage, [])
        yield _dra_file_case(f"{name}-no-usage-json", cluster, None, ["--output", "json"])
        yield _file_case(f"{name}-plan-idle", cluster, None, plan_json)


def _dra_file_case(name: str, cluster: Path, usage: Path | None, extra: list[str]) -> Case:
    def build(directory: Path) -> list[str]:
        argv = ["dra-check", "--cluster", str(cluster), *extra]
        return argv if usage is None else [*argv, "--usage", str(usage)]

    return Case(name, False, build)


# -- malformed variants: one field of the first object of a kind set to a wrong type or value

_MISSING = object()
PLAN_VARIANTS: tuple[tuple[str, str, tuple[Any, ...], Any], ...] = (
    # (variant, kind, path, value); value _MISSING removes the field
    ("pod-priorityclassname-list", "Pod", ("spec", "priorityClassName"), ["a"]),
    ("pod-priorityclassname-int", "Pod", ("spec", "priorityClassName"), 5),
    ("pod-priority-string", "Pod", ("spec", "priority"), "high"),
    ("pod-priority-float", "Pod", ("spec", "priority"), 1.5),
    ("pod-nodename-int", "Pod", ("spec", "nodeName"), 5),
    ("pod-nodename-list", "Pod", ("spec", "nodeName"), ["node"]),
    ("pod-nodename-unknown", "Pod", ("spec", "nodeName"), "no-such-node"),
    ("pod-containers-string", "Pod", ("spec", "containers"), "c"),
    ("pod-container-string", "Pod", ("spec", "containers", 0), "c"),
    ("pod-requests-list", "Pod", ("spec", "containers", 0, "resources", "requests"), ["x"]),
    ("pod-requests-bad-quantity", "Pod", ("spec", "containers", 0, "resources", "requests"), {"cpu": "lots"}),
    (
        "pod-requests-negative-gpu",
        "Pod",
        ("spec", "containers", 0, "resources", "requests"),
        {"nvidia.com/gpu": "-1"},
    ),
    ("pod-limits-list", "Pod", ("spec", "containers", 0, "resources", "limits"), ["x"]),
    (
        "pod-limits-gpu-int-list",
        "Pod",
        ("spec", "containers", 0, "resources", "limits"),
        {"nvidia.com/gpu": [1]},
    ),
    ("pod-resources-string", "Pod", ("spec", "containers", 0, "resources"), "x"),
    ("pod-initcontainers-dict", "Pod", ("spec", "initContainers"), {"a": 1}),
    ("pod-overhead-list", "Pod", ("spec", "overhead"), ["x"]),
    ("pod-spec-list", "Pod", ("spec",), ["x"]),
    ("pod-spec-missing", "Pod", ("spec",), _MISSING),
    ("pod-metadata-string", "Pod", ("metadata",), "x"),
    ("pod-name-int", "Pod", ("metadata", "name"), 5),
    ("pod-namespace-list", "Pod", ("metadata", "namespace"), ["ns"]),
    ("pod-labels-list", "Pod", ("metadata", "labels"), ["x"]),
    ("pod-label-value-int", "Pod", ("metadata", "labels"), {"app": 5}),
    ("pod-annotations-list", "Pod", ("metadata", "annotations"), ["x"]),
    ("pod-creation-int", "Pod", ("metadata", "creationTimestamp"), 5),
    ("pod-creation-garbage", "Pod", ("metadata", "creationTimestamp"), "yesterday"),
    ("pod-deletion-int", "Pod", ("metadata", "deletionTimestamp"), 5),
    ("pod-ownerreferences-dict", "Pod", ("metadata", "ownerReferences"), {"kind": "Job"}),
    ("pod-status-list", "Pod", ("status",), ["x"]),
    ("pod-phase-int", "Pod", ("status", "phase"), 5),
    ("pod-conditions-string", "Pod", ("status", "conditions"), "x"),
    ("pod-condition-string", "Pod", ("status", "conditions"), ["x"]),
    ("pod-nodeselector-list", "Pod", ("spec", "nodeSelector"), ["x"]),
    ("pod-tolerations-dict", "Pod", ("spec", "tolerations"), {"key": "x"}),
    ("pod-affinity-list", "Pod", ("spec", "affinity"), ["x"]),
    ("node-allocatable-list", "Node", ("status", "allocatable"), ["x"]),
    ("node-allocatable-bad-gpu", "Node", ("status", "allocatable"), {"nvidia.com/gpu": "lots"}),
    ("node-allocatable-gpu-list", "Node", ("status", "allocatable"), {"nvidia.com/gpu": ["8"]}),
    ("node-allocatable-missing", "Node", ("status", "allocatable"), _MISSING),
    ("node-status-string", "Node", ("status",), "x"),
    ("node-spec-list", "Node", ("spec",), ["x"]),
    ("node-unschedulable-string", "Node", ("spec", "unschedulable"), "yes"),
    ("node-taints-dict", "Node", ("spec", "taints"), {"key": "x"}),
    ("node-taint-string", "Node", ("spec", "taints"), ["x"]),
    ("node-labels-int", "Node", ("metadata", "labels"), 5),
    ("node-name-int", "Node", ("metadata", "name"), 5),
    ("pdb-spec-string", "PodDisruptionBudget", ("spec",), "x"),
    ("pdb-selector-string", "PodDisruptionBudget", ("spec", "selector"), "x"),
    ("pdb-matchlabels-list", "PodDisruptionBudget", ("spec", "selector", "matchLabels"), ["x"]),
    ("pdb-matchexpressions-dict", "PodDisruptionBudget", ("spec", "selector", "matchExpressions"), {"a": 1}),
    ("pdb-status-list", "PodDisruptionBudget", ("status",), ["x"]),
    ("pdb-disruptions-string", "PodDisruptionBudget", ("status", "disruptionsAllowed"), "x"),
    ("pdb-disruptions-negative", "PodDisruptionBudget", ("status", "disruptionsAllowed"), -1),
    ("pdb-disruptions-float", "PodDisruptionBudget", ("status", "disruptionsAllowed"), 0.5),
    ("pdb-disruptions-bool", "PodDisruptionBudget", ("status", "disruptionsAllowed"), True),
    ("pdb-namespace-int", "PodDisruptionBudget", ("metadata", "namespace"), 5),
    ("priorityclass-value-string", "PriorityClass", ("value",), "x"),
    ("priorityclass-value-missing", "PriorityClass", ("value",), _MISSING),
    ("priorityclass-value-float", "PriorityClass", ("value",), 1.5),
    ("priorityclass-name-list", "PriorityClass", ("metadata", "name"), ["x"]),
    ("priorityclass-annotations-list", "PriorityClass", ("metadata", "annotations"), ["x"]),
    (
        "priorityclass-annotation-int",
        "PriorityClass",
        ("metadata", "annotations"),
        {"reclaim-idle-resource.scheduling.x-k8s.io/gpu-idle-seconds": 5},
    ),
    (
        "priorityclass-idle-seconds-negative",
        "PriorityClass",
        ("metadata", "annotations"),
        {"reclaim-idle-resource.scheduling.x-k8s.io/gpu-idle-seconds": "-5"},
    ),
    (
        "priorityclass-threshold-nan",
        "PriorityClass",
        ("metadata", "annotations"),
        {"reclaim-idle-resource.scheduling.x-k8s.io/gpu-idle-usage-threshold": "nan"},
    ),
    (
        "priorityclass-reclaim-garbage",
        "PriorityClass",
        ("metadata", "annotations"),
        {"gpu-steward.io/reclaim-idle-gpus": "maybe"},
    ),
    ("priorityclass-preemptionpolicy-int", "PriorityClass", ("preemptionPolicy",), 5),
)
DRA_VARIANTS: tuple[tuple[str, str, tuple[Any, ...], Any], ...] = (
    ("claim-spec-string", "ResourceClaim", ("spec",), "x"),
    ("claim-devices-string", "ResourceClaim", ("spec", "devices"), "x"),
    ("claim-requests-dict", "ResourceClaim", ("spec", "devices", "requests"), {"a": 1}),
    ("claim-request-int", "ResourceClaim", ("spec", "devices", "requests"), [5]),
    ("claim-status-list", "ResourceClaim", ("status",), ["x"]),
    ("claim-allocation-list", "ResourceClaim", ("status", "allocation"), ["x"]),
    ("claim-results-string", "ResourceClaim", ("status", "allocation", "devices", "results"), "x"),
    ("claim-result-int", "ResourceClaim", ("status", "allocation", "devices", "results"), [5]),
    ("claim-reservedfor-dict", "ResourceClaim", ("status", "reservedFor"), {"name": "x"}),
    ("claim-name-int", "ResourceClaim", ("metadata", "name"), 5),
    ("claim-namespace-list", "ResourceClaim", ("metadata", "namespace"), ["x"]),
    ("slice-spec-string", "ResourceSlice", ("spec",), "x"),
    ("slice-devices-string", "ResourceSlice", ("spec", "devices"), "x"),
    ("slice-device-int", "ResourceSlice", ("spec", "devices"), [5]),
    ("slice-driver-int", "ResourceSlice", ("spec", "driver"), 5),
    ("slice-nodename-list", "ResourceSlice", ("spec", "nodeName"), ["x"]),
    ("slice-pool-string", "ResourceSlice", ("spec", "pool"), "x"),
    ("deviceclass-spec-string", "DeviceClass", ("spec",), "x"),
    ("deviceclass-selectors-dict", "DeviceClass", ("spec", "selectors"), {"a": 1}),
    ("pod-resourceclaims-string", "Pod", ("spec", "resourceClaims"), "x"),
    ("pod-resourceclaim-int", "Pod", ("spec", "resourceClaims"), [5]),
    ("pod-status-claims-dict", "Pod", ("status", "resourceClaimStatuses"), {"a": 1}),
    ("pod-nodename-int", "Pod", ("spec", "nodeName"), 5),
    ("node-name-int", "Node", ("metadata", "name"), 5),
    ("node-metadata-list", "Node", ("metadata",), ["x"]),
)


def _mutated(items: list[Any], kind: str, path: tuple[Any, ...], value: Any) -> list[Any]:
    items = copy.deepcopy(items)
    target = next(i for i in items if isinstance(i, dict) and i.get("kind") == kind)
    node: Any = target
    for step in path[:-1]:
        if isinstance(node, dict):
            child = node.get(step)
            if not isinstance(child, (dict, list)):
                child = node[step] = {}
        else:
            child = node[step]
        node = child
    last = path[-1]
    if value is _MISSING:
        if isinstance(node, dict):
            node.pop(last, None)
    else:
        node[last] = value
    return items


def _malformed_case(name: str, base: Path, usage: Path | None, items: list[Any], command: list[str]) -> Case:
    def build(directory: Path) -> list[str]:
        cluster = directory / "cluster.yaml"
        cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
        argv = [*command, "--cluster", str(cluster)]
        if command[0] != "dra-check":
            argv += ["--now", NOW]
        if usage is not None:
            argv += ["--usage", str(usage)]
        elif command[0] != "dra-check":
            usage_path = directory / "usage.yaml"
            usage_path.write_text(yaml.safe_dump(_idle_usage(_items(base))))
            argv += ["--usage", str(usage_path)]
        return argv

    return Case(name, False, build)


def _malformed_cases() -> Iterator[Case]:
    docs_cluster, docs_usage = DOCS_EXAMPLE / "cluster.yaml", DOCS_EXAMPLE / "usage.yaml"
    docs_items = _items(docs_cluster)
    demo_items = _items(DEMO / "cluster.yaml")
    for variant, kind, path, value in PLAN_VARIANTS:
        for base, items, usage in (("docs", docs_items, docs_usage), ("demo", demo_items, None)):
            if not any(i.get("kind") == kind for i in items):
                continue
            bad = _mutated(items, kind, path, value)
            source = docs_cluster if base == "docs" else DEMO / "cluster.yaml"
            yield _malformed_case(
                f"malformed-{base}-{variant}-plan", source, usage, bad, ["plan", "--output", "json"]
            )
    pod = next(i for i in docs_items if i.get("kind") == "Pod")
    target = f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}"
    for variant, kind, path, value in PLAN_VARIANTS[:6]:
        bad = _mutated(docs_items, kind, path, value)
        yield _malformed_case(
            f"malformed-docs-{variant}-explain", docs_cluster, docs_usage, bad, ["explain", target]
        )
    bad_items = [*docs_items, "not-an-object", {"kind": "Pod"}, {"metadata": {"name": "kindless"}}]
    yield _malformed_case(
        "malformed-docs-stray-items-plan", docs_cluster, docs_usage, bad_items, ["plan", "--output", "json"]
    )
    for base_name, cluster, usage in (
        ("hami", DRA_FIXTURES / "hami-cluster.yaml", DRA_FIXTURES / "hami-usage.yaml"),
        ("demo", DEMO / "dra-cluster.yaml", DEMO / "dra-usage.yaml"),
    ):
        items = _items(cluster)
        for variant, kind, path, value in DRA_VARIANTS:
            if not any(isinstance(i, dict) and i.get("kind") == kind for i in items):
                continue
            bad = _mutated(items, kind, path, value)
            yield _malformed_case(
                f"malformed-dra-{base_name}-{variant}", cluster, usage, bad, ["dra-check", "--output", "json"]
            )


# -- numbers in a hand-written file, read through their text: the docs example's urgent-1 (16 cpu, after
# train-a's eviction 4 of gpu-a's cpu stay taken) fits gpu-a exactly when the number is read as written

QUANTITY_VARIANTS: tuple[tuple[str, str, Any, Any], ...] = (
    # (variant, gpu-a's allocatable cpu, urgent-1's cpu request); 16.1 and 20.2 are a little above and a
    # little below as binary floats
    ("pod-cpu-float", "20100m", 16.1),
    ("node-cpu-float", 20.2, "16200m"),
)


def _quantity_cases() -> Iterator[Case]:
    docs_cluster, docs_usage = DOCS_EXAMPLE / "cluster.yaml", DOCS_EXAMPLE / "usage.yaml"
    for variant, node_cpu, pod_cpu in QUANTITY_VARIANTS:
        items = copy.deepcopy(_items(docs_cluster))
        for item in items:
            if item["metadata"]["name"] == "gpu-a":
                item["status"]["allocatable"]["cpu"] = node_cpu
            if item["metadata"]["name"] == "urgent-1":
                item["spec"]["containers"][0]["resources"]["requests"]["cpu"] = pod_cpu
        plan = ["plan", "--output", "json"]
        yield _malformed_case(f"quantity-docs-{variant}-plan", docs_cluster, docs_usage, items, plan)


# -- the DRA benchmark clusters


def _dra_bench_case(nodes: int) -> Case:
    def build(directory: Path) -> list[str]:
        from tests.bench.bench_dra import cluster, write_files

        objects, usage = cluster(nodes)
        cluster_file, usage_yaml, _ = write_files(objects, usage, directory / "dra")
        return ["dra-check", "--cluster", str(cluster_file), "--usage", str(usage_yaml), "--output", "json"]

    return Case(f"dra-bench-{nodes}", nodes >= HEAVY_NODES, build)


def cases() -> list[Case]:
    found = [*_bench_cases(), *_file_cases(), *_malformed_cases(), *_quantity_cases()]
    found += [_dra_bench_case(125), _dra_bench_case(1250)]
    names = [c.name for c in found]
    assert len(names) == len(set(names)), "case names repeat"
    return found


def main() -> int:
    corpus = {}
    for case in cases():
        corpus[case.name] = run_case(case)
        record = corpus[case.name]
        print(case.name, record.get("code"), record.get("exception", ""), file=sys.stderr)
    CORPUS.write_text(json.dumps(corpus, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
