"""The backtest with gangs: rebuilt from kube-state-metrics' pod labels and annotations (the gang keys
allow-listed), an evicted victim gang one eviction of its members, regret when any member is busy again."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from automator.backtest import cluster as c
from automator.backtest.cluster import Evidence, Frame
from automator.backtest.replay import Policy, Replay
from automator.backtest.report import policy_json
from automator.objects.keys import ObjectKey
from automator.objects.priority_class import priority_class_records
from automator.reclaim.model import PlannerConfig, PodUsage, UsageWindow
from tests.automator.backtest.frames import FrameBuilder
from tests.automator.backtest.test_reconstruction import CLASSES

T0 = 1_780_000_000
IDLE = PodUsage(0.0, 1.0, None, 0.0)
GROUP = c.READ_LABELS["scheduling.x-k8s.io/pod-group"]
VOLCANO = c.READ_ANNOTATIONS["scheduling.k8s.io/group-name"]


def _frame() -> Frame:
    """A victim gang (coscheduling label) of two 4-GPU pods on gpu-1 and gpu-2, a pending 4-GPU pod on a
    Volcano gang of one (annotation), 4 GPUs free on neither node."""
    b = FrameBuilder().node("gpu-1", gpus=4).node("gpu-2", gpus=4)
    for name, node in (("w-0", "gpu-1"), ("w-1", "gpu-2")):
        b.pod("ml", name, 4, node=node, created=T0 - 7200)
        b.add(c.POD_LABELS, 1, namespace="ml", pod=name, uid=f"uid-{name}", **{GROUP: "train"})
    b.pod("hi", "p", 4, cls="high", created=T0)
    b.add(c.POD_ANNOTATIONS, 1, namespace="hi", pod="p", uid="uid-p", **{VOLCANO: "solo"})
    return b.frame()


def _idle(windows: Mapping[ObjectKey, UsageWindow], at: int, recent: int) -> Mapping[ObjectKey, PodUsage]:
    return {key: IDLE for key in windows}


def _replay() -> Replay:
    evidence = Evidence()
    evidence.add({"namespace": "hi", "pod": "p", "uid": "uid-p", "node": "gpu-1"})
    return Replay(Policy("p", PlannerConfig(), {}), priority_class_records(CLASSES), evidence, 300, 1800)


def test_the_gang_keys_are_read_back_into_the_pods() -> None:
    state = c.cluster_at(
        c.indexed(_frame()), priority_class_records(CLASSES), ("nvidia.com/gpu",), c.Overlay(), Evidence()
    )
    pods = {str(p.key): p for p in state.pods}
    assert pods["ml/w-0"].labels == {"scheduling.x-k8s.io/pod-group": "train"}
    assert pods["hi/p"].annotations == {"scheduling.k8s.io/group-name": "solo"}
    assert pods["ml/w-0"].gang is not None and pods["hi/p"].gang is not None


def test_an_evicted_victim_gang_is_one_eviction_of_its_members() -> None:
    def one_busy(
        pods: Iterable[ObjectKey], at: float, seconds: int
    ) -> Mapping[ObjectKey, Sequence[tuple[float, float]]]:
        return {ObjectKey("ml", "w-1"): [(at + 60, 0.9)]}

    replay = _replay()
    replay.step(T0, _frame(), _idle, one_busy)
    assert sorted((str(e.victim), e.node, e.gang) for e in replay.evictions) == [
        ("ml/w-0", "gpu-1", "ml/train"),
        ("ml/w-1", "gpu-2", "ml/train"),
    ]
    assert all(e.regret for e in replay.evictions)  # w-1 busy again: the gang's eviction is regret
    totals = policy_json(replay)["totals"]
    assert (totals["evictions"], totals["evicted_pods"], totals["regret_evictions"]) == (1, 2, 1)


def test_the_queries_ask_for_the_allow_listed_keys_only() -> None:
    assert c.KSM_QUERIES[c.POD_LABELS].count("kube_pod_labels{") == len(c.READ_LABELS)
    assert 'annotation_scheduling_k8s_io_group_name!=""' in c.KSM_QUERIES[c.POD_ANNOTATIONS]
