"""The check's verdicts: pure functions from measured values to lines of measured versus expected.

Inputs are plain data gathered by tools/gpucheck/run.py: the GPUs as NVML (and nvidia-smi) describe them,
the children and what they allocated, per child the NVML source's readings of its PID, and the exporter's
scrapes as (name, labels, value) series. A verdict is PASS, FAIL, or SKIP (nothing to compare with, e.g.
no nvidia-smi): a SKIP claims nothing.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from steward_common import metrics as m
from steward_common.series import IDLE_THRESHOLD

Status = Literal["PASS", "FAIL", "SKIP"]
MEMORY_TOLERANCE = 0.05  # per-process memory against nvidia-smi and against the allocation
DEVICE_UTILIZATION_FLOOR = 0.9  # the device's utilization while the busy child runs
MIB = 1024 * 1024
GIB = 1024 * MIB


@dataclass(frozen=True)
class Verdict:
    check: str
    status: Status
    measured: str
    expected: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.check}: measured {self.measured}; expected {self.expected}"


@dataclass(frozen=True)
class Series:
    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class GpuFacts:
    """A GPU as NVML (or nvidia-smi) describes it; None where it did not tell."""

    index: int
    uuid: str
    model: str | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    pci_bus_id: str | None = None


@dataclass(frozen=True)
class Child:
    role: str  # busy, duty, memory
    pid: int
    allocated_bytes: int


@dataclass
class Trace:
    """One PID as the NVML source read it, collection after collection (None: unknown that time)."""

    pid: int
    memory: list[int | None] = field(default_factory=list)
    utilization: list[float | None] = field(default_factory=list)

    def memory_bytes(self) -> int | None:
        known = [v for v in self.memory if v is not None]
        return int(statistics.median(known)) if known else None

    def known_utilization(self) -> list[float]:
        return [v for v in self.utilization if v is not None]


@dataclass(frozen=True)
class Match:
    child: Child
    trace: Trace | None
    by: Literal["pid", "memory", "none"]


def select(series: Sequence[Series], name: str, **labels: str) -> list[Series]:
    return [s for s in series if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def _gib(value: float | None) -> str:
    return "unknown" if value is None else f"{value / GIB:.2f} GiB"


def _within(measured: float, expected: float, tolerance: float) -> bool:
    return expected > 0 and abs(measured - expected) <= tolerance * expected


def match_children(children: Sequence[Child], traces: Mapping[int, Trace]) -> list[Match]:
    """Each child's trace: by PID, else (NVML reporting PIDs of another PID namespace) the unclaimed PID
    whose memory is within MEMORY_TOLERANCE of the child's allocation, nearest first."""
    claimed = {c.pid for c in children if c.pid in traces}
    out = []
    for child in children:
        if child.pid in traces:
            out.append(Match(child, traces[child.pid], "pid"))
            continue
        candidates = [
            t
            for pid, t in traces.items()
            if pid not in claimed
            and (mem := t.memory_bytes()) is not None
            and _within(mem, child.allocated_bytes, MEMORY_TOLERANCE)
        ]
        if candidates:
            best = min(candidates, key=lambda t: abs((t.memory_bytes() or 0) - child.allocated_bytes))
            claimed.add(best.pid)
            out.append(Match(child, best, "memory"))
        else:
            out.append(Match(child, None, "none"))
    return out


def gpus_listed(
    nvml: Sequence[GpuFacts], scrape: Sequence[Series], smi: Sequence[GpuFacts] | None
) -> list[Verdict]:
    """Every GPU in the exporter's gpu_info with its UUID and model, its memory total and its power."""
    out = []
    listed = {s.labels.get("uuid") for s in select(scrape, m.GPU_INFO.sample_name)}
    names = sorted(g.uuid for g in nvml)
    out.append(
        Verdict(
            "every GPU listed",
            "PASS" if set(names) <= listed and nvml else "FAIL",
            f"exporter gpu_info for {sorted(u for u in listed if u)}",
            f"NVML's GPUs {names}",
        )
    )
    if smi is not None:
        smi_names = sorted(g.uuid for g in smi)
        out.append(
            Verdict(
                "NVML and nvidia-smi list the same GPUs",
                "PASS" if smi_names == names else "FAIL",
                f"nvidia-smi {smi_names}",
                f"NVML {names}",
            )
        )
    by_smi = {g.uuid: g for g in smi or []}
    for gpu in nvml:
        info = select(scrape, m.GPU_INFO.sample_name, uuid=gpu.uuid)
        model = info[0].labels.get("model") if info else None
        total = select(scrape, m.GPU_MEMORY_TOTAL.sample_name, uuid=gpu.uuid)
        power = select(scrape, m.GPU_POWER.sample_name, uuid=gpu.uuid)
        served_total = int(total[0].value) if total else None
        served_power = power[0].value if power else None
        ok = (
            model is not None
            and model == gpu.model
            and served_total is not None
            and served_total == gpu.memory_total_bytes
            and served_power is not None
            and served_power > 0
        )
        expected = f"model {gpu.model!r}, memory total {gpu.memory_total_bytes} B (NVML), power > 0 W"
        reference = by_smi.get(gpu.uuid)
        if reference is not None and reference.memory_total_bytes is not None:
            # nvidia-smi reports whole MiB
            smi_mib = reference.memory_total_bytes // MIB
            ok = ok and served_total is not None and abs(served_total / MIB - smi_mib) < 1
            expected += f", {smi_mib} MiB (nvidia-smi)"
        out.append(
            Verdict(
                f"GPU {gpu.index} {gpu.uuid} identity, memory, power",
                "PASS" if ok else "FAIL",
                f"model {model!r}, memory total {served_total} B, power {served_power} W",
                expected,
            )
        )
    return out


def child_memory(matches: Sequence[Match], smi_apps: Mapping[int, int] | None) -> list[Verdict]:
    """Each child's PID with its memory: within 5 % of its allocation and of nvidia-smi's reading."""
    out = []
    for match in matches:
        child, trace = match.child, match.trace
        name = f"{child.role} child (pid {child.pid})"
        listed = match.by == "pid"
        pid_note = {
            "pid": "listed",
            "memory": f"not listed; NVML pid {trace.pid if trace else '?'} holds its memory "
            "(another PID namespace?)",
            "none": "not listed",
        }[match.by]
        out.append(
            Verdict(f"{name} listed by NVML", "PASS" if listed else "FAIL", pid_note, "listed by its PID")
        )
        used = trace.memory_bytes() if trace else None
        out.append(
            Verdict(
                f"{name} memory vs its allocation",
                "PASS"
                if used is not None and _within(used, child.allocated_bytes, MEMORY_TOLERANCE)
                else "FAIL",
                _gib(used),
                f"{_gib(child.allocated_bytes)} ± {MEMORY_TOLERANCE:.0%}",
            )
        )
        if smi_apps is None:
            out.append(
                Verdict(f"{name} memory vs nvidia-smi", "SKIP", "no nvidia-smi", "nvidia-smi's reading")
            )
            continue
        smi = smi_apps.get(trace.pid if trace else child.pid)
        ok = used is not None and smi is not None and _within(used, smi, MEMORY_TOLERANCE)
        out.append(
            Verdict(
                f"{name} memory vs nvidia-smi",
                "PASS" if ok else "FAIL",
                f"NVML {_gib(used)}",
                f"nvidia-smi's {_gib(smi)} ± {MEMORY_TOLERANCE:.0%}"
                if smi is not None
                else "the PID in nvidia-smi --query-compute-apps",
            )
        )
    return out


def utilization_order(matches: Sequence[Match], threshold: float = IDLE_THRESHOLD) -> list[Verdict]:
    """Per-process SM utilization: busy > duty > memory-only (by mean), and memory-only idle by the
    recording rules' threshold (its highest reading at or below it, as the rules' `<= bool`)."""
    by_role = {mt.child.role: mt.trace.known_utilization() if mt.trace else [] for mt in matches}
    means = {role: statistics.fmean(v) if v else None for role, v in by_role.items()}
    shown = ", ".join(f"{r} {'unknown' if v is None else f'{v:.2f}'}" for r, v in means.items())
    busy, duty, memory = means.get("busy"), means.get("duty"), means.get("memory")
    if busy is None and duty is None and memory is None:
        return [
            Verdict(
                "per-process utilization order",
                "SKIP",
                "no per-process utilization (NOT_SUPPORTED, or no PID matched)",
                "busy > duty > memory-only",
            )
        ]
    ordered = busy is not None and duty is not None and memory is not None and busy > duty > memory
    peak = max(by_role.get("memory") or [], default=None)
    return [
        Verdict(
            "per-process utilization order", "PASS" if ordered else "FAIL", shown, "busy > duty > memory-only"
        ),
        Verdict(
            "memory-only child idle by the rules' threshold",
            "PASS" if peak is not None and peak <= threshold else "FAIL",
            "unknown" if peak is None else f"highest {peak:.3f}",
            f"<= {threshold} (steward_common/series.py IDLE_THRESHOLD)",
        ),
    ]


def device_utilization(
    uuid: str, scrapes: Sequence[Sequence[Series]], floor: float = DEVICE_UTILIZATION_FLOOR
) -> Verdict:
    """The exporter's device utilization while the busy child runs (the median over the scrapes)."""
    values = [s.value for scrape in scrapes for s in select(scrape, m.GPU_UTILIZATION.sample_name, uuid=uuid)]
    median = statistics.median(values) if values else None
    return Verdict(
        f"device utilization of {uuid} while the busy child runs",
        "PASS" if median is not None and median > floor else "FAIL",
        "no series" if median is None else f"median {median:.3f} over {len(values)} scrapes",
        f"> {floor}",
    )


def not_supported(
    uuid: str, unsupported: Sequence[str], nvml_errors: Mapping[str, str], scrape: Sequence[Series]
) -> Verdict:
    """NOT_SUPPORTED fields are left out, not counted as read errors: no `NotSupported` read error, and the
    GPU's collection succeeds unless NVML itself failed a read (then those errors, not NOT_SUPPORTED)."""
    errors = select(scrape, m.GPU_READ_ERRORS.sample_name, uuid=uuid)
    as_errors = sorted({s.labels.get("field", "") for s in errors if s.labels.get("error") == "NotSupported"})
    success = select(scrape, m.GPU_COLLECTION_SUCCESS.sample_name, uuid=uuid)
    ok_value = success[0].value if success else None
    fine = not as_errors and success != [] and (ok_value == 1 or bool(nvml_errors))
    other = sorted(
        f"{s.labels.get('field')}={s.labels.get('error')}"
        for s in errors
        if s.labels.get("error") != "NotSupported"
    )
    return Verdict(
        f"NOT_SUPPORTED fields of {uuid} reported as such",
        "PASS" if fine else "FAIL",
        f"NOT_SUPPORTED {list(unsupported) or 'none'}; read errors as NotSupported {as_errors or 'none'}; "
        f"other read errors {other or 'none'}; collection_success {ok_value}",
        "no NotSupported read error; collection_success 1"
        + (f" unless NVML failed {sorted(nvml_errors)}" if nvml_errors else ""),
    )


def dcgm_labels(
    nvml: Sequence[GpuFacts],
    driver_version: str | None,
    scrape: Sequence[Series],
    smi: Sequence[GpuFacts] | None = None,
    smi_driver: str | None = None,
) -> list[Verdict]:
    """The dcgm compat series carry the real pci_bus_id and driver version (NVML's, and nvidia-smi's)."""
    by_smi = {g.uuid: g for g in smi or []}
    out = []
    for gpu in nvml:
        series = [s for s in scrape if s.name.startswith("DCGM_FI_") and s.labels.get("UUID") == gpu.uuid]
        buses = sorted({s.labels.get("pci_bus_id", "") for s in series})
        drivers = sorted({s.labels.get("DCGM_FI_DRIVER_VERSION", "") for s in series})
        want_bus = (gpu.pci_bus_id or "").lower()
        reference = by_smi.get(gpu.uuid)
        ok = (
            bool(series)
            and [b.lower() for b in buses] == [want_bus]
            and drivers == [driver_version]
            and bool(want_bus)
            and (reference is None or (reference.pci_bus_id or "").lower() == want_bus)
            and (smi_driver is None or smi_driver == driver_version)
        )
        expected = f"pci_bus_id {gpu.pci_bus_id}, driver {driver_version} (NVML)"
        if reference is not None or smi_driver is not None:
            expected += f"; nvidia-smi {reference.pci_bus_id if reference else '?'}, driver {smi_driver}"
        out.append(
            Verdict(
                f"dcgm series of {gpu.uuid} carry pci_bus_id and driver version",
                "PASS" if ok else "FAIL",
                f"{len(series)} series, pci_bus_id {buses}, DCGM_FI_DRIVER_VERSION {drivers}",
                expected,
            )
        )
    return out


def host_processes(uuid: str, children: int, scrape: Sequence[Series]) -> Verdict:
    """Without Kubernetes the children are unattributed host processes (reason="host")."""
    counts = {
        s.labels.get("reason", ""): s.value
        for s in select(scrape, m.UNATTRIBUTED_PROCESSES.sample_name, uuid=uuid)
    }
    host = counts.get("host", 0.0)
    return Verdict(
        f"children on {uuid} are unattributed host processes",
        "PASS" if host >= children else "FAIL",
        ", ".join(f"{r} {v:g}" for r, v in sorted(counts.items())) or "no series",
        f'at least {children} with reason="host"',
    )


def children_started(ready: Sequence[Mapping[str, object]], uuid: str) -> list[Verdict]:
    """Each child's ready line: its GPU, and for the kernels that the JIT-compiled PTX ran its full spin."""
    out = []
    for line in ready:
        role = str(line.get("role"))
        if "error" in line:
            out.append(
                Verdict(f"{role} child started", "FAIL", str(line["error"]), "a context and its memory")
            )
            continue
        on = line.get("uuid")
        out.append(
            Verdict(f"{role} child runs on the checked GPU", "PASS" if on == uuid else "FAIL", str(on), uuid)
        )
        spun, asked = line.get("probe_spin_ns"), line.get("probe_requested_ns")
        if isinstance(spun, int) and isinstance(asked, int):
            out.append(
                Verdict(
                    f"{role} child's PTX kernel ran",
                    "PASS" if spun >= asked else "FAIL",
                    f"spun {spun / 1e6:.3f} ms",
                    f">= {asked / 1e6:.3f} ms",
                )
            )
    return out


def elapsed(seconds: float, limit: float) -> Verdict:
    return Verdict(
        "check finished in time",
        "PASS" if seconds < limit else "FAIL",
        f"{seconds:.0f} s",
        f"< {limit:.0f} s",
    )


def summary(verdicts: Sequence[Verdict]) -> dict[Status, int]:
    counts: dict[Status, int] = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for v in verdicts:
        counts[v.status] += 1
    return counts
