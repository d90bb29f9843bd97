"""Every memstream topic, named once, with the payloads it carries (names relative to the configured
prefix: the full name is ``<prefix>.<name>``)."""

from __future__ import annotations

from typing import Iterable

import orjson

from .base import Payload, SchemaError
from .dlq import DeadLetter
from .forget import Forget, ForgetAudit, ForgetReply
from .memory import ConsolidateCommand, ConsolidationUpdate, FreshTurn, MemoryWrite, StmFlush
from .progress import ImportProgress
from .query import Query, Reply
from .read import ReadReply, ReadRequest
from .record import StoredPoint
from .turns import CompressedTurn, SegmentedTurn, StmTick, Turn, WindowTick
from .usage import LlmUsage


class Topic:
    """The logical topic names."""

    TURNS = "turns"
    BULK_TURNS = "bulk.turns"  # history imports: admitted into the pipeline when live work allows
    TURNS_COMPRESSED = "turns.compressed"
    SEGMENTS = "segments"
    STM_FLUSH = "stm.flush"
    CARDS = "cards"
    UPDATES = "updates"
    CONTROL = "control"
    QUERIES = "queries"
    REPLIES = "replies"
    DLQ = "dlq"
    AUDIT = "audit"
    RECORD = "record"
    LLM_USAGE = "llm.usage"
    IMPORT_PROGRESS = "import.progress"


# The first payload of each topic is what it carries without a ``kind`` match (its main payload).
# A forget travels through every ingest topic behind the turns it must catch.
TOPIC_PAYLOADS: dict[str, tuple[type[Payload], ...]] = {
    Topic.TURNS: (Turn, Forget),
    Topic.BULK_TURNS: (Turn,),
    Topic.TURNS_COMPRESSED: (CompressedTurn, WindowTick, Forget),
    Topic.SEGMENTS: (SegmentedTurn, StmTick, Forget),
    Topic.STM_FLUSH: (StmFlush, Forget),
    Topic.CARDS: (MemoryWrite, FreshTurn, Forget),
    Topic.UPDATES: (ConsolidationUpdate,),
    Topic.CONTROL: (ConsolidateCommand, Forget),
    Topic.QUERIES: (Query, ReadRequest),
    Topic.REPLIES: (Reply, ForgetReply, ReadReply),
    Topic.DLQ: (DeadLetter,),
    Topic.AUDIT: (ForgetAudit,),
    # Every stored point, latest per key: what the store is rebuilt from (schemas/record.py).
    Topic.RECORD: (StoredPoint,),
    # Each worker's LLM spend per tenant and budget window, latest per key (schemas/usage.py).
    Topic.LLM_USAGE: (LlmUsage,),
    # History imports: turns each import sent, turns each worker let in (schemas/progress.py).
    Topic.IMPORT_PROGRESS: (ImportProgress,),
}
ALL_TOPICS = tuple(TOPIC_PAYLOADS)
# Compacted (latest record per key) instead of deleted by age; the others keep raw text, so they
# get a bounded retention (``MEMSTREAM_TOPIC_RETENTION_S``).
COMPACTED_TOPICS = (Topic.AUDIT, Topic.RECORD, Topic.LLM_USAGE, Topic.IMPORT_PROGRESS)
# Topics whose old records may still hold a forgotten text (until retention deletes them or, for the
# record, the log cleaner drops the versions a tombstone replaced: max.compaction.lag.ms bounds both).
TEXT_KEEPING_TOPICS = tuple(
    name for name in TOPIC_PAYLOADS if name not in (Topic.AUDIT, Topic.LLM_USAGE, Topic.IMPORT_PROGRESS)
)
# The topics producers outside the pipeline write to (chat platforms, the SDK, the gateway): with
# tenant write secrets, every record on them is signed (schemas/signature.py), workers' own too.
SIGNED_TOPICS = (Topic.TURNS, Topic.BULK_TURNS, Topic.CONTROL, Topic.QUERIES)
# The topics a turn crosses before its memories are in the store (FRONT: before the index stage).
INGEST_TOPICS = (Topic.TURNS, Topic.BULK_TURNS, Topic.TURNS_COMPRESSED, Topic.SEGMENTS, Topic.STM_FLUSH, Topic.CARDS)
FRONT_TOPICS = INGEST_TOPICS[:-1]
# ... and then those of consolidation: what a deployment waits on to call itself drained.
DRAIN_TOPICS = (*INGEST_TOPICS, Topic.CONTROL, Topic.UPDATES)


class ReplyTopicRefused(SchemaError):
    """A question, read or forget that names one of memstream's own topics (or Kafka's) to answer on:
    the worker would write a reply where only memstream's records belong (a reply on ``record`` would
    stop every rebuild). A dead letter, answered nowhere."""

    label = "bad reply topic"


def reply_topic_problem(prefix: str, topic: str) -> str | None:
    """Why ``topic`` may not take replies of the deployment with topic prefix ``prefix``; None when it
    may: ``<prefix>.replies``, or a topic that is not memstream's or Kafka's own."""
    own = {f"{prefix}.{name}" for name in ALL_TOPICS if name != Topic.REPLIES}
    if topic in own or topic.startswith(f"{prefix}-memstream") or topic.startswith("__"):
        return f"reply topic {topic!r} is one of memstream's or Kafka's own topics"
    return None


def check_reply_topic(prefix: str, topic: str) -> None:
    problem = reply_topic_problem(prefix, topic)
    if problem:
        raise ReplyTopicRefused(problem)


def message_kind(raw: bytes) -> object:
    """A message's ``kind``, or None when it is no JSON object (for routing: it raises nothing)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return data.get("kind") if isinstance(data, dict) else None


def decode_message(topic: str, raw: bytes) -> Payload:
    """A message of ``topic`` (logical name) as the payload its ``kind`` names; a message without a
    known kind is validated as the topic's main payload (whose error then says what is wrong)."""
    payloads = TOPIC_PAYLOADS[topic]
    kind = message_kind(raw)  # not JSON: the main payload's parse says so
    for payload in payloads:
        if payload.model_fields["kind"].default == kind:
            return payload.from_bytes(raw)
    return payloads[0].from_bytes(raw)


def decode_compressed_message(raw: bytes) -> CompressedTurn | WindowTick | Forget:
    """``memory.turns.compressed`` carries turns, window ticks and forgets; ``kind`` says which."""
    return decode_message(Topic.TURNS_COMPRESSED, raw)  # type: ignore[return-value]


def decode_segments_message(raw: bytes) -> SegmentedTurn | StmTick | Forget:
    """``memory.segments`` carries turns, STM ticks and forgets; ``kind`` says which."""
    return decode_message(Topic.SEGMENTS, raw)  # type: ignore[return-value]


def decode_cards_message(raw: bytes) -> MemoryWrite | FreshTurn | Forget:
    """``memory.cards`` carries memory writes, fresh turns and forgets; ``kind`` says which."""
    return decode_message(Topic.CARDS, raw)  # type: ignore[return-value]


def memory_writes(values: Iterable[bytes]) -> list[MemoryWrite]:
    """The memory writes among messages of ``memory.cards`` (its fresh turns and forgets left out)."""
    return [m for m in map(decode_cards_message, values) if isinstance(m, MemoryWrite)]
