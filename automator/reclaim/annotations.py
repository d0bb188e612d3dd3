"""The reclaim annotations on pods (steward_common/conventions.py): their one reader and their one writer.
On a served preemptor, used by the planner (cooldown, gave-up, the GPUs kept for it on its node), the service
(what it remembers having written, the GPUs held by reclaim) and the backtest; on a victim, the notice the
service gave (reclaim-notice, reclaim-notice-for) and its owner's objection (reclaim-defer-until). Pure.

One parser per field: last-reclaim-time, reclaim-notice and reclaim-defer-until are RFC 3339 times with a
zone (a time without one is malformed), reclaim-count a whole number of ASCII digits, 0 or more (`1_0` is
malformed), reclaim-victims comma-separated namespace/name keys (an item that is not one is skipped),
reclaim-node a node name, reclaim-notice-for `namespace/name` of a preemptor or gang (NOTICE_FOR).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from automator.objects.keys import ObjectKey
from automator.objects.pod import Pod
from automator.objects.resources import FieldError, FieldProblem, parse_time, rfc3339
from automator.reclaim.model import Decision
from steward_common.conventions import (
    DEFER_UNTIL_ANNOTATION,
    LAST_RECLAIM_ANNOTATION,
    RECLAIM_COUNT_ANNOTATION,
    RECLAIM_NODE_ANNOTATION,
    RECLAIM_NOTICE_ANNOTATION,
    RECLAIM_NOTICE_FOR_ANNOTATION,
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
    return _time(annotations, LAST_RECLAIM_ANNOTATION)


def _time(annotations: Mapping[str, Any], key: str) -> datetime | FieldProblem | None:
    """An RFC 3339 time with a zone; None when the annotation is absent."""
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        return parse_time(raw, key)
    except FieldError:
        return FieldProblem(key, f"{_quoted(raw)} is not an RFC 3339 time")


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


# --- notice (on victims) ---------------------------------------------------------------------------------

# What reclaim-notice-for holds: a preemptor's namespace/name, or a gang's name (namespace/ then its key's
# name, a Workload's with /podGroup[/replicaKey]). deploy/automator/admission-policy.yaml checks the same
# form.
NOTICE_FOR: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[-A-Za-z0-9._/]{1,512}")


@dataclass(frozen=True, slots=True)
class NoticeMarks:
    """A victim's notice as the service wrote it; a malformed value is its FieldProblem."""

    deadline: datetime | FieldProblem | None  # None: not annotated
    target: str | FieldProblem | None  # the preemptor or gang noticed for; None: not annotated

    @property
    def present(self) -> bool:
        return self.deadline is not None or self.target is not None

    @property
    def problem(self) -> FieldProblem | None:
        """Why the notice cannot be read (one of the two missing counts as malformed too)."""
        for value in (self.deadline, self.target):
            if isinstance(value, FieldProblem):
                return value
        if self.deadline is None:
            return FieldProblem(RECLAIM_NOTICE_ANNOTATION, "missing beside " + RECLAIM_NOTICE_FOR_ANNOTATION)
        if self.target is None:
            return FieldProblem(RECLAIM_NOTICE_FOR_ANNOTATION, "missing beside " + RECLAIM_NOTICE_ANNOTATION)
        return None

    def deadline_for(self, target: str) -> datetime | None:
        """The deadline of a readable notice for this preemptor (or gang), else None."""
        if isinstance(self.deadline, datetime) and self.target == target:
            return self.deadline
        return None


NO_NOTICE = NoticeMarks(None, None)


def read_notice(annotations: Mapping[str, Any]) -> NoticeMarks:
    if RECLAIM_NOTICE_ANNOTATION not in annotations and RECLAIM_NOTICE_FOR_ANNOTATION not in annotations:
        return NO_NOTICE
    raw = annotations.get(RECLAIM_NOTICE_FOR_ANNOTATION)
    target: str | FieldProblem | None = None
    if raw is not None:
        ok = isinstance(raw, str) and NOTICE_FOR.fullmatch(raw) is not None
        target = (
            raw
            if ok
            else FieldProblem(RECLAIM_NOTICE_FOR_ANNOTATION, f"{_quoted(raw)} is not namespace/name")
        )
    return NoticeMarks(_time(annotations, RECLAIM_NOTICE_ANNOTATION), target)


def notice_annotations(deadline: datetime, target: str) -> dict[str, str | None]:
    """The notice written on a victim: the time after which it may go, and for whom."""
    return {RECLAIM_NOTICE_ANNOTATION: rfc3339(deadline), RECLAIM_NOTICE_FOR_ANNOTATION: target}


# A merge patch removing the notice (a null deletes a key; removing a missing key changes nothing).
WITHDRAWN: Final[Mapping[str, str | None]] = {
    RECLAIM_NOTICE_ANNOTATION: None,
    RECLAIM_NOTICE_FOR_ANNOTATION: None,
}


def defer_until(annotations: Mapping[str, Any]) -> datetime | FieldProblem | None:
    """The owner's reclaim-defer-until (None when absent)."""
    return _time(annotations, DEFER_UNTIL_ANNOTATION)
