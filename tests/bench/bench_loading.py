"""Loading benchmark (issue 14): `gpu-automator plan` end to end on a 10,000-pod `kubectl get -o json|yaml`
dump with managedFields, in a fresh process each run: wall time and peak memory (the child's maxrss).

`main()` returns a markdown section for docs/benchmarks.md (tests/bench/run_all.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from automator.model import JsonObj
from tests.bench.bench_planner import NOW, generate

ROOT = Path(__file__).resolve().parents[2]
NODES, PREEMPTORS = 1250, 100
GOAL_JSON_S, GOAL_JSON_MIB, GOAL_YAML_S = 3.0, 500, 15.0


def _managed(obj: JsonObj) -> list[dict[str, Any]]:
    """managedFields as kubectl writes them: one entry per manager, a fieldsV1 tree of the fields set."""

    def tree(value: Any) -> Any:
        if isinstance(value, dict):
            return {f"f:{k}": tree(v) for k, v in value.items()}
        if isinstance(value, list):
            return {f'k:{{"name":"{i}"}}': tree(v) for i, v in enumerate(value)}
        return {}

    time_ = obj["metadata"].get("creationTimestamp", "2025-06-01T00:00:00Z")
    return [
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": tree(
                {
                    "metadata": obj["metadata"],
                    "spec": {"containers": obj.get("spec", {}).get("containers", [])},
                }
            ),
            "manager": "kube-controller-manager",
            "operation": "Update",
            "time": time_,
        },
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": tree({"status": {"conditions": obj.get("status", {}).get("conditions", [])}}),
            "manager": "kubelet",
            "operation": "Update",
            "subresource": "status",
            "time": time_,
        },
    ]


def _kubectl_like(obj: JsonObj, i: int) -> JsonObj:
    """What the API adds to the fields the planner reads: ids, owners, env, volumes, probes, statuses."""
    meta = obj["metadata"]
    meta.update(
        uid=f"{i:08x}-1111-2222-3333-444455556666",
        resourceVersion=str(100000 + i),
        generateName=meta["name"][:-2],
    )
    if obj["kind"] == "Pod":
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": meta["name"],
                "uid": f"job-{i}",
                "controller": True,
            }
        ]
        container = obj["spec"]["containers"][0]
        container.update(
            image="registry.example.com/ml/trainer:2025.06.01",
            imagePullPolicy="IfNotPresent",
            command=["python", "-m", "train"],
            env=[{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(3)],
            volumeMounts=[
                {"mountPath": "/data", "name": "data"},
                {
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    "name": "kube-api",
                    "readOnly": True,
                },
            ],
            terminationMessagePath="/dev/termination-log",
            terminationMessagePolicy="File",
        )
        obj["spec"].update(
            dnsPolicy="ClusterFirst",
            enableServiceLinks=True,
            restartPolicy="Never",
            schedulerName="default-scheduler",
            serviceAccountName="default",
            terminationGracePeriodSeconds=30,
            tolerations=[
                {
                    "effect": "NoExecute",
                    "key": f"node.kubernetes.io/{t}",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                }
                for t in ("not-ready", "unreachable")
            ],
            volumes=[
                {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{i}"}},
                {"name": "kube-api", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            ],
        )
        status = obj["status"]
        status.update(hostIP="10.0.0.1", podIP="10.1.0.1", qosClass="Burstable")
        if status.get("phase") == "Running":
            status["containerStatuses"] = [
                {
                    "name": "c",
                    "image": container["image"],
                    "imageID": "registry.example.com/ml/trainer@sha256:" + "0" * 64,
                    "containerID": "containerd://" + "1" * 64,
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": meta["creationTimestamp"]}},
                }
            ]
    meta["managedFields"] = _managed(obj)
    return obj


def write_dump(directory: Path) -> dict[str, tuple[Path, Path]]:
    state, usage = generate(NODES, PREEMPTORS)
    objs = [*state.priority_classes, *state.nodes, *state.pdbs, *state.pods]
    items = [_kubectl_like(json.loads(json.dumps(o)), i) for i, o in enumerate(objs)]
    dump = {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}
    pods = [
        {
            "namespace": k.namespace,
            "name": k.name,
            "gpu_activity": u.gpu_activity,
            "coverage": u.coverage,
            "cpu_cores": u.cpu_cores,
        }
        for k, u in usage.items()
    ]
    files = {}
    for fmt in ("json", "yaml"):
        cluster, usage_file = directory / f"pods.{fmt}", directory / f"usage.{fmt}"
        if fmt == "json":
            cluster.write_text(json.dumps(dump, indent=4))  # kubectl indents with 4 spaces
            usage_file.write_text(json.dumps({"pods": pods}))
        else:
            cluster.write_text(yaml.dump(dump, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
            usage_file.write_text(
                yaml.dump({"pods": pods}, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
            )
        files[fmt] = (cluster, usage_file)
    return files


def run_cli(cluster: Path, usage: Path) -> tuple[float, float, int]:
    """(wall seconds, peak resident MiB, exit code) of one `gpu-automator plan` in a fresh process."""
    argv = [
        sys.executable,
        "-m",
        "automator",
        "plan",
        "--cluster",
        str(cluster),
        "--usage",
        str(usage),
        "--output",
        "json",
        "--now",
        NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
    ]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, cwd=ROOT)
    _, status, rusage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, rusage.ru_maxrss / 1024, proc.returncode


def main() -> str:
    rows = []
    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = write_dump(Path(tmp))
        for fmt, repeats in (("json", 3), ("yaml", 2)):
            cluster, usage = files[fmt]
            runs = [run_cli(cluster, usage) for _ in range(repeats)]
            assert all(code == 0 for _, _, code in runs), f"gpu-automator plan failed on {fmt}"
            best = min(r[0] for r in runs)
            peak = max(r[1] for r in runs)
            results[fmt] = (best, peak)
            size = cluster.stat().st_size / 1e6
            rows.append(f"| {fmt.upper()} | {size:.0f} MB | {best:.2f} s | {peak:.0f} MiB | {repeats} |")
    json_s, json_mib = results["json"]
    yaml_s, _ = results["yaml"]
    verdict_json = "met" if json_s < GOAL_JSON_S and json_mib < GOAL_JSON_MIB else "NOT met"
    verdict_yaml = "met" if yaml_s < GOAL_YAML_S else "NOT met"
    return (
        "## Loading a `kubectl` dump (`gpu-automator plan --cluster`)\n\n"
        "Command: `make bench` (all benchmarks), or for this section alone "
        "`.venv/bin/python -m tests.bench.run_all bench_loading`.\n\n"
        f"The planner benchmark's {NODES:,}-node cluster (10,000 running pods, {PREEMPTORS} preemptors, "
        "PriorityClasses, PDBs) written as one `kubectl get -o json|yaml` List, every object with what "
        "the API adds (managedFields of two managers, uid, owner, env, volumes, container statuses), and a "
        "usage "
        "file in the same format. Each run is `gpu-automator plan --output json` in a fresh process: wall "
        "time (best of the runs) and peak resident memory (the child's maxrss, worst of the runs), file "
        "reading, parsing, checks, planning and JSON output included.\n\n"
        "| format | file | end to end | peak memory | runs |\n|---|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n\n"
        f"Goals: JSON under {GOAL_JSON_S:.0f} s with peak memory under {GOAL_JSON_MIB} MiB: {verdict_json}; "
        f"YAML under {GOAL_YAML_S:.0f} s: {verdict_yaml}. JSON is told by content and parsed by `json` "
        "(managedFields dropped by an object hook as each object is built); YAML goes through libyaml's "
        "loader, which skips managedFields before building them. Each object is then cut down to the fields "
        "the planner reads (automator/records.py) as it is read, and the List's items are released one by "
        "one.\n"
    )


if __name__ == "__main__":
    sys.stdout.write(main())
