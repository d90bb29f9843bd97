"""Telegram Bot API ``Update`` objects -> turns.

Takes updates (``getUpdates``' ``result`` or webhook bodies) with ``message``, ``channel_post``,
``business_message``, their ``edited_*`` forms and ``deleted_business_messages``; a bare ``Message``
is taken as a ``message``. Telegram has no workspace: pass ``tenant_id``. Conversation: the chat id,
prefixed ``chat`` when it is negative (groups: ``-100123`` -> ``chat-100123``; private chats keep
their positive id). Turn id: ``message_id`` (unique within a chat). Session: the UTC day of ``date``.
A forum topic (``message_thread_id``) stays in its chat's conversation and is kept in metadata.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .base import Emitted, MapContext, Skip
from .fields import EventError, from_unix, obj, opt_str, req, req_id, req_int, req_obj, safe_id
from .items import build_turn, day_session, edited, removal

NEEDS_TENANT = True
NEEDS_CONVERSATION = False

_MESSAGES = ("message", "channel_post", "business_message")
_EDITS = ("edited_message", "edited_channel_post", "edited_business_message")
# What a message without text carries instead (the skip count names it).
_NON_TEXT = (
    "new_chat_members",
    "left_chat_member",
    "new_chat_title",
    "new_chat_photo",
    "pinned_message",
    "sticker",
    "photo",
    "video",
    "animation",
    "voice",
    "audio",
    "video_note",
    "document",
    "location",
    "venue",
    "contact",
    "poll",
    "dice",
)


def map_event(index: int, event: Any, ctx: MapContext) -> Emitted | Skip:
    update = obj(event, "update")
    if "update_id" not in update and "message_id" in update:
        return _said(update, "message", "message", ctx)
    req_int(update, "update_id", "update")
    for key in _MESSAGES:
        if key in update:
            return _said(req_obj(update, key, "update"), key, f"update.{key}", ctx)
    for key in _EDITS:
        if key in update:
            return _edit(req_obj(update, key, "update"), f"update.{key}", ctx)
    if "deleted_business_messages" in update:
        return _deleted(req_obj(update, "deleted_business_messages", "update"), ctx)
    others = [key for key in update if key != "update_id"]
    if not others:
        raise EventError("update: carries nothing besides update_id")
    return Skip(f"telegram:{others[0]}")


def tenant_hint(event: Any) -> str | None:
    return None  # Telegram names no tenant; the caller's tenant_id is on every rejection


def _said(msg: dict[str, Any], key: str, where: str, ctx: MapContext) -> Emitted | Skip:
    fields, turn_id, time, text, media = _read(msg, where, ctx)
    if text is None:
        return Skip(f"telegram:{key}:{media or 'no_text'}")
    return (build_turn(**fields, turn_id=turn_id, text=text, event_time=time),)


def _edit(msg: dict[str, Any], where: str, ctx: MapContext) -> Emitted:
    edit_time = from_unix(req(msg, "edit_date", where), f"{where}.edit_date")
    fields, turn_id, time, text, media = _read(msg, where, ctx)
    if text is None and media is None:
        raise EventError(f"{where}: neither text nor caption")
    return edited(base_id=turn_id, original_time=time, edit_time=edit_time, text=text, fields=fields)


def _deleted(deleted: dict[str, Any], ctx: MapContext) -> Emitted:
    where = "update.deleted_business_messages"
    ids = req(deleted, "message_ids", where)
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise EventError(f"{where}.message_ids: expected a non-empty list of integers")
    conversation = _conversation(req_obj(deleted, "chat", where), ctx, where)
    # The update is not timed: it covers every version sent up to now.
    return (removal(_tenant(ctx), conversation, [str(i) for i in ids], ctx.now, "deleted"),)


def _read(
    msg: dict[str, Any], where: str, ctx: MapContext
) -> tuple[dict[str, Any], str, datetime, str | None, str | None]:
    """The turn fields, id, time, text (None when there is none) and what it carries instead."""
    message_id = req_int(msg, "message_id", where)
    chat = req_obj(msg, "chat", where)
    time = from_unix(req(msg, "date", where), f"{where}.date")
    sender = msg.get("from")
    if sender is not None:
        sender = obj(sender, f"{where}.from")
    bot = sender is not None and sender.get("is_bot") is True
    text = _text(msg, where)
    media = next((key for key in _NON_TEXT if key in msg), None)
    metadata: dict[str, Any] = {"platform": "telegram", "message_id": message_id, "chat_type": chat.get("type")}
    title = chat.get("title")
    if isinstance(title, str):
        metadata["chat_title"] = title
    for key, name in (("message_thread_id", "topic"), ("reply_to_message", "reply_to")):
        value = msg.get(key)
        if isinstance(value, dict):
            value = value.get("message_id")
        if isinstance(value, int):
            metadata[name] = value
    document = msg.get("document")
    if isinstance(document, dict) and isinstance(document.get("file_name"), str):
        metadata["files"] = [document["file_name"]]
    if media is not None:
        metadata["media"] = media
    if bot:
        metadata["bot"] = True
    fields = {
        "tenant_id": _tenant(ctx),
        "conversation_id": _conversation(chat, ctx, where),
        "session_id": ctx.session_id or day_session(time),
        "speaker": _speaker(msg, sender, chat, where, ctx),
        "role": "assistant" if bot else "user",
        "metadata": metadata,
    }
    return fields, str(message_id), time, text, media


def _text(msg: dict[str, Any], where: str) -> str | None:
    """``text``, else a media ``caption``; present but blank is malformed."""
    for key in ("text", "caption"):
        value = opt_str(msg, key, where)
        if value is not None:
            if not value.strip():
                raise EventError(f"{where}.{key}: empty")
            return value
    return None


def _speaker(
    msg: dict[str, Any], sender: dict[str, Any] | None, chat: dict[str, Any], where: str, ctx: MapContext
) -> str:
    if sender is None:  # a channel post: signed by its author, or the channel speaks
        sender_chat = msg.get("sender_chat")
        signed = sender_chat.get("title") if isinstance(sender_chat, dict) else None
        for value in (msg.get("author_signature"), signed, chat.get("title")):
            if isinstance(value, str) and value.strip():
                return value
        raise EventError(f"{where}.from: missing")
    user_id = req_id(sender, "id", f"{where}.from")
    if user_id in ctx.names:
        return ctx.names[user_id]
    first, last = opt_str(sender, "first_name", f"{where}.from"), opt_str(sender, "last_name", f"{where}.from")
    full = " ".join(part for part in (first, last) if part and part.strip())
    return full or opt_str(sender, "username", f"{where}.from") or user_id


def _tenant(ctx: MapContext) -> str:
    if ctx.tenant_id is None:  # map_events requires it; kept for direct callers
        raise EventError("tenant: Telegram names no tenant; pass tenant_id")
    return ctx.tenant_id


def _conversation(chat: dict[str, Any], ctx: MapContext, where: str) -> str:
    if ctx.conversation_id is not None:
        return ctx.conversation_id
    return safe_id(req_id(chat, "id", f"{where}.chat"), prefix="chat", where=f"{where}.chat.id")
