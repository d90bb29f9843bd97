"""Reading a platform event's fields: each reader checks the type it needs and raises EventError
saying what is wrong and where; platform ids made memstream ids; times.

Ids: platform ids that already fit ``ID_PATTERN`` are kept verbatim. Others get every character
outside ``[A-Za-z0-9_.:@-]`` replaced by ``-`` (``#`` and ``~`` too: they mark chunks and versions)
and, when they do not start with a letter or digit, a platform prefix (Telegram chat ``-100123`` ->
``chat-100123``). An id still longer than 128 characters is rejected, never cut (cutting could merge
two ids).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Mapping

from memstream.schemas.base import ID_PATTERN, utc

VALID_ID = re.compile(ID_PATTERN)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@\-]")


class EventError(ValueError):
    """A malformed event; the message says what is wrong and where (``event.ts: missing``)."""


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


# --- ids and times ---------------------------------------------------------------------------------


def safe_id(value: str, *, prefix: str, where: str) -> str:
    """A platform id as a memstream id (see the module docstring)."""
    if VALID_ID.match(value) and "#" not in value and "~" not in value:
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
