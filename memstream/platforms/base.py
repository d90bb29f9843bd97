"""The contract every chat-platform mapper follows, the dispatcher and the helpers they share.

A mapper turns one platform event into memstream items: ``Turn`` s to produce on ``memory.turns``
and ``TurnRemoval`` s (an edit's old version, a deletion) that the caller sends as forgets. Pure:
no I/O, no clock except the ``now`` the caller may pass, so the same event maps to the same items.

Ids: platform ids that already fit ``ID_PATTERN`` are kept verbatim. Others get every character
outside ``[A-Za-z0-9_.:@-]`` replaced by ``-`` (``#`` and ``~`` too: they mark chunks and versions)
and, when they do not start with a letter or digit, a platform prefix (Telegram chat ``-100123`` ->
``chat-100123``). An id still longer than 128 characters is rejected, never cut (cutting could merge
two ids).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Literal, Mapping, Protocol

import orjson
from pydantic import ValidationError

from memstream.schemas import Turn
from memstream.schemas.base import ID_PATTERN, utc, versioned_turn_id

FORMATS = ("slack", "discord", "openai", "telegram")
# Where a file holding one JSON object keeps its list of events, per format (checked in order):
# Slack conversations.history and Chat Completions use "messages", Telegram getUpdates "result",
# a Responses request "input"; "events" is memstream's own wrapper for any format.
LIST_KEYS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "slack": ("events", "messages"),
        "discord": ("events", "messages"),
        "openai": ("messages", "input", "events"),
        "telegram": ("result", "events"),
    }
)
ONE_MS = timedelta(milliseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ID = re.compile(ID_PATTERN)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@\-]")


@dataclass(frozen=True)
class TurnRemoval:
    """Forget these turns (a deletion, or the old version of an edited message): every version of
    them whose event time is not after ``before``. The caller sends it as a ``Forget``."""

    tenant_id: str
    conversation_id: str
    turn_ids: tuple[str, ...]
    before: datetime
    reason: Literal["edited", "deleted"]


@dataclass(frozen=True)
class Rejected:
    """An event that cannot be mapped, with what is wrong and the event for the dead-letter topic."""

    index: int
    reason: str
    raw: bytes
    tenant_id: str | None = None


@dataclass
class Mapped:
    """What a batch of events became: items in input order, skip counts and rejections."""

    items: list[Turn | TurnRemoval] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    rejected: list[Rejected] = field(default_factory=list)

    @property
    def turns(self) -> list[Turn]:
        return [item for item in self.items if isinstance(item, Turn)]

    @property
    def removals(self) -> list[TurnRemoval]:
        return [item for item in self.items if isinstance(item, TurnRemoval)]


@dataclass(frozen=True)
class Skip:
    """An event that is fine but carries nothing to remember; ``kind`` is its count key."""

    kind: str


Emitted = tuple[Turn | TurnRemoval, ...]


class EventError(ValueError):
    """A malformed event; the message says what is wrong and where (``event.ts: missing``)."""


@dataclass(frozen=True)
class MapContext:
    """The caller's overrides and clock, shared by every event of one ``map_events`` call."""

    tenant_id: str | None
    conversation_id: str | None
    session_id: str | None
    names: Mapping[str, str]
    start_time: datetime
    now: datetime


class Platform(Protocol):
    """A platform module: what it needs from the caller and how it maps one event."""

    NEEDS_TENANT: bool
    NEEDS_CONVERSATION: bool

    def map_event(self, index: int, event: Any, ctx: MapContext) -> Emitted | Skip: ...

    def tenant_hint(self, event: Any) -> str | None: ...


def platform(fmt: str) -> Platform:
    """The mapper module of ``fmt``; imported lazily because the modules import this one."""
    if fmt == "slack":
        from . import slack

        return slack
    if fmt == "discord":
        from . import discord

        return discord
    if fmt == "openai":
        from . import openai_messages

        return openai_messages
    if fmt == "telegram":
        from . import telegram

        return telegram
    raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")


def map_events(
    fmt: str,
    events: Iterable[Any],
    *,
    tenant_id: str | None = None,
    conversation_id: str | None = None,
    names: Mapping[str, str] | None = None,
    start_time: datetime | None = None,
    session_id: str | None = None,
    now: datetime | None = None,
) -> Mapped:
    """Map ``events`` of platform ``fmt`` to turns and removals.

    ``tenant_id``, ``conversation_id`` and ``session_id`` override what the events say (Telegram
    and OpenAI need ``tenant_id``, OpenAI ``conversation_id``). ``names`` maps platform user ids
    (OpenAI: ``name`` fields or roles) to display names. ``start_time`` times OpenAI messages that
    carry no time; ``now`` (default: the clock) times deletions the platform does not time.

    Raises ``ValueError`` for an unknown format or bad arguments only; a bad event becomes a
    ``Rejected``, never an exception.
    """
    mapper = platform(fmt)
    for name, value in (("tenant_id", tenant_id), ("conversation_id", conversation_id), ("session_id", session_id)):
        if value is not None and not _ID.match(value):
            raise ValueError(f"{name} {value!r} is not a valid id (letters, digits, _.:@#~- ; at most 128)")
    if mapper.NEEDS_TENANT and tenant_id is None:
        raise ValueError(f"{fmt} payloads name no tenant: pass tenant_id")
    if mapper.NEEDS_CONVERSATION and conversation_id is None:
        raise ValueError(f"{fmt} payloads name no conversation: pass conversation_id")
    clock = utc(now) if now is not None else datetime.now(timezone.utc)
    ctx = MapContext(
        tenant_id=tenant_id,
        conversation_id=conversation_id,
        session_id=session_id,
        names=names or {},
        start_time=utc(start_time) if start_time is not None else clock,
        now=clock,
    )
    out = Mapped()
    for index, event in enumerate(events):
        try:
            result = mapper.map_event(index, event, ctx)
        except EventError as exc:
            reason = str(exc)
        except Exception as exc:  # a mapper bug must not stop a batch: the event goes to the dead letters
            reason = f"unexpected {type(exc).__name__}: {exc}"
        else:
            if isinstance(result, Skip):
                out.skipped[result.kind] += 1
            else:
                out.items.extend(result)
            continue
        out.rejected.append(Rejected(index, reason, raw_bytes(event), tenant_id or _safe_hint(mapper, event)))
    return out


def _safe_hint(mapper: Platform, event: Any) -> str | None:
    try:
        return mapper.tenant_hint(event)
    except Exception:  # only a hint for the dead letter
        return None


def raw_bytes(event: Any) -> bytes:
    """The event as JSON bytes for the dead-letter topic (its repr when it is not JSON-able)."""
    try:
        return orjson.dumps(event)
    except TypeError:
        return orjson.dumps(repr(event))


# --- loading ---------------------------------------------------------------------------------------


def load_events(fmt: str, path: str | Path) -> list[Any]:
    """The events of a file: a JSON array, a JSON object with its list under one of ``LIST_KEYS``
    (any other object is one event), or JSONL (one event a line)."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        return parse_events(fmt, text)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def parse_events(fmt: str, text: str) -> list[Any]:
    """``load_events`` on a file's text."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if not text.strip():
        return []
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _jsonl(text)
    if isinstance(data, list):
        return data
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON array, object or JSONL, got a JSON {type(data).__name__}")
    for key in LIST_KEYS[fmt]:
        if key in data:
            found = data[key]
            if fmt == "openai" and isinstance(found, str):  # a Responses request may give one user text
                return [{"role": "user", "content": found}]
            if not isinstance(found, list):
                raise ValueError(f"{key!r} should hold a list of events, got {type(found).__name__}")
            return found
    return [data]


def _jsonl(text: str) -> list[Any]:
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                events.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"line {number}: not JSON ({exc})") from exc
    return events


# --- reading fields --------------------------------------------------------------------------------


def obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise EventError(f"{where}: expected an object, got {_kind(value)}")
    return value


def req(data: Mapping[str, Any], key: str, where: str) -> Any:
    value = data.get(key)
    if value is None:
        raise EventError(f"{where}.{key}: missing")
    return value


def req_obj(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    return obj(req(data, key, where), f"{where}.{key}")


def opt_str(data: Mapping[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise EventError(f"{where}.{key}: expected a string, got {_kind(value)}")
    return value


def req_str(data: Mapping[str, Any], key: str, where: str) -> str:
    value = opt_str(data, key, where)
    if value is None:
        raise EventError(f"{where}.{key}: missing")
    return value


def req_int(data: Mapping[str, Any], key: str, where: str) -> int:
    value = req(data, key, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise EventError(f"{where}.{key}: expected an integer, got {_kind(value)}")
    return value


def req_id(data: Mapping[str, Any], key: str, where: str) -> str:
    """A platform id given as a string or an integer (Telegram), as a string."""
    value = req(data, key, where)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise EventError(f"{where}.{key}: expected an id (string or integer), got {_kind(value)}")
    return str(value)


def text_of(value: str, where: str) -> str:
    """Text that a turn needs: present and not blank."""
    if not value.strip():
        raise EventError(f"{where}: empty text")
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# --- ids, times, sessions --------------------------------------------------------------------------


def safe_id(value: str, *, prefix: str, where: str) -> str:
    """A platform id as a memstream id (see the module docstring)."""
    if _ID.match(value) and "#" not in value and "~" not in value:
        return value
    if not value:
        raise EventError(f"{where}: empty id")
    cleaned = _UNSAFE.sub("-", value)
    if not cleaned[:1].isalnum():
        cleaned = prefix + cleaned
    if len(cleaned) > 128:
        raise EventError(f"{where}: id longer than 128 characters")
    return cleaned


def from_unix(value: Any, where: str) -> datetime:
    """Unix seconds (an integer or a number) as an aware UTC datetime."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EventError(f"{where}: expected unix seconds, got {_kind(value)}")
    try:
        return datetime.fromtimestamp(value, timezone.utc)
    except (OverflowError, OSError, ValueError) as exc:
        raise EventError(f"{where}: unix time {value!r} out of range") from exc


def from_iso(value: Any, where: str) -> datetime:
    """An ISO 8601 time; naive ones are taken as UTC."""
    if not isinstance(value, str):
        raise EventError(f"{where}: expected an ISO 8601 time, got {_kind(value)}")
    try:
        return utc(datetime.fromisoformat(value))
    except ValueError as exc:
        raise EventError(f"{where}: unparseable time {value!r}") from exc


def version_of(time: datetime) -> str:
    """An edit's version marker: its time as integer unix milliseconds."""
    return str((time - EPOCH) // ONE_MS)


def day_session(time: datetime) -> str:
    """The session of a platform without sessions: the message's UTC day, ``YYYY-MM-DD``."""
    return time.astimezone(timezone.utc).strftime("%Y-%m-%d")


# --- building items --------------------------------------------------------------------------------


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
        if not _ID.match(value):
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
