"""Building what a mapper emits: validated turns, removals, and an edit (forget the earlier versions,
then the new one as its own turn)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Literal, Mapping

from pydantic import ValidationError

from memstream.schemas import Turn
from memstream.schemas.base import utc, versioned_turn_id

from .base import Emitted, TurnRemoval
from .fields import VALID_ID, EventError

ONE_MS = timedelta(milliseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def version_of(time: datetime) -> str:
    """An edit's version marker: its time as integer unix milliseconds."""
    return str((time - EPOCH) // ONE_MS)


def day_session(time: datetime) -> str:
    """The session of a platform without sessions: the message's UTC day, ``YYYY-MM-DD``."""
    return time.astimezone(timezone.utc).strftime("%Y-%m-%d")


def build_turn(**fields: Any) -> Turn:
    """A validated ``Turn``; a field the schema refuses makes the event malformed."""
    try:
        return Turn(**fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'turn'}: {e['msg']}" for e in exc.errors())
        raise EventError(f"invalid turn: {problems}") from exc


def removal(
    tenant_id: str,
    conversation_id: str,
    turn_ids: Iterable[str],
    before: datetime,
    reason: Literal["edited", "deleted"],
) -> TurnRemoval:
    ids = tuple(turn_ids)
    for value in (tenant_id, conversation_id, *ids):
        if not VALID_ID.match(value):
            raise EventError(f"invalid id {value!r} in a removal")
    if not ids:
        raise EventError("a deletion names no message")
    return TurnRemoval(tenant_id, conversation_id, ids, utc(before), reason)


def edited(
    *,
    base_id: str,
    original_time: datetime,
    edit_time: datetime,
    text: str | None,
    fields: Mapping[str, Any],
) -> Emitted:
    """An edit: forget the earlier versions, then the new version as its own turn.

    The new version is timed at the edit, at least 1 ms after the original (platforms that time in
    seconds can edit within the same second), and the forget covers up to 1 ms before it: so it
    reaches the original and every earlier version but never the new one. ``text`` None: the edit
    removed the text (media remain), so only the forget is emitted. ``fields`` are the other
    ``Turn`` fields (tenant, conversation, session, speaker, role, metadata).
    """
    when = max(edit_time, original_time + ONE_MS)
    forget = removal(fields["tenant_id"], fields["conversation_id"], (base_id,), when - ONE_MS, "edited")
    if text is None:
        return (forget,)
    metadata = {**fields.get("metadata", {}), "edited": True, "original_time": original_time.isoformat()}
    new = build_turn(
        **{**fields, "metadata": metadata},
        turn_id=versioned_turn_id(base_id, version_of(when)),
        text=text,
        event_time=when,
    )
    return (forget, new)
