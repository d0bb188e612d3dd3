"""The reclaim annotations a served preemptor carries (steward_common/conventions.py): their one reader and
their one writer, used by the planner (cooldown, gave-up, the GPUs kept for it on its node), the service
(what it remembers having written, the GPUs held by reclaim) and the backtest. Pure.

One parser per field: last-reclaim-time is an RFC 3339 time with a zone (a time without one is malformed),
reclaim-count a whole number of ASCII digits, 0 or more (`1_0` is malformed), reclaim-victims
comma-separated namespace/name keys (an item that is not one is skipped), reclaim-node a node name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.objects.resources import FieldError, FieldProblem, parse_time, rfc3339
from automator.reclaim.model import Decision
from steward_common.conventions import (
    LAST_RECLAIM_ANNOTATION,
    RECLAIM_COUNT_ANNOTATION,
    RECLAIM_NODE_ANNOTATION,
    RECLAIM_VICTIMS_ANNOTATION,
)
from steward_common.settingspec import shown, whole_number


@dataclass(frozen=True, slots=True)
class ReclaimMarks:
    """The reclaim annotations of one pod, each read once; a malformed value is its FieldProblem."""

    last: datetime | FieldProblem | None  # None: not annotated
    last_text: str  # the time as written, quoted in the planner's reasons
    node: str  # "" when not annotated
    victims: tuple[ObjectKey, ...]
    count: int | FieldProblem | None  # None: not annotated


def read_marks(annotations: Mapping[str, Any]) -> ReclaimMarks:
    return ReclaimMarks(
        last_reclaim(annotations),
        str(annotations.get(LAST_RECLAIM_ANNOTATION, "")),
        reclaim_node(annotations),
        reclaim_victims(annotations),
        reclaim_count(annotations),
    )


def last_reclaim(annotations: Mapping[str, Any]) -> datetime | FieldProblem | None:
    raw = annotations.get(LAST_RECLAIM_ANNOTATION)
    if raw is None:
        return None
    try:
        return parse_time(raw, LAST_RECLAIM_ANNOTATION)
    except FieldError:
        return FieldProblem(LAST_RECLAIM_ANNOTATION, f"{_quoted(raw)} is not an RFC 3339 time")


def reclaim_node(annotations: Mapping[str, Any]) -> str:
    return str(annotations.get(RECLAIM_NODE_ANNOTATION, ""))


def reclaim_victims(annotations: Mapping[str, Any]) -> tuple[ObjectKey, ...]:
    keys: list[ObjectKey] = []
    for part in str(annotations.get(RECLAIM_VICTIMS_ANNOTATION) or "").split(","):
        try:
            keys.append(ObjectKey.parse(part.strip()))
        except ValueError:
            continue
    return tuple(keys)


def reclaim_count(annotations: Mapping[str, Any]) -> int | FieldProblem | None:
    raw = annotations.get(RECLAIM_COUNT_ANNOTATION)
    if raw is None:
        return None
    try:
        count = whole_number(str(raw))
    except ValueError:
        count = -1
    return count if count >= 0 else FieldProblem(RECLAIM_COUNT_ANNOTATION, f"{_quoted(raw)} is not a count")


def _quoted(raw: Any) -> str:
    """The value as given, quoted (a long text cut short: a reason never echoes a whole file)."""
    return shown(raw) if isinstance(raw, str) else repr(raw)


def reclaim_annotations(preemptor: Pod | None, d: Decision, now: datetime) -> dict[str, str]:
    """The four annotations written on a preemptor once victims were evicted for it; the count goes on from
    the one it carries (a malformed one starts again)."""
    previous = reclaim_count(preemptor.annotations) if preemptor is not None else None
    return {
        LAST_RECLAIM_ANNOTATION: rfc3339(now),
        RECLAIM_NODE_ANNOTATION: d.node,
        RECLAIM_VICTIMS_ANNOTATION: ",".join(str(v.pod) for v in d.victims),
        RECLAIM_COUNT_ANNOTATION: str((previous if isinstance(previous, int) else 0) + 1),
    }
