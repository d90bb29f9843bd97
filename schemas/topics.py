"""Which payload each topic carries (names relative to the configured prefix)."""

from __future__ import annotations

import orjson

from .base import Payload, SchemaError
from .dlq import DeadLetter
from .memory import ConsolidationUpdate, MemoryWrite, StmFlush
from .query import Query, Reply
from .turns import CompressedTurn, SegmentedTurn, StmTick, Turn

TOPIC_PAYLOADS: dict[str, tuple[type[Payload], ...]] = {
    "turns": (Turn,),
    "turns.compressed": (CompressedTurn,),
    "segments": (SegmentedTurn, StmTick),
    "stm.flush": (StmFlush,),
    "cards": (MemoryWrite,),
    "updates": (ConsolidationUpdate,),
    "queries": (Query,),
    "replies": (Reply,),
    "dlq": (DeadLetter,),
}


def decode_segments_message(raw: bytes) -> SegmentedTurn | StmTick:
    """``memory.segments`` carries turns and STM ticks; the ``kind`` field says which."""
    try:
        kind = orjson.loads(raw).get("kind")
    except (orjson.JSONDecodeError, AttributeError) as exc:
        raise SchemaError(f"not a JSON object: {exc}") from exc
    if kind == "stm_tick":
        return StmTick.from_bytes(raw)
    return SegmentedTurn.from_bytes(raw)
