"""objects_at, cluster_at: kube-state-metrics samples -> the objects a live pass lists, and the approximations
(each one can only make the backtest evict less), checked through the planner itself."""

from __future__ import annotations

from datetime import UTC, datetime

from automator.backtest import cluster as c
from automator.backtest.cluster import Evidence, Overlay, cluster_at, has_data, pods_in_history
from automator.objects.keys import JsonObj, ObjectKey
from automator.objects.pod import pod_record
from automator.reclaim import planner
from automator.reclaim.model import PlannerConfig, PodUsage
from steward_common.conventions import DEFAULT_GPU_RESOURCE, NEVER_RECLAIM_LABEL, RECLAIM_ANNOTATION
from tests.automator.backtest.frames import FrameBuilder

T0 = 1_780_000_000.0
NOW = datetime.fromtimestamp(T0 + 7200, tz=UTC)
GPUS = (DEFAULT_GPU_RESOURCE,)
CLASSES: list[JsonObj] = [
    {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "low"},
        "value": 100,
    },
    {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high", "annotations": {RECLAIM_ANNOTATION: "true"}},
        "value": 1000,
        "preemptionPolicy": "Never",
    },
]
IDLE = PodUsage(0.0, 1.0, None, 0.0)


def _evidence(*pairs: tuple[str, str]) -> Evidence:
    found = Evidence()
    for uid, node in pairs:
        found.add({"namespace": "hi", "pod": uid.removeprefix("uid-"), "uid": uid, "node": node})
    return found


def _basic() -> FrameBuilder:
    return (
        FrameBuilder()
        .node("gpu-1")
        .pod("ml", "idle", 8, node="gpu-1", created=T0, started=T0 + 30)
        .pod("hi", "p", 8, cls="high", created=T0 + 3600)
    )


def _pods(state: object) -> dict[ObjectKey, JsonObj]:
    return {ObjectKey.of(p): p for p in state.pods}  # type: ignore[attr-defined]


def test_pods_as_kubectl_shows_them() -> None:
    state = c.objects_at(_basic().frame(), CLASSES, GPUS, Overlay(), _evidence(("uid-p", "gpu-1")))
    pods = _pods(state)
    idle, pending = pods[ObjectKey("ml", "idle")], pods[ObjectKey("hi", "p")]
    assert idle["metadata"]["uid"] == "uid-idle"
    assert idle["spec"]["nodeName"] == "gpu-1" and idle["status"]["phase"] == "Running"
    assert idle["spec"]["priority"] == 100 and idle["spec"]["priorityClassName"] == "low"
    assert pod_record(idle).requests(GPUS).gpus == 8 and pod_record(idle).requests(GPUS).cpu_m == 1000
    # scheduled at kube_pod_start_time when kube_pod_status_scheduled_time is absent
    assert pod_record(idle).scheduled == datetime.fromtimestamp(T0 + 30, tz=UTC)
    assert pod_record(pending).unschedulable
    assert pending["spec"]["priority"] == 1000  # as admission sets it from the class
    assert pending["metadata"]["creationTimestamp"] == "2026-05-28T21:26:40Z"
    [node] = state.nodes
    assert node["status"]["allocatable"][DEFAULT_GPU_RESOURCE] == "8"
    assert node["status"]["conditions"] == [{"type": "Ready", "status": "True"}]


def test_the_planner_plans_over_it() -> None:
    state = cluster_at(_basic().frame(), CLASSES, GPUS, Overlay(), _evidence(("uid-p", "gpu-1")))
    result = planner.plan(state, {ObjectKey("ml", "idle"): IDLE}, PlannerConfig(), NOW)
    [decision] = result.decisions
    assert decision.preemptor == ObjectKey("hi", "p") and decision.node == "gpu-1"
    assert [v.pod for v in decision.victims] == [ObjectKey("ml", "idle")]


def _victims(
    frame: c.Frame, overlay: Overlay | None = None, evidence: Evidence | None = None
) -> list[ObjectKey]:
    state = cluster_at(frame, CLASSES, GPUS, overlay or Overlay(), evidence or _evidence(("uid-p", "gpu-1")))
    result = planner.plan(state, {ObjectKey("ml", "idle"): IDLE}, PlannerConfig(), NOW)
    return [v.pod for d in result.decisions for v in d.victims]


def test_a_preemptor_uses_only_nodes_history_shows_it_or_its_owner_on() -> None:
    assert _victims(_basic().frame(), evidence=Evidence(strict=True)) == []  # strict, no evidence: no node
    loose = Evidence()
    assert _victims(_basic().frame(), evidence=loose) == [ObjectKey("ml", "idle")]  # no evidence: any node
    assert loose.unplaced == {ObjectKey("hi", "p")}  # and the report will name it
    assert _victims(_basic().frame(), evidence=_evidence(("uid-p", "gpu-2"))) == []
    owner = FrameBuilder().node("gpu-1").pod("ml", "idle", 8, node="gpu-1", created=T0)
    owner.pod("hi", "p", 8, cls="high", created=T0 + 3600, owner=("Job", "train"))
    sibling = Evidence()
    sibling.add(
        {
            "namespace": "hi",
            "pod": "p-0",
            "uid": "uid-p-0",
            "node": "gpu-1",
            "created_by_kind": "Job",
            "created_by_name": "train",
        }
    )
    assert _victims(owner.frame(), evidence=sibling) == [ObjectKey("ml", "idle")]


def test_a_tainted_node_is_untolerated() -> None:
    frame = _basic().add(c.NODE_TAINT, 1, node="gpu-1", key="gpu", value="a100", effect="NoSchedule").frame()
    assert _victims(frame) == []
    prefer = _basic().add(c.NODE_TAINT, 1, node="gpu-1", key="x", effect="PreferNoSchedule").frame()
    assert _victims(prefer) == [ObjectKey("ml", "idle")]


def test_a_cordoned_or_not_ready_node_takes_no_preemptor() -> None:
    assert _victims(_basic().add(c.NODE_UNSCHEDULABLE, 1, node="gpu-1").frame()) == []
    frame = FrameBuilder().node("gpu-1", ready=False).pod("ml", "idle", 8, node="gpu-1", created=T0)
    assert _victims(frame.pod("hi", "p", 8, cls="high", created=T0 + 3600).frame()) == []


def test_a_pdb_covers_its_whole_namespace() -> None:
    zero = _basic().add(c.PDB_ALLOWED, 0, namespace="ml", poddisruptionbudget="other-app").frame()
    assert _victims(zero) == []
    one = _basic().add(c.PDB_ALLOWED, 1, namespace="ml", poddisruptionbudget="other-app").frame()
    assert _victims(one) == [ObjectKey("ml", "idle")]
    # a simulated eviction whose victim history still shows running keeps consuming it
    assert _victims(one, Overlay(pdb_consumed={"ml": 1})) == []
    twice = _basic().add(c.PDB_ALLOWED, 1, namespace="ml", poddisruptionbudget="app", instance="ksm-0")
    twice.add(c.PDB_ALLOWED, 1, namespace="ml", poddisruptionbudget="app", instance="ksm-1")
    assert _victims(twice.frame()) == [ObjectKey("ml", "idle")]  # one PDB, scraped from two replicas
    two = _basic().add(c.PDB_ALLOWED, 1, namespace="ml", poddisruptionbudget="a")
    two.add(c.PDB_ALLOWED, 1, namespace="ml", poddisruptionbudget="b")
    assert _victims(two.frame()) == []  # two PDBs both cover every pod: the Eviction API would refuse
    elsewhere = _basic().add(c.PDB_ALLOWED, 0, namespace="web", poddisruptionbudget="web").frame()
    assert _victims(elsewhere) == [ObjectKey("ml", "idle")]


def test_the_opt_out_label_is_read_from_kube_pod_labels() -> None:
    frame = _basic().add(
        c.POD_LABELS, 1, namespace="ml", pod="idle", uid="uid-idle", **{c.OPT_OUT_LABEL: "true"}
    )
    assert c.OPT_OUT_LABEL == "label_gpu_steward_io_never_reclaim"
    state = c.objects_at(frame.frame(), CLASSES, GPUS, Overlay(), Evidence())
    assert _pods(state)[ObjectKey("ml", "idle")]["metadata"]["labels"] == {NEVER_RECLAIM_LABEL: "true"}
    assert _victims(frame.frame()) == []


def test_the_overlay_removes_victims_places_preemptors_and_writes_annotations() -> None:
    overlay = Overlay(
        gone=frozenset({"uid-idle"}),
        placed={"uid-p": ("gpu-1", T0 + 4000)},
        annotations={ObjectKey("hi", "p"): {"gpu-steward.io/reclaim-count": "1"}},
    )
    pods = _pods(c.objects_at(_basic().frame(), CLASSES, GPUS, overlay, Evidence()))
    assert set(pods) == {ObjectKey("hi", "p")}
    placed = pods[ObjectKey("hi", "p")]
    assert placed["spec"]["nodeName"] == "gpu-1" and placed["status"]["phase"] == "Running"
    assert pod_record(placed).scheduled == datetime.fromtimestamp(T0 + 4000, tz=UTC)
    assert placed["metadata"]["annotations"] == {"gpu-steward.io/reclaim-count": "1"}
    finished = FrameBuilder().node("gpu-1").pod("hi", "p", 8, node="gpu-2", cls="high", phase="Succeeded")
    [done] = c.objects_at(finished.frame(), CLASSES, GPUS, overlay, Evidence()).pods
    assert done["status"]["phase"] == "Succeeded"  # it ran elsewhere in history and ended: no longer placed


def test_a_pod_shown_twice_is_the_bound_one() -> None:
    # Without staleness markers the unbound kube_pod_info series stays in the lookback after binding.
    frame = (
        _basic()
        .add(c.POD_INFO, 1, namespace="hi", pod="p", uid="uid-p", node="gpu-1", priority_class="high")
        .frame()
    )
    state = c.objects_at(frame, CLASSES, GPUS, Overlay(), Evidence())
    [p] = [pod for pod in state.pods if ObjectKey.of(pod) == ObjectKey("hi", "p")]
    assert p["spec"]["nodeName"] == "gpu-1"
    assert pods_in_history(frame)["uid-p"].node == "gpu-1"  # bound: it holds its GPUs (outcomes read it)


def test_a_step_without_pods_or_nodes_has_no_data() -> None:
    assert has_data(_basic().frame())
    assert not has_data(FrameBuilder().node("gpu-1").frame())
    assert not has_data(FrameBuilder().pod("ml", "x", 1).frame())


def test_quantities_as_kubernetes_writes_them() -> None:
    frame = (
        FrameBuilder()
        .node("n")
        .add(c.POD_INFO, 1, namespace="a", pod="b", uid="u", node="n")
        .add(c.POD_REQUESTS, 0.25, namespace="a", pod="b", container="x", resource="cpu", unit="core")
        .add(
            c.POD_REQUESTS,
            8589934592.0,
            namespace="a",
            pod="b",
            container="x",
            resource="memory",
            unit="byte",
        )
    )
    [pod] = c.objects_at(frame.frame(), CLASSES, GPUS, Overlay(), Evidence()).pods
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "0.25", "memory": "8589934592"}
    assert c.sanitized("nvidia.com/gpu") == "nvidia_com_gpu"


def test_unreadable_samples_fail_safe() -> None:
    nan, inf = float("nan"), float("inf")
    frame = FrameBuilder().node("gpu-1").pod("ml", "idle", 8, node="gpu-1", created=nan, started=inf)
    frame.pod("hi", "p", 8, cls="high", created=T0 + 3600)
    frame.add(c.POD_DELETION, nan, namespace="ml", pod="other", uid="uid-other")
    state = c.objects_at(frame.frame(), CLASSES, GPUS, Overlay(), Evidence())
    idle = _pods(state)[ObjectKey("ml", "idle")]
    assert "creationTimestamp" not in idle["metadata"]
    assert pod_record(idle).scheduled is None  # an unreadable start time: not yet scheduled (protected)
    assert pods_in_history(frame.frame())["uid-idle"].start_time is None
    assert _victims(frame.frame()) == []
    deleting = FrameBuilder().node("gpu-1").pod("ml", "idle", 8, node="gpu-1", created=T0)
    deleting.add(c.POD_DELETION, nan, namespace="ml", pod="idle", uid="uid-idle")
    deleting.pod("hi", "p", 8, cls="high", created=T0 + 3600)
    assert (
        _pods(c.objects_at(deleting.frame(), CLASSES, GPUS, Overlay(), Evidence()))[ObjectKey("ml", "idle")][
            "metadata"
        ]["deletionTimestamp"]
        == "1970-01-01T00:00:00Z"
    )  # still being deleted: never a victim
    assert _victims(deleting.frame()) == []
    broken = (
        FrameBuilder()
        .node("gpu-1", gpus=0)
        .add(c.NODE_ALLOCATABLE, nan, node="gpu-1", resource="nvidia_com_gpu", unit="integer")
    )
    broken.pod("ml", "idle", 8, node="gpu-1", created=T0).pod("hi", "p", 8, cls="high", created=T0 + 3600)
    assert _victims(broken.frame()) == []  # the node's allocatable unreadable: nothing planned on it
