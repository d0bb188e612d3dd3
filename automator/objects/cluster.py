"""One listing of the cluster: the records of the kinds the planner reads. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from automator.objects.gang import GroupObject, group_objects
from automator.objects.keys import JsonObj
from automator.objects.kueue import NO_KUEUE, KueueObjects, kueue_objects, kueue_record
from automator.objects.node import Node, node_records
from automator.objects.pdb import PodDisruptionBudget, pdb_records
from automator.objects.pod import Pod, pod_records
from automator.objects.priority_class import PriorityClass, priority_class_records


@dataclass(frozen=True)
class ClusterState:
    """One listing of the cluster, as records: each object was decoded once, by the adapter that listed it,
    so every reader of a pass reads records."""

    nodes: list[Node]
    pods: list[Pod]
    priority_classes: list[PriorityClass]
    pdbs: list[PodDisruptionBudget]
    # PodGroups and Workloads: how many members each gang needs (objects/gang.py)
    groups: list[GroupObject] = field(default_factory=list)
    # Kueue's Workloads, ClusterQueues and LocalQueues and the batch Jobs (read only with --kueue on)
    kueue: KueueObjects = NO_KUEUE

    @classmethod
    def from_objects(
        cls,
        nodes: Iterable[Node | JsonObj],
        pods: Iterable[Pod | JsonObj],
        priority_classes: Iterable[PriorityClass | JsonObj],
        pdbs: Iterable[PodDisruptionBudget | JsonObj],
        groups: Iterable[GroupObject | JsonObj] = (),
        kueue: Iterable[JsonObj] = (),
    ) -> ClusterState:
        """The listing of objects as read (or records), each decoded into its record. kueue: Kueue's
        objects and batch Jobs (given any, the listing has Kueue)."""
        kueue = list(kueue)
        return cls(
            node_records(nodes),
            pod_records(pods),
            priority_class_records(priority_classes),
            pdb_records(pdbs),
            group_objects(groups),
            kueue_objects((r for r in map(kueue_record, kueue) if r is not None), served=bool(kueue))
            if kueue
            else NO_KUEUE,
        )
