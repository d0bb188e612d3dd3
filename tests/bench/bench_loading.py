"""Loading benchmark: `gpu-automator plan` end to end on a 10,000-pod `kubectl get -o json|yaml`
dump with managedFields, in a fresh process each run: wall time and peak memory (the child's maxrss).

`main()` returns a markdown section for docs/benchmarks.md (tests/bench/run_all.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from automator.objects.keys import JsonObj, ObjectKey
from automator.reclaim.model import PodUsage
from tests.bench.bench_planner import NOW, generate_objects

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


def _lean(obj: JsonObj, i: int) -> JsonObj:
    """The lean dump: the objects with a uid and the managedFields of the manager that set their
    labels and containers (about 9 MB of YAML for the 1,250-node cluster)."""
    meta = obj["metadata"]
    meta["uid"] = f"{i:08x}-1111-2222-3333-444455556666"
    fields: dict[str, Any] = {"f:metadata": {"f:labels": {f"f:{k}": {} for k in meta.get("labels") or {}}}}
    if obj["kind"] == "Pod":
        fields["f:spec"] = {"f:containers": {'k:{"name":"c"}': {".": {}, "f:resources": {}}}}
    meta["managedFields"] = [
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
            "manager": "kubectl-create",
            "operation": "Update",
            "time": meta.get("creationTimestamp", "2025-06-01T00:00:00Z"),
        }
    ]
    return obj


def _full(obj: JsonObj, i: int) -> JsonObj:
    """What the API adds to a real pod: ids, owners, env, volumes, statuses, managedFields of two managers."""
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


def dump_items(
    full: bool, nodes: int = NODES, preemptors: int = PREEMPTORS
) -> tuple[list[JsonObj], dict[ObjectKey, PodUsage]]:
    """The planner benchmark's cluster as the objects of a dump (classes, nodes, PDBs, pods; lean or full
    pods), and its usage."""
    (nodes_, pods_, classes, pdbs), usage = generate_objects(nodes, preemptors)
    objs = [*classes, *nodes_, *pdbs, *pods_]
    dress = _full if full else _lean
    return [dress(json.loads(json.dumps(o)), i) for i, o in enumerate(objs)], usage


def write_dump(
    directory: Path, full: bool, formats: tuple[str, ...] = ("json", "yaml")
) -> dict[str, tuple[Path, Path]]:
    items, usage = dump_items(full)
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
    for fmt in formats:
        kind = "full" if full else "lean"
        cluster, usage_file = directory / f"pods-{kind}.{fmt}", directory / f"usage.{fmt}"
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


# Runs the CLI as `python -m automator` does and prints the process's peak resident memory (VmHWM of its
# own address space) at exit. The child's maxrss from wait4 would not do: a child forked from this large
# benchmark process inherits the parent's resident size as its maxrss.
_CHILD = (
    "import atexit, resource, runpy, sys\n"
    "def peak():\n"
    "    status = open('/proc/self/status').read()\n"
    "    use = resource.getrusage(resource.RUSAGE_SELF)\n"
    "    print('VmHWM', status.split('VmHWM:')[1].split()[0], use.ru_utime + use.ru_stime, file=sys.stderr)\n"
    "atexit.register(peak)\n"
    "sys.argv = ['gpu-automator', *sys.argv[1:]]\n"
    "runpy.run_module('automator', run_name='__main__')\n"
)


def plan_args(cluster: Path, usage: Path) -> list[str]:
    """The arguments of the `gpu-automator plan` both benchmarks of a dump run."""
    now = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    return ["plan", "--cluster", str(cluster), "--usage", str(usage), "--output", "json", "--now", now]


def run_cli(cluster: Path, usage: Path) -> tuple[float, float, int, float]:
    """(wall seconds, peak resident MiB, exit code, CPU seconds) of one `gpu-automator plan` in a fresh
    process."""
    argv = [sys.executable, "-c", _CHILD, *plan_args(cluster, usage)]
    started = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - started
    report = [line.split() for line in proc.stderr.splitlines() if line.startswith("VmHWM ")]
    if not report:
        return elapsed, float("nan"), proc.returncode or 1, float("nan")
    return elapsed, int(report[-1][1]) / 1024, proc.returncode, float(report[-1][2])


def _measure(
    directory: Path, full: bool, repeats: dict[str, int]
) -> dict[str, tuple[float, float, float, float]]:
    """Per format: (file MB, best wall seconds, worst peak MiB, best CPU seconds)."""
    files = write_dump(directory, full)
    out = {}
    for fmt, (cluster, usage) in files.items():
        runs = [run_cli(cluster, usage) for _ in range(repeats[fmt])]
        assert all(r[2] == 0 for r in runs), f"gpu-automator plan failed on {cluster}"
        out[fmt] = (
            cluster.stat().st_size / 1e6,
            min(r[0] for r in runs),
            max(r[1] for r in runs),
            min(r[3] for r in runs),
        )
        cluster.unlink()
    return out


def main() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        lean = _measure(Path(tmp), False, {"json": 3, "yaml": 2})
        full = _measure(Path(tmp), True, {"json": 2, "yaml": 1})
    rows = "\n".join(
        f"| {name} | {fmt.upper()} | {mb:.0f} MB | {s:.2f} s | {cpu:.2f} s | {mib:.0f} MiB |"
        for name, results in (("lean dump", lean), ("full pods", full))
        for fmt, (mb, s, mib, cpu) in results.items()
    )
    # Judged on CPU time: on the shared development machine wall time is mostly waiting for a core.
    _, _, json_mib, json_s = lean["json"]
    _, _, _, yaml_s = lean["yaml"]
    verdict_json = "met" if json_s < GOAL_JSON_S and json_mib < GOAL_JSON_MIB else "NOT met"
    verdict_yaml = "met" if yaml_s < GOAL_YAML_S else "NOT met"
    return (
        "## Loading a `kubectl` dump (`gpu-automator plan --cluster`)\n\n"
        "Command: `make bench` (all benchmarks), or for this section alone "
        "`.venv/bin/python -m tests.bench.run_all bench_loading`.\n\n"
        f"The planner benchmark's {NODES:,}-node cluster (10,000 running pods, {PREEMPTORS} preemptors, "
        "PriorityClasses, PDBs) written as one `kubectl get -o json|yaml` List (JSON indented as kubectl "
        "does), with a usage file in the same format. *Lean dump*: every object with a uid and "
        "managedFields, about 9 MB of YAML. *Full pods*: what the API adds to a "
        "real pod as well (managedFields of two managers, owner, env, volumes, container statuses). Each run "
        "is `gpu-automator plan --output json` in a fresh process: wall time (best of 3 runs, 2 for YAML, "
        "1-2 for the full pods), its CPU time (user + system) and peak resident memory (the process's "
        "VmHWM, worst run), reading, parsing, "
        "checks, planning and output included.\n\n"
        "| dump | format | file | end to end | CPU | peak memory |\n|---|---|---:|---:|---:|---:|\n"
        + rows
        + "\n\n"
        f"Goals (lean dump, on CPU time: wall time on the shared machine is mostly waiting for a "
        f"core): JSON under {GOAL_JSON_S:.0f} s with peak memory under {GOAL_JSON_MIB} MiB: "
        f"{json_s:.2f} s, {json_mib:.0f} MiB, {verdict_json}; YAML under {GOAL_YAML_S:.0f} s: "
        f"{yaml_s:.2f} s, {verdict_yaml}. "
        "JSON is told by content and "
        "parsed by msgspec one List item at a time: each item is decoded, cut down to its record "
        "(automator/objects/) and released before the next, so the whole dump is never held decoded. YAML "
        "goes through libyaml's loader, which skips managedFields before building them, but composes each "
        "document whole before building it: a YAML dump costs several times a JSON one in time and memory. "
        "Cyclic garbage collection is paused while the file is read and while the pass plans.\n"
    )


if __name__ == "__main__":
    sys.stdout.write(main())
