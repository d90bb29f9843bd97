"""Single source of truth for every topic payload (versioned, validated, orjson)."""

from .base import SCHEMA_VERSION, Payload, SchemaError, TenantScoped, conversation_key, utc
from .dlq import DeadLetter
from .forget import Forget, ForgetAudit, ForgetReply, RetainedCopy
from .memory import (
    Card,
    CardPatch,
    ConsolidateCommand,
    ConsolidationCandidate,
    ConsolidationUpdate,
    FlushSegment,
    FreshTurn,
    MemoryWrite,
    PairDecision,
    ProfileUpdate,
    Provenance,
    Scene,
    SourceTurn,
    StageCost,
    StmFlush,
    imported_flush,
)
from .progress import ImportProgress
from .query import Evidence, Plan, Query, Reply
from .read import ReadReply, ReadRequest
from .record import StoredPoint, parse_record_key, record_key
from .topics import (
    decode_cards_message,
    decode_compressed_message,
    decode_message,
    decode_segments_message,
    memory_writes,
)
from .turns import CompressedTurn, SegmentedTurn, StmTick, Turn, WindowTick
from .usage import LlmUsage

__all__ = [
    "SCHEMA_VERSION",
    "ImportProgress",
    "LlmUsage",
    "Payload",
    "SchemaError",
    "TenantScoped",
    "conversation_key",
    "utc",
    "DeadLetter",
    "Forget",
    "ForgetAudit",
    "StoredPoint",
    "parse_record_key",
    "record_key",
    "ForgetReply",
    "RetainedCopy",
    "Card",
    "CardPatch",
    "ConsolidateCommand",
    "ConsolidationCandidate",
    "ConsolidationUpdate",
    "FlushSegment",
    "FreshTurn",
    "PairDecision",
    "MemoryWrite",
    "ProfileUpdate",
    "Provenance",
    "Scene",
    "SourceTurn",
    "StageCost",
    "StmFlush",
    "imported_flush",
    "Evidence",
    "Plan",
    "Query",
    "Reply",
    "ReadReply",
    "ReadRequest",
    "CompressedTurn",
    "SegmentedTurn",
    "StmTick",
    "Turn",
    "WindowTick",
    "decode_cards_message",
    "decode_compressed_message",
    "decode_message",
    "decode_segments_message",
    "memory_writes",
]
