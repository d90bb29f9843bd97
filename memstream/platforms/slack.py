"""Slack Events API payloads -> turns.

Takes ``event_callback`` envelopes (also inside a Socket Mode ``events_api`` wrapper) and bare
``message`` events (``conversations.history``; those need ``tenant_id``, and ``conversation_id``
when they name no channel). Tenant: the envelope's ``team_id``, else the event's ``team``.
Conversation: the channel. Turn id: the message ``ts`` (unique within a channel). Session: a thread
reply's ``thread-<thread_ts>``, otherwise the message's UTC day (a thread's parent stays in its day:
it arrives before it has replies). ``app_mention`` events are skipped: the channel's ``message``
event carries the same text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .base import Emitted, MapContext, Skip
from .fields import EventError, obj, opt_str, req_obj, req_str, safe_id
from .items import EPOCH, build_turn, day_session, edited, removal

NEEDS_TENANT = False
NEEDS_CONVERSATION = False

_TS = re.compile(r"^(\d{1,12})(?:\.(\d{1,6}))?$")
# Message subtypes that are someone saying something (thread_broadcast: a reply also shown in the channel).
_SAID = (None, "thread_broadcast", "me_message", "bot_message", "file_share")
_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
_MAX_FILES = 10


def map_event(index: int, event: Any, ctx: MapContext) -> Emitted | Skip:
    unwrapped = _unwrap(event)
    if isinstance(unwrapped, Skip):
        return unwrapped
    envelope, ev = unwrapped
    kind = req_str(ev, "type", "event")
    if kind != "message":
        return Skip(f"slack:{kind}")
    subtype = opt_str(ev, "subtype", "event")
    if subtype not in _SAID and subtype not in ("message_changed", "message_deleted"):
        return Skip(f"slack:{subtype}")
    tenant = ctx.tenant_id or _team(envelope, ev)
    if tenant is None:
        raise EventError("tenant: the envelope has no team_id and event.team is missing; pass tenant_id")
    tenant = safe_id(tenant, prefix="T", where="team_id")
    channel = opt_str(ev, "channel", "event")
    if ctx.conversation_id is not None:
        conversation = ctx.conversation_id
    elif channel is None:
        raise EventError("event.channel: missing (pass conversation_id for messages without a channel)")
    else:
        conversation = safe_id(channel, prefix="C", where="event.channel")
    if subtype == "message_deleted":
        return _deleted(ev, ctx, tenant, conversation, req_str(ev, "deleted_ts", "event"), "event.deleted_ts")
    if subtype == "message_changed":
        return _changed(ev, ctx, tenant, conversation, channel)
    said = _read(ev, "event", ctx, tenant, conversation, channel)
    if not said.text.strip():
        if said.files or subtype in ("bot_message", "file_share"):
            return Skip(f"slack:{subtype or 'message'}:no_text")
        raise EventError("event.text: empty")
    return (build_turn(**said.fields, turn_id=said.turn_id, text=said.text, event_time=said.time),)


def tenant_hint(event: Any) -> str | None:
    unwrapped = _unwrap(event)
    return None if isinstance(unwrapped, Skip) else _team(*unwrapped)


def _unwrap(event: Any) -> tuple[dict[str, Any] | None, dict[str, Any]] | Skip:
    """(envelope or None, event) or a Skip for envelopes that carry no event (url_verification:
    the gateway answers those)."""
    data = obj(event, "event")
    if data.get("type") == "events_api" and isinstance(data.get("payload"), dict):
        data = data["payload"]
    kind = req_str(data, "type", "envelope")
    if kind == "event_callback":
        return data, req_obj(data, "event", "envelope")
    if kind == "message":
        return None, data
    return Skip(f"slack:{kind}")


def _team(envelope: dict[str, Any] | None, ev: dict[str, Any]) -> str | None:
    for value in ((envelope or {}).get("team_id"), ev.get("team"), ev.get("team_id")):
        if isinstance(value, str) and value:
            return value
    return None


@dataclass(frozen=True)
class _Said:
    """One message as read: everything but the decision of what to emit."""

    fields: dict[str, Any]
    turn_id: str
    time: datetime
    text: str
    files: list[str]


def _read(
    msg: dict[str, Any], where: str, ctx: MapContext, tenant: str, conversation: str, channel: str | None
) -> _Said:
    ts = req_str(msg, "ts", where)
    time = _time(ts, f"{where}.ts")
    subtype = opt_str(msg, "subtype", where)
    user = opt_str(msg, "user", where)
    bot_id = opt_str(msg, "bot_id", where)
    bot = subtype == "bot_message" or bot_id is not None
    if bot:
        speaker = _bot_name(msg, user or bot_id, ctx)
    else:
        speaker = _user_name(msg, req_str(msg, "user", where), ctx)
    thread_ts = opt_str(msg, "thread_ts", where)
    reply = thread_ts is not None and thread_ts != ts
    if thread_ts is not None:
        _time(thread_ts, f"{where}.thread_ts")
    files = _file_names(msg)
    metadata: dict[str, Any] = {"platform": "slack", "ts": ts}
    if channel is not None:
        metadata["channel"] = channel
    if reply:
        metadata["thread_ts"] = thread_ts
    if subtype is not None:
        metadata["subtype"] = subtype
    if bot:
        metadata["bot"] = True
    if files:
        metadata["files"] = files
    fields = {
        "tenant_id": tenant,
        "conversation_id": conversation,
        "session_id": ctx.session_id or (f"thread-{thread_ts}" if reply else day_session(time)),
        "speaker": speaker,
        "role": "assistant" if bot else "user",
        "metadata": metadata,
    }
    text = _MENTION.sub(
        lambda m: f"@{ctx.names[m[1]]}" if m[1] in ctx.names else m[0], opt_str(msg, "text", where) or ""
    )
    return _Said(fields, safe_id(ts, prefix="ts", where=f"{where}.ts"), time, text, files)


def _changed(
    ev: dict[str, Any], ctx: MapContext, tenant: str, conversation: str, channel: str | None
) -> Emitted | Skip:
    new = req_obj(ev, "message", "event")
    if new.get("subtype") == "tombstone":
        # A thread's parent deleted while it has replies: Slack keeps a placeholder, the text is gone.
        return _deleted(ev, ctx, tenant, conversation, req_str(new, "ts", "event.message"), "event.message.ts")
    edit = new.get("edited")
    if not isinstance(edit, dict):
        # Unfurled links, reply counts, language detection: Slack changed the message, its author did not.
        return Skip("slack:message_changed:not_edited")
    edit_time = _time(req_str(edit, "ts", "event.message.edited"), "event.message.edited.ts")
    said = _read(new, "event.message", ctx, tenant, conversation, channel)
    text: str | None = said.text
    if not said.text.strip():
        if not said.files:
            raise EventError("event.message.text: empty")
        text = None
    return edited(base_id=said.turn_id, original_time=said.time, edit_time=edit_time, text=text, fields=said.fields)


def _deleted(
    ev: dict[str, Any], ctx: MapContext, tenant: str, conversation: str, deleted_ts: str, where: str
) -> Emitted:
    _time(deleted_ts, where)
    # The deletion event's own ts is when it happened; every version up to then goes.
    when = opt_str(ev, "event_ts", "event") or opt_str(ev, "ts", "event")
    before = _time(when, "event.ts") if when is not None else ctx.now
    turn_id = safe_id(deleted_ts, prefix="ts", where=where)
    return (removal(tenant, conversation, (turn_id,), before, "deleted"),)


def _time(ts: str, where: str) -> datetime:
    """A Slack ts (``1717412400.000100``: unix seconds and microseconds), exactly (no float)."""
    match = _TS.match(ts)
    if match is None:
        raise EventError(f"{where}: not a Slack timestamp ({ts!r})")
    try:
        return EPOCH + timedelta(seconds=int(match[1]), microseconds=int((match[2] or "").ljust(6, "0")))
    except OverflowError as exc:
        raise EventError(f"{where}: timestamp out of range ({ts!r})") from exc


def _user_name(msg: dict[str, Any], user: str, ctx: MapContext) -> str:
    if user in ctx.names:
        return ctx.names[user]
    profile = msg.get("user_profile")
    if isinstance(profile, dict):
        for key in ("display_name", "real_name", "name"):
            value = profile.get(key)
            if isinstance(value, str) and value.strip():
                return value
    return user


def _bot_name(msg: dict[str, Any], bot: str | None, ctx: MapContext) -> str:
    if bot is not None and bot in ctx.names:
        return ctx.names[bot]
    profile = msg.get("bot_profile")
    for value in (msg.get("username"), profile.get("name") if isinstance(profile, dict) else None, bot):
        if isinstance(value, str) and value.strip():
            return value
    raise EventError("event.bot_id: missing (a bot message with no bot_id, user or username)")


def _file_names(msg: dict[str, Any]) -> list[str]:
    files = msg.get("files")
    if not isinstance(files, list):
        return []
    names = [f.get("name") or f.get("title") for f in files if isinstance(f, dict)]
    return [n for n in names if isinstance(n, str) and n][:_MAX_FILES]
