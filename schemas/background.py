"""Background work on the wire: a record made while handling a history import (the bulk lane's
turns, and what the stages after it make of them) carries ``memstream-background: 1``, so that every
stage, not only the lane's entry, can tell it from live work and let a question go first
(``streams/runtime/priority.py``). Absent, a record is live: producers never set it."""

from __future__ import annotations

from typing import Iterable, Mapping

from .signature import header_value

HEADER = "memstream-background"
VALUE = b"1"


def background_header() -> tuple[str, bytes]:
    return HEADER, VALUE


def is_background(headers: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None) -> bool:
    """Whether a consumed record's headers mark it as background work."""
    return header_value(headers, HEADER) == VALUE
