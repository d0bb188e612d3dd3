"""The demo's copies of the rules, alerts, cluster and scenario, with time compressed (`make demo-fast`).

Generated at run time from rules/, alerts/ and deploy/demo/, never committed, so they cannot drift:
- every rule group's `interval` is divided by the time factor, and the raw readings' range, one
  interval less 1 ms (`[29s999ms]`, docs/rules.md), follows the fast group's interval;
- the idle alert (GpuStewardGpuAllocatedIdle, an hour in production) fires after `idle_alert_seconds`,
  so that it shows within the demo, before the automator's window is full; the DRA usage alert
  (GpuStewardDraUsageOverClaim, 10 minutes) after `dra_alert_seconds`;
- the cluster's reclaim windows and toleration (PriorityClass annotations), the pods' (and pod
  templates') grace periods, the Deployments' load phases, and the scenario's phase times and periods,
  are divided by the factor.
Anything else (thresholds, `for:` durations of other alerts, the 1 h and 24 h reporting windows) is kept.
A pattern that is no longer found is an error: the demo fails instead of silently running other rules.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from steward_common.conventions import ANN_CPU_IDLE_SECONDS, ANN_GPU_IDLE_SECONDS, ANN_TOLERATION_SECONDS
from steward_common.series import POD_IDLE_SECONDS, RULE_INTERVAL_SECONDS
from tools.fakes.fakesim import LOAD_ANNOTATION, parse_load
from tools.fakes.kedasim import ScaledObject

IDLE_ALERT = "GpuStewardGpuAllocatedIdle"
DRA_ALERT = "GpuStewardDraUsageOverClaim"
_DRA_FOR = re.compile(rf"(- alert: {DRA_ALERT}\n(?:(?!\s*- alert:).*\n)*?\s*for: )(\S+)")
_DURATION = re.compile(r"(\d+)(ms|s|m|h)")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_INTERVAL = re.compile(r"^(\s*interval:\s*)(\S+)\s*$", re.MULTILINE)
_RAW_RANGE = f"[{RULE_INTERVAL_SECONDS - 1}s999ms]"
_IDLE_EXPR = re.compile(rf"({re.escape(POD_IDLE_SECONDS)}\s*>=\s*)(\d+)")
# Class annotations holding seconds (the reclaim windows and the toleration).
_SECONDS_ANNOTATIONS = (ANN_TOLERATION_SECONDS, ANN_GPU_IDLE_SECONDS, ANN_CPU_IDLE_SECONDS)


class DemoRulesError(ValueError):
    """rules/ or alerts/ changed so that the demo's compression no longer applies."""


def duration_ms(text: str) -> int:
    """Milliseconds of a Prometheus duration such as `2m`, `29s999ms`, `1h1s`."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise DemoRulesError(f"not a duration: {text!r}")
    return sum(int(n) * _UNITS_MS[u] for n, u in parts)


def format_ms(ms: int) -> str:
    if ms and ms % 60_000 == 0:
        return f"{ms // 60_000}m"
    seconds, rest = divmod(ms, 1000)
    return (f"{seconds}s" if seconds else "") + (f"{rest}ms" if rest or not seconds else "")


@dataclass(frozen=True)
class TimeScale:
    """Divide the story's durations by `factor`; the idle alert fires after `idle_alert_seconds` (real)."""

    factor: float = 1.0
    idle_alert_seconds: int = 60
    dra_alert_seconds: int = 60

    def scaled_ms(self, ms: int) -> int:
        return max(1000, round(ms / self.factor))

    def seconds(self, seconds: float) -> float:
        return seconds / self.factor

    @property
    def rule_interval_seconds(self) -> float:
        return self.scaled_ms(RULE_INTERVAL_SECONDS * 1000) / 1000


def compress_rules(
    text: str,
    scale: TimeScale,
    *,
    idle_alert: bool = False,
    recording: bool = False,
    dra_alert: bool = False,
) -> str:
    """One rule or alert file with its group intervals (and raw ranges, and the idle alert) rewritten.

    `recording`: the file must read raw series over one interval less 1 ms (the recording rules do).
    """

    def interval(m: re.Match[str]) -> str:
        return m.group(1) + format_ms(scale.scaled_ms(duration_ms(m.group(2))))

    out, groups = _INTERVAL.subn(interval, text)
    if groups == 0:
        raise DemoRulesError("no rule group sets `interval:`")
    if recording and _RAW_RANGE not in out:
        raise DemoRulesError(f"the recording rules no longer read raw series over {_RAW_RANGE}")
    out = out.replace(_RAW_RANGE, f"[{format_ms(round(scale.rule_interval_seconds * 1000) - 1)}]")
    if idle_alert:
        out, n = _IDLE_EXPR.subn(lambda m: m.group(1) + str(scale.idle_alert_seconds), out)
        if n != 1:
            raise DemoRulesError(
                f"expected one `{POD_IDLE_SECONDS} >= N` in the {IDLE_ALERT} alert, found {n}"
            )
    if dra_alert:
        out, n = _DRA_FOR.subn(lambda m: f"{m.group(1)}{scale.dra_alert_seconds}s", out)
        if n != 1:
            raise DemoRulesError(f"expected one `for:` in the {DRA_ALERT} alert, found {n}")
    return out


def write_rule_files(root: Path, target: Path, scale: TimeScale) -> list[Path]:
    """The demo's copies of rules/*.yaml and alerts/*.yaml under target (rules-NAME, alerts-NAME)."""
    target.mkdir(parents=True, exist_ok=True)
    out = []
    for source in sorted((root / "rules").glob("*.yaml")) + sorted((root / "alerts").glob("*.yaml")):
        text = source.read_text()
        kind = source.parent.name
        copy_ = target / f"{kind}-{source.name}"
        copy_.write_text(
            compress_rules(
                text,
                scale,
                idle_alert=IDLE_ALERT in text,
                recording=kind == "rules",
                dra_alert=f"alert: {DRA_ALERT}" in text,
            )
        )
        out.append(copy_)
    return out


def scale_cluster(objects: list[dict[str, Any]], scale: TimeScale) -> list[dict[str, Any]]:
    out = copy.deepcopy(objects)
    for obj in out:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        for key in _SECONDS_ANNOTATIONS:
            if key in annotations:
                annotations[key] = str(max(1, round(scale.seconds(float(annotations[key])))))
        if LOAD_ANNOTATION in annotations:
            phases = parse_load(annotations[LOAD_ANNOTATION])
            annotations[LOAD_ANNOTATION] = json.dumps(
                [{"from": scale.seconds(start), "utilization": level} for start, level in phases]
            )
        spec = obj.get("spec") or {}
        pod_spec = spec if obj.get("kind") == "Pod" else (spec.get("template") or {}).get("spec") or {}
        if "terminationGracePeriodSeconds" in pod_spec:
            pod_spec["terminationGracePeriodSeconds"] = max(
                1, round(scale.seconds(pod_spec["terminationGracePeriodSeconds"]))
            )
    return out


def scale_scenario(doc: dict[str, Any], scale: TimeScale) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    if "duration" in out:
        out["duration"] = scale.seconds(out["duration"])
    for gpu in out.get("gpus") or []:
        for key in ("fails_at", "recovers_at"):
            if gpu.get(key) is not None:
                gpu[key] = scale.seconds(gpu[key])
        for proc in gpu.get("processes") or []:
            if "period" in proc:
                proc["period"] = scale.seconds(proc["period"])
            for phase in proc.get("phases") or []:
                phase["from"] = scale.seconds(phase["from"])
    return out


def scale_scaled_object(so: ScaledObject, scale: TimeScale) -> ScaledObject:
    """The demo ScaledObject's polling interval and stabilization windows divided by the factor (the
    endpoint's window in its URL is kept: 30 s is the shortest the endpoint accepts)."""
    return dataclasses.replace(
        so,
        polling_interval=scale.seconds(so.polling_interval),
        scale_down_window=scale.seconds(so.scale_down_window),
        scale_up_window=scale.seconds(so.scale_up_window),
    )


def alert_for(root: Path, alert: str) -> str:
    """The `for:` of an alert in alerts/*.yaml (what production waits), e.g. `10m`."""
    for path in sorted((root / "alerts").glob("*.yaml")):
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups") or []:
            for rule in group.get("rules") or []:
                if rule.get("alert") == alert:
                    return str(rule.get("for", "0s"))
    raise DemoRulesError(f"no alert {alert} in alerts/")
