"""OpenAI message lists -> turns.

Takes Chat Completions messages (``{"role", "content"}``, content a string or a list of parts
``{"type": "text", "text"}``) and Responses API input/output items (``{"type": "message", "role",
"content": [{"type": "input_text" | "output_text", "text"}]}``); the two may be mixed in one list.
Tool calls, tool results, reasoning and other item types are skipped. Lists name no tenant or
conversation: pass both. Turn id: the message's ``id`` when it has one, else its position in the
list, so send a whole transcript (or ids) for redeliveries to dedupe. Time: a per-message
``created_at`` / ``timestamp``, else ``start_time`` + position seconds. Session: ``session_id`` or
``s1``. Speaker: the ``name`` field, else User / Assistant / System / Developer by role; ``names``
maps either to a display name.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .base import Emitted, MapContext, Skip
from .fields import EventError, from_iso, from_unix, obj, opt_str, req_str, safe_id, text_of
from .items import build_turn

NEEDS_TENANT = True
NEEDS_CONVERSATION = True
DEFAULT_SESSION = "s1"

_TEXT_PARTS = ("text", "input_text", "output_text")
_NOT_SPOKEN = ("tool", "function")  # results of tool calls, not anyone saying something


def map_event(index: int, event: Any, ctx: MapContext) -> Emitted | Skip:
    item = obj(event, "message")
    kind = opt_str(item, "type", "message")
    if kind is not None and kind != "message":
        return Skip(f"openai:{kind}")
    role = req_str(item, "role", "message")
    if role in _NOT_SPOKEN:
        return Skip(f"openai:{role}")
    turn_role = _turn_role(role)
    content = item.get("content")
    if content is None:
        for key in ("tool_calls", "function_call", "refusal"):
            if item.get(key):
                return Skip(f"openai:{role}:{key}")
        raise EventError("message.content: missing")
    text, other_parts = _content(content)
    if text is None:
        return Skip(f"openai:{role}:no_text")
    message_id = opt_str(item, "id", "message")
    name = opt_str(item, "name", "message")
    metadata: dict[str, Any] = {"platform": "openai", "index": index}
    if message_id is not None:
        metadata["message_id"] = message_id
    if kind == "message":
        metadata["api"] = "responses"
    if other_parts:
        metadata["non_text_parts"] = other_parts
    if ctx.tenant_id is None or ctx.conversation_id is None:  # map_events requires both; kept for direct callers
        raise EventError("tenant/conversation: OpenAI lists name neither; pass tenant_id and conversation_id")
    turn = build_turn(
        tenant_id=ctx.tenant_id,
        conversation_id=ctx.conversation_id,
        session_id=ctx.session_id or DEFAULT_SESSION,
        turn_id=safe_id(message_id, prefix="m", where="message.id") if message_id is not None else str(index),
        speaker=_speaker(name, role, ctx),
        role=turn_role,
        text=text,
        event_time=_time(item, index, ctx),
        metadata=metadata,
    )
    return (turn,)


def tenant_hint(event: Any) -> str | None:
    return None  # lists name no tenant; the caller's tenant_id is on every rejection


def _turn_role(role: str) -> str:
    if role in ("user", "assistant", "system"):
        return role
    if role == "developer":  # the Responses API's name for system instructions
        return "system"
    raise EventError(f"message.role: unknown role {role!r} (user, assistant, system, developer, tool)")


def _content(content: Any) -> tuple[str | None, int]:
    """The text of a message (None when it has only non-text parts) and how many parts are not text."""
    if isinstance(content, str):
        return text_of(content, "message.content"), 0
    if not isinstance(content, list):
        raise EventError(f"message.content: expected a string or a list of parts, got {type(content).__name__}")
    texts, others = [], 0
    for number, part in enumerate(content):
        where = f"message.content[{number}]"
        part = obj(part, where)
        kind = req_str(part, "type", where)
        if kind in _TEXT_PARTS:
            texts.append(req_str(part, "text", where))
        elif kind != "refusal":
            others += 1  # images, audio, files: nothing to caption them with here
    text = "\n".join(t for t in texts if t.strip())
    if text:
        return text, others
    if others:
        return None, others
    raise EventError("message.content: no text")


def _speaker(name: str | None, role: str, ctx: MapContext) -> str:
    if name is not None and name.strip():
        return ctx.names.get(name, name)
    return ctx.names.get(role) or role.title()


def _time(item: dict[str, Any], index: int, ctx: MapContext) -> datetime:
    for key in ("created_at", "timestamp"):
        value = item.get(key)
        if value is not None:
            where = f"message.{key}"
            return from_iso(value, where) if isinstance(value, str) else from_unix(value, where)
    return ctx.start_time + timedelta(seconds=index)
