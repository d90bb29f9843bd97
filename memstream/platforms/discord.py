"""Discord gateway dispatches -> turns.

Takes ``{"op": 0, "t": "MESSAGE_CREATE" | "MESSAGE_UPDATE" | "MESSAGE_DELETE" | "MESSAGE_DELETE_BULK",
"d": {...}}`` and bare message objects (as the REST API returns them; taken as MESSAGE_CREATE).
Tenant: ``guild_id`` (a DM has none: pass ``tenant_id``). Conversation: ``channel_id`` (a thread is
a channel, so its own conversation). Turn id: the message snowflake. Session: the UTC day. Deletions
carry no time: they cover up to the caller's ``now``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .base import Emitted, MapContext, Skip
from .fields import EventError, from_iso, obj, opt_str, req, req_id, req_obj, req_str, safe_id
from .items import build_turn, day_session, edited, removal

NEEDS_TENANT = False
NEEDS_CONVERSATION = False

# Message types that are someone writing: DEFAULT, REPLY, CHAT_INPUT_COMMAND, CONTEXT_MENU_COMMAND.
_TEXT_TYPES = (0, 19, 20, 23)
_MAX_FILES = 10


def map_event(index: int, event: Any, ctx: MapContext) -> Emitted | Skip:
    data = obj(event, "event")
    if "op" not in data:
        if "id" in data and "channel_id" in data:
            return _create(data, "message", ctx)
        raise EventError("event: neither a gateway dispatch ({op, t, d}) nor a message object")
    op = data["op"]
    if op != 0:
        return Skip(f"discord:op{op}" if isinstance(op, int) else "discord:op")
    kind = req_str(data, "t", "event")
    if kind not in ("MESSAGE_CREATE", "MESSAGE_UPDATE", "MESSAGE_DELETE", "MESSAGE_DELETE_BULK"):
        return Skip(f"discord:{kind}")
    d = req_obj(data, "d", "event")
    if kind == "MESSAGE_CREATE":
        return _create(d, "d", ctx)
    if kind == "MESSAGE_UPDATE":
        return _update(d, ctx)
    ids = [req_id(d, "id", "d")] if kind == "MESSAGE_DELETE" else _bulk_ids(d)
    turn_ids = [safe_id(i, prefix="m", where="d.id") for i in ids]
    return (removal(_tenant(d, ctx), _conversation(d, ctx), turn_ids, ctx.now, "deleted"),)


def tenant_hint(event: Any) -> str | None:
    if not isinstance(event, dict):
        return None
    d = event.get("d") if "op" in event else event
    guild = d.get("guild_id") if isinstance(d, dict) else None
    return guild if isinstance(guild, str) else None


def _create(d: dict[str, Any], where: str, ctx: MapContext) -> Emitted | Skip:
    kind = d.get("type", 0)
    if kind not in _TEXT_TYPES:
        return Skip(f"discord:MESSAGE_CREATE:type{kind}")
    fields, turn_id, time, text = _read(d, where, ctx)
    if text is None:
        return Skip("discord:MESSAGE_CREATE:no_text")
    return (build_turn(**fields, turn_id=turn_id, text=text, event_time=time),)


def _update(d: dict[str, Any], ctx: MapContext) -> Emitted | Skip:
    if "content" not in d:
        return Skip("discord:MESSAGE_UPDATE:no_content")  # embeds resolved, pins: no new text
    if d.get("edited_timestamp") is None:
        return Skip("discord:MESSAGE_UPDATE:not_edited")
    edit_time = from_iso(d["edited_timestamp"], "d.edited_timestamp")
    fields, turn_id, time, text = _read(d, "d", ctx)
    return edited(base_id=turn_id, original_time=time, edit_time=edit_time, text=text, fields=fields)


def _read(d: dict[str, Any], where: str, ctx: MapContext) -> tuple[dict[str, Any], str, datetime, str | None]:
    """The turn fields, id, time and text (None: no text, but attachments) of a message object."""
    message_id = req_id(d, "id", where)
    time = from_iso(req(d, "timestamp", where), f"{where}.timestamp")
    author = req_obj(d, "author", where)
    author_id = req_id(author, "id", f"{where}.author")
    name = ctx.names.get(author_id) or opt_str(author, "global_name", f"{where}.author")
    speaker = name or req_str(author, "username", f"{where}.author")
    bot = author.get("bot") is True or d.get("webhook_id") is not None
    content = opt_str(d, "content", where)
    if content is None:
        raise EventError(f"{where}.content: missing")
    files = _file_names(d)
    text: str | None = content
    if not content.strip():
        if not (files or d.get("embeds") or d.get("sticker_items")):
            raise EventError(f"{where}.content: empty (is the MESSAGE_CONTENT intent enabled?)")
        text = None
    metadata: dict[str, Any] = {"platform": "discord", "message_id": message_id, "channel_id": d.get("channel_id")}
    guild = opt_str(d, "guild_id", where)
    if guild is not None:
        metadata["guild_id"] = guild
    reference = d.get("message_reference")
    if isinstance(reference, dict) and isinstance(reference.get("message_id"), str):
        metadata["reply_to"] = reference["message_id"]
    if bot:
        metadata["bot"] = True
    if files:
        metadata["files"] = files
    fields = {
        "tenant_id": _tenant(d, ctx, where),
        "conversation_id": _conversation(d, ctx, where),
        "session_id": ctx.session_id or day_session(time),
        "speaker": speaker,
        "role": "assistant" if bot else "user",
        "metadata": metadata,
    }
    return fields, safe_id(message_id, prefix="m", where=f"{where}.id"), time, text


def _tenant(d: dict[str, Any], ctx: MapContext, where: str = "d") -> str:
    if ctx.tenant_id is not None:
        return ctx.tenant_id
    guild = opt_str(d, "guild_id", where)
    if guild is None:
        raise EventError(f"{where}.guild_id: missing (a direct message): pass tenant_id for DMs")
    return safe_id(guild, prefix="g", where=f"{where}.guild_id")


def _conversation(d: dict[str, Any], ctx: MapContext, where: str = "d") -> str:
    if ctx.conversation_id is not None:
        return ctx.conversation_id
    return safe_id(req_id(d, "channel_id", where), prefix="c", where=f"{where}.channel_id")


def _bulk_ids(d: dict[str, Any]) -> list[str]:
    ids = req(d, "ids", "d")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        raise EventError("d.ids: expected a non-empty list of message ids")
    return ids


def _file_names(d: dict[str, Any]) -> list[str]:
    attachments = d.get("attachments")
    if not isinstance(attachments, list):
        return []
    names = [a.get("filename") for a in attachments if isinstance(a, dict)]
    return [n for n in names if isinstance(n, str) and n][:_MAX_FILES]
