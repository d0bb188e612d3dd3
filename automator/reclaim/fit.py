"""Whether a pod may run on a node, apart from free capacity: cordon, readiness, nodeSelector, required
node affinity and NoSchedule/NoExecute taints. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from automator.objects.node import Node
from automator.objects.pod import Pod
from automator.objects.selectors import requirement_matches

# Reasons a node is ruled out, used to summarise unresolved preemptors.
CORDONED = "cordoned"
NOT_READY = "not Ready"
SELECTOR = "nodeSelector/affinity mismatch"
TAINT = "untolerated taint"


def _term_matches(term: Mapping[str, Any], node_labels: Mapping[str, Any], name: str) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no node
    for expr in expressions:
        key = expr.get("key")
        if not requirement_matches(
            expr.get("operator"), key in node_labels, node_labels.get(key), expr.get("values") or []
        ):
            return False
    for expr in fields:
        if expr.get("key") != "metadata.name":
            return False
        if not requirement_matches(expr.get("operator"), True, name, expr.get("values") or []):
            return False
    return True


def affinity_matches(pod: Pod, node: Node) -> bool:
    return _selected(pod.node_selector, pod.required_affinity, node)


def _selected(selector: tuple[tuple[Any, Any], ...], required: Any, node: Node) -> bool:
    """affinity_matches with the pod's nodeSelector items and required node affinity read."""
    node_labels = node.labels
    for key, value in selector:
        if node_labels.get(key) != value:
            return False
    if required is None:
        return True
    name = node.name
    # Terms are ORed, the expressions of a term ANDed.
    return any(_term_matches(term, node_labels, name) for term in required.get("nodeSelectorTerms") or [])


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not key or key == taint.get("key")
    if key != taint.get("key"):
        return False
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod: Pod, node: Node) -> dict[str, Any] | None:
    return _first_untolerated(pod.tolerations or [], node.taints or [])


def _first_untolerated(tolerations: Any, taints: Any) -> dict[str, Any] | None:
    """The first NoSchedule or NoExecute taint of the list not tolerated, or None."""
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue  # PreferNoSchedule is a preference only
        if not any(_tolerates(t, taint) for t in tolerations):
            return dict(taint)
    return None


def static_misfit(pod: Pod, node: Node) -> tuple[str, str] | None:
    """(category, detail) why the pod can never run on the node whatever is evicted, or None."""
    if node.unschedulable:
        return CORDONED, "node is cordoned (spec.unschedulable)"
    if node.not_ready:
        return NOT_READY, "node is not Ready"
    # a pod with no nodeSelector and no required node affinity is selected by every node
    selector, required = pod.node_selector, pod.required_affinity
    if (selector or required is not None) and not _selected(selector, required, node):
        return SELECTOR, "nodeSelector or required node affinity does not match"
    taints = node.taints
    if not taints:
        return None
    taint = _first_untolerated(pod.tolerations or [], taints)
    if taint is not None:
        value = f"={taint.get('value')}" if taint.get("value") else ""
        return TAINT, f"taint {taint.get('key')}{value}:{taint.get('effect')} not tolerated"
    return None


def scheduling_signature(pod: Pod) -> str:
    """Pods with equal signatures fit the same nodes statically (used to cache static_misfit per pass)."""
    return repr((sorted(pod.node_selector), pod.required_affinity, pod.tolerations))
