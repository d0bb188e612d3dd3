"""A synthetic GPU fleet for the rule benchmark: N nodes x 8 GPUs, served as the exporter serves them.

Names, types, help and label names come from steward_common/metrics.py (`SERVED`); nothing is retyped. The
fleet is a pure function of (nodes, seed, epoch), an epoch being one fast-group interval (30 s) since
`t0`, so the served scrape and the backfilled history agree.

Per node one of four layouts (weights in `LAYOUTS`): 8 one-GPU pods; a 4-GPU pod (a `main` container
allocated the 4 GPUs and a `sidecar` running a process on the first, not allocated) + 2 one-GPU pods +
2 GPUs time-sliced by 3 pods each; 4 one-GPU pods + 4 GPUs time-sliced by 2 pods each; one 8-GPU pod.
Each pod is idle (45 %), busy (40 %), bursty (10 %: busy every other epoch) or unknown (5 %: one
expected container reading missing). Churn: every pod slot is recreated under a new name after a
lifetime of 20-200 epochs (10-100 min; about 1 % of the pods per epoch).

Serve it: `python -m tests.bench.fleet --nodes 1250 --port 9400 --t0 <unix>`; Prometheus scrapes
`/metrics?node=<node>` once per node (`targets()` writes those scrape configs).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn
from typing import Final, TextIO
from urllib.parse import parse_qs, urlparse

from steward_common import metrics, series

GPUS_PER_NODE: Final = 8
EPOCH_SECONDS: Final = series.RULE_INTERVAL_SECONDS
NAMESPACES: Final = 100
GIB: Final = 1 << 30
MODEL: Final = "NVIDIA H100 80GB HBM3"

# What the synthetic exporter serves: every family the rules read plus the common per-GPU readings.
SERVED: Final[tuple[metrics.MetricSpec, ...]] = (
    metrics.GPU_UTILIZATION,
    metrics.GPU_MEMORY_USED,
    metrics.GPU_MEMORY_TOTAL,
    metrics.GPU_TEMPERATURE,
    metrics.GPU_POWER,
    metrics.GPU_ALLOCATION,
    metrics.CONTAINER_UTILIZATION,
    metrics.CONTAINER_MEMORY_USED,
    metrics.CONTAINER_PROCESSES,
    metrics.EXPORTER_SNAPSHOT_AGE,
)
_DEVICE = frozenset(metrics.DEVICE_LABELS)
_CONTAINER = frozenset(metrics.DEVICE_LABELS + metrics.CONTAINER_LABELS)

# (name, weight): see the module docstring.
LAYOUTS: Final = (("single", 0.35), ("mixed", 0.30), ("sliced", 0.25), ("whole", 0.10))
BEHAVIOURS: Final = (("idle", 0.45), ("busy", 0.40), ("bursty", 0.10), ("unknown", 0.05))


@dataclass(frozen=True)
class Slot:
    """A pod slot: the pod living there is recreated (new name) after each lifetime."""

    node: int
    namespace: str
    base: str
    gpus: tuple[int, ...]
    sidecar: bool  # a second container runs a process on the first GPU without an allocation
    behaviour: str
    lifetime: int
    phase: int
    util: float


@dataclass(frozen=True)
class Pod:
    node: int
    namespace: str
    name: str
    gpus: tuple[int, ...]
    sidecar: bool
    behaviour: str
    util: float  # of each container on each of its GPUs, this epoch
    born: int  # epoch the pod was created


def node_name(node: int) -> str:
    return f"gpu-node-{node:05d}"


def gpu_uuid(node: int, gpu: int) -> str:
    return f"GPU-{node:08x}-{gpu:04x}-4a2b-9c1d-{node * GPUS_PER_NODE + gpu:012x}"


def _pick(rng: random.Random, table: tuple[tuple[str, float], ...]) -> str:
    return rng.choices([n for n, _ in table], weights=[w for _, w in table])[0]


def _layout(kind: str) -> list[tuple[tuple[int, ...], bool]]:
    """(GPUs, has sidecar) per pod slot of a node."""
    if kind == "single":
        return [((g,), False) for g in range(8)]
    if kind == "mixed":
        return [((0, 1, 2, 3), True), ((4,), False), ((5,), False)] + [
            ((g,), False) for g in (6, 7) for _ in range(3)
        ]
    if kind == "sliced":
        return [((g,), False) for g in range(4)] + [((g,), False) for g in range(4, 8) for _ in range(2)]
    return [(tuple(range(8)), False)]


@cache
def slots(node: int, seed: int) -> tuple[Slot, ...]:
    rng = random.Random(seed * 1_000_003 + node)
    out = []
    for i, (gpus, sidecar) in enumerate(_layout(_pick(rng, LAYOUTS))):
        behaviour = _pick(rng, BEHAVIOURS)
        util = rng.uniform(0.0, 0.03) if behaviour == "idle" else rng.uniform(0.3, 0.95)
        lifetime = rng.randint(20, 200)
        out.append(
            Slot(
                node=node,
                namespace=f"team-{rng.randrange(NAMESPACES):03d}",
                base=f"job-{node:05d}-{i}",
                gpus=gpus,
                sidecar=sidecar,
                behaviour=behaviour,
                lifetime=lifetime,
                phase=rng.randrange(lifetime),
                util=round(util, 3),
            )
        )
    return tuple(out)


def pods(node: int, seed: int, epoch: int) -> list[Pod]:
    out = []
    for s in slots(node, seed):
        generation = (epoch + s.phase) // s.lifetime
        util = s.util if s.behaviour != "bursty" or epoch % 2 == 0 else 0.0
        out.append(
            Pod(
                node=node,
                namespace=s.namespace,
                name=f"{s.base}-g{generation}",
                gpus=s.gpus,
                sidecar=s.sidecar,
                behaviour=s.behaviour,
                util=util,
                born=generation * s.lifetime - s.phase,
            )
        )
    return out


def _labels(spec: metrics.MetricSpec, values: dict[str, str]) -> str:
    return "{" + ",".join(f'{name}="{values[name]}"' for name in spec.labels) + "}"


def _device_values(spec: metrics.MetricSpec, gpu: int) -> float:
    if spec is metrics.GPU_MEMORY_TOTAL:
        return 80.0 * GIB
    if spec is metrics.GPU_TEMPERATURE:
        return 40.0 + gpu
    if spec is metrics.GPU_POWER:
        return 120.0 + 10 * gpu
    if spec is metrics.GPU_MEMORY_USED:
        return 20.0 * GIB
    return 0.5


def render(node: int, seed: int, epoch: int) -> str:
    """One node's scrape at `epoch`, in the text exposition format."""
    name = node_name(node)
    device = [
        {"node": name, "gpu": str(g), "uuid": gpu_uuid(node, g), "model": MODEL} for g in range(GPUS_PER_NODE)
    ]
    # (device labels + container labels, utilization or None when the reading is missing)
    containers: list[tuple[dict[str, str], bool, float | None]] = []  # labels, allocated, util
    for pod in pods(node, seed, epoch):
        for i, g in enumerate(pod.gpus):
            base = {**device[g], "namespace": pod.namespace, "pod": pod.name}
            missing = pod.behaviour == "unknown" and i == 0
            containers.append(({**base, "container": "main"}, True, None if missing else pod.util))
        if pod.sidecar:
            base = {**device[pod.gpus[0]], "namespace": pod.namespace, "pod": pod.name}
            containers.append(({**base, "container": "sidecar"}, False, 0.01))
    lines: list[str] = []
    for spec in SERVED:
        lines.append(f"# HELP {spec.sample_name} {spec.help}")
        lines.append(f"# TYPE {spec.sample_name} {spec.kind}")
        if spec is metrics.EXPORTER_SNAPSHOT_AGE:
            lines.append(f'{spec.sample_name}{{node="{name}"}} 1.5')
        elif set(spec.labels) == _DEVICE:
            lines.extend(
                f"{spec.sample_name}{_labels(spec, d)} {_device_values(spec, int(d['gpu']))}" for d in device
            )
        elif set(spec.labels) == _CONTAINER:
            for values, allocated, util in containers:
                if spec is metrics.GPU_ALLOCATION:
                    if allocated:
                        lines.append(f"{spec.sample_name}{_labels(spec, values)} 1")
                elif spec is metrics.CONTAINER_UTILIZATION:
                    if util is not None:
                        lines.append(f"{spec.sample_name}{_labels(spec, values)} {util}")
                elif spec is metrics.CONTAINER_MEMORY_USED:
                    lines.append(f"{spec.sample_name}{_labels(spec, values)} {4 * GIB}")
                else:
                    lines.append(f"{spec.sample_name}{_labels(spec, values)} 1")
        else:
            raise AssertionError(f"{spec.name}: labels {spec.labels} not synthesized")
    return "\n".join(lines) + "\n"


def epoch_at(t0: float, now: float) -> int:
    return int((now - t0) // EPOCH_SECONDS)


# --- backfill: the history the rules read ------------------------------------------------------------


def _om_labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""


def backfill(out: TextIO, nodes: int, seed: int, t0: float, recent: int, activity: int, totals: int) -> int:
    """Write OpenMetrics history of the recorded series before t0; return the number of samples.

    What the rules read from the past: the pod activity over `activity` epochs (coverage reads 1 h),
    the idle flag, clock, carry, GPUs held and the evaluation timestamp over `recent` epochs (read with
    `offset 1s` and `last_over_time(...[5m])`), and the running idle total per namespace over
    `totals` epochs (read `offset 24h1s`). Values follow the fleet; the clocks count from each pod's
    birth.
    """
    samples = 0

    def family(name: str, rows: Iterator[tuple[dict[str, str], float, float]]) -> None:
        nonlocal samples
        out.write(f"# TYPE {name} gauge\n")
        for labels, value, ts in rows:
            out.write(f"{name}{_om_labels(labels)} {value} {ts:.3f}\n")
            samples += 1

    def each_pod(epochs: int) -> Iterator[tuple[int, Pod]]:
        for node in range(nodes):
            for e in range(-epochs, 0):
                for pod in pods(node, seed, e):
                    yield e, pod

    def ts(e: int) -> float:
        return t0 + e * EPOCH_SECONDS

    def key(pod: Pod) -> dict[str, str]:
        return {"namespace": pod.namespace, "pod": pod.name}

    def known(epochs: int) -> Iterator[tuple[int, Pod]]:
        return ((e, p) for e, p in each_pod(epochs) if p.behaviour != "unknown")

    family(series.POD_ACTIVITY, ((key(p), p.util, ts(e)) for e, p in known(activity)))
    recent_known = list(known(recent))
    idle = series.IDLE_THRESHOLD
    family(series.POD_IDLE, ((key(p), float(p.util <= idle), ts(e)) for e, p in recent_known))
    clock = [(e, p, float(EPOCH_SECONDS * (e - p.born)) if p.util <= idle else 0.0) for e, p in recent_known]
    family(series.POD_IDLE_SECONDS, ((key(p), c, ts(e)) for e, p, c in clock))
    family(
        series.POD_IDLE_SECONDS_CARRY,
        (({"node": node_name(p.node), **key(p)}, c, ts(e)) for e, p, c in clock),
    )
    family(
        series.POD_GPUS,
        ((key(p), float(len(p.gpus)), ts(e)) for e, p in each_pod(recent)),
    )
    family(series.RULE_EVALUATION_TIMESTAMP, (({}, ts(e), ts(e)) for e in range(-recent, 0)))
    # The running idle total per namespace: the namespace's idle GPUs now, integrated backwards.
    idle_gpus: dict[str, float] = {}
    for node in range(nodes):
        for pod in pods(node, seed, -1):
            if pod.behaviour == "idle":
                idle_gpus[pod.namespace] = idle_gpus.get(pod.namespace, 0.0) + len(pod.gpus)
    family(
        series.NAMESPACE_IDLE_GPU_SECONDS_TOTAL,
        (
            ({"namespace": ns}, per_epoch * EPOCH_SECONDS * (totals + e), ts(e))
            for ns, per_epoch in sorted(idle_gpus.items())
            for e in range(-totals, 0)
        ),
    )
    out.write("# EOF\n")
    return samples


# --- serving ----------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: _FleetServer
    timeout = 10  # seconds a connection may stay silent

    def do_GET(self) -> None:
        url = urlparse(self.path)
        node = parse_qs(url.query).get("node", [""])[0]
        if url.path != "/metrics" or node not in self.server.index:
            self.send_error(404)
            return
        body = self.server.scrape(self.server.index[node])
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _FleetServer(ThreadingMixIn, HTTPServer):
    """A thread per connection, at most `MAX_THREADS` at once (accepting waits for a free one): a
    scraper that is slow to send its request (a starved Prometheus) holds one thread, not the whole
    fleet. Bodies are cached per (node, epoch)."""

    request_queue_size = 256
    daemon_threads = True
    MAX_THREADS: Final = 32

    def __init__(self, port: int, nodes: int, seed: int, t0: float) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.nodes, self.seed, self.t0 = nodes, seed, t0
        self.index = {node_name(n): n for n in range(nodes)}
        self._cache: dict[tuple[int, int], bytes] = {}
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.MAX_THREADS)

    def process_request(self, request: object, client_address: object) -> None:
        self._slots.acquire()
        try:
            super().process_request(request, client_address)  # type: ignore[arg-type]
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: object, client_address: object) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[arg-type]
        finally:
            self._slots.release()

    def scrape(self, node: int) -> bytes:
        epoch = epoch_at(self.t0, time.time())
        with self._lock:
            body = self._cache.get((node, epoch))
            if body is None:
                if len(self._cache) > 4 * self.nodes:
                    self._cache = {k: v for k, v in self._cache.items() if k[1] >= epoch - 1}
                body = self._cache[(node, epoch)] = render(node, self.seed, epoch).encode()
        return body


def scrape_configs(nodes: int, port: int, job: str = "gpu-steward-exporter") -> list[dict[str, object]]:
    """One target per node, each with its own `instance` and its `node` query parameter."""
    return [
        {
            "job_name": job,
            "scrape_interval": f"{EPOCH_SECONDS}s",
            "scrape_timeout": "10s",
            "static_configs": [
                {
                    "targets": [f"127.0.0.1:{port}"],
                    "labels": {"instance": f"{node_name(n)}:9400", "__param_node": node_name(n)},
                }
                for n in range(nodes)
            ],
        }
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--t0", type=float, required=True)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    server = _FleetServer(args.port, args.nodes, args.seed, args.t0)
    print(f"serving {args.nodes} nodes on 127.0.0.1:{args.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
