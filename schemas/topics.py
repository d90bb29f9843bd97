"""Every memstream topic, named once, with the payloads it carries (names relative to the configured
prefix: the full name is ``<prefix>.<name>``)."""

from __future__ import annotations

import orjson

from .base import Payload, SchemaError
from .dlq import DeadLetter
from .memory import ConsolidateCommand, ConsolidationUpdate, MemoryWrite, StmFlush
from .query import Query, Reply
from .turns import CompressedTurn, SegmentedTurn, StmTick, Turn, WindowTick


class Topic:
    """The logical topic names."""

    TURNS = "turns"
    TURNS_COMPRESSED = "turns.compressed"
    SEGMENTS = "segments"
    STM_FLUSH = "stm.flush"
    CARDS = "cards"
    UPDATES = "updates"
    CONTROL = "control"
    QUERIES = "queries"
    REPLIES = "replies"
    DLQ = "dlq"


TOPIC_PAYLOADS: dict[str, tuple[type[Payload], ...]] = {
    Topic.TURNS: (Turn,),
    Topic.TURNS_COMPRESSED: (CompressedTurn, WindowTick),
    Topic.SEGMENTS: (SegmentedTurn, StmTick),
    Topic.STM_FLUSH: (StmFlush,),
    Topic.CARDS: (MemoryWrite,),
    Topic.UPDATES: (ConsolidationUpdate,),
    Topic.CONTROL: (ConsolidateCommand,),
    Topic.QUERIES: (Query,),
    Topic.REPLIES: (Reply,),
    Topic.DLQ: (DeadLetter,),
}
ALL_TOPICS = tuple(TOPIC_PAYLOADS)
# The topics a turn crosses before its memories are in the store (FRONT: before the index stage).
INGEST_TOPICS = (Topic.TURNS, Topic.TURNS_COMPRESSED, Topic.SEGMENTS, Topic.STM_FLUSH, Topic.CARDS)
FRONT_TOPICS = INGEST_TOPICS[:-1]
# ... and then those of consolidation: what a deployment waits on to call itself drained.
DRAIN_TOPICS = (*INGEST_TOPICS, Topic.CONTROL, Topic.UPDATES)


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
