"""The contract every chat-platform mapper follows, the dispatcher, and loading events from a file.

A mapper turns one platform event into memstream items: ``Turn`` s to produce on ``memory.turns``
and ``TurnRemoval`` s (an edit's old version, a deletion) that the caller sends as forgets. Pure:
no I/O, no clock except the ``now`` the caller may pass, so the same event maps to the same items.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Literal, Mapping, Protocol

import orjson

from memstream.schemas import Turn
from memstream.schemas.base import utc

from .fields import VALID_ID, EventError

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
        if value is not None and not VALID_ID.match(value):
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
