"""Which payload each topic carries (names relative to the configured prefix)."""

from __future__ import annotations

import orjson

from .base import Payload, SchemaError
from .dlq import DeadLetter
from .memory import ConsolidateCommand, ConsolidationUpdate, MemoryWrite, StmFlush
from .query import Query, Reply
from .turns import CompressedTurn, SegmentedTurn, StmTick, Turn, WindowTick

TOPIC_PAYLOADS: dict[str, tuple[type[Payload], ...]] = {
    "turns": (Turn,),
    "turns.compressed": (CompressedTurn, WindowTick),
    "segments": (SegmentedTurn, StmTick),
    "stm.flush": (StmFlush,),
    "cards": (MemoryWrite,),
    "updates": (ConsolidationUpdate,),
    "control": (ConsolidateCommand,),
    "queries": (Query,),
    "replies": (Reply,),
    "dlq": (DeadLetter,),
}


def _kind(raw: bytes) -> object:
    try:
        return orjson.loads(raw).get("kind")
    except (orjson.JSONDecodeError, AttributeError) as exc:
        raise SchemaError(f"not a JSON object: {exc}") from exc


def decode_compressed_message(raw: bytes) -> CompressedTurn | WindowTick:
    """``memory.turns.compressed`` carries turns and window ticks; the ``kind`` field says which."""
    return WindowTick.from_bytes(raw) if _kind(raw) == "window_tick" else CompressedTurn.from_bytes(raw)


def decode_segments_message(raw: bytes) -> SegmentedTurn | StmTick:
    """``memory.segments`` carries turns and STM ticks; the ``kind`` field says which."""
    return StmTick.from_bytes(raw) if _kind(raw) == "stm_tick" else SegmentedTurn.from_bytes(raw)
