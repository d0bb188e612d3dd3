"""One step's kube-state-metrics samples (a Frame), written the way kube-state-metrics labels them."""

from __future__ import annotations

from dataclasses import dataclass, field

from automator.backtest import cluster as c


@dataclass
class FrameBuilder:
    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    def add(self, metric: str, sample: float, /, **labels: str) -> FrameBuilder:
        self.samples.setdefault(metric, []).append((labels, sample))
        return self

    def node(self, name: str, gpus: int = 8, ready: bool = True, **extra: str) -> FrameBuilder:
        for resource, unit, value in (
            ("nvidia_com_gpu", "integer", gpus),
            ("cpu", "core", 64),
            ("memory", "byte", 2**39),
        ):
            self.add(c.NODE_ALLOCATABLE, value, node=name, resource=resource, unit=unit)
        self.add(c.NODE_CONDITION, 1, node=name, condition="Ready", status="true" if ready else "false")
        return self

    def pod(
        self,
        ns: str,
        name: str,
        gpus: int,
        node: str = "",
        cls: str = "low",
        phase: str | None = None,
        created: float = 0.0,
        started: float | None = None,
        owner: tuple[str, str] = ("<none>", "<none>"),
        unschedulable: bool | None = None,
    ) -> FrameBuilder:
        ident = {"namespace": ns, "pod": name, "uid": f"uid-{name}"}
        self.add(
            c.POD_INFO,
            1,
            **ident,
            node=node,
            priority_class=cls,
            created_by_kind=owner[0],
            created_by_name=owner[1],
        )
        self.add(c.POD_PHASE, 1, **ident, phase=phase or ("Running" if node else "Pending"))
        self.add(c.POD_CREATED, created, **ident)
        if node:
            self.add(c.POD_START, created if started is None else started, **ident)
        elif unschedulable is not False:
            self.add(c.POD_UNSCHEDULABLE, 1, **ident)
        for metric in (c.POD_REQUESTS, c.POD_LIMITS):
            self.add(metric, gpus, **ident, container="main", resource="nvidia_com_gpu", unit="integer")
            self.add(metric, 1, **ident, container="main", resource="cpu", unit="core")
        return self

    def frame(self) -> c.Frame:
        return self.samples
