"""STM flushes, memory writes (cards, scenes, triggers, profiles) and consolidation updates."""

from __future__ import annotations

from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .base import ID_PATTERN, ScopeKeyed, TenantScoped, UtcDatetime
from .turns import CompressedTurn, Turn

CardType = Literal["fact", "event", "preference", "state", "plan", "interaction", "assistant_output"]
# "session_end": written by workers before sessions stopped flushing the STM; still read from the topic.
FlushReason = Literal["budget", "idle", "session_end", "forced"]
ExtractionMode = Literal["llm", "extractive", "extractive_fallback"]


class Part(BaseModel):
    """Nested (non-envelope) model: strict, no version of its own."""

    model_config = ConfigDict(extra="forbid")


class FlushSegment(Part):
    segment_id: str
    topic_label: str
    turns: list[CompressedTurn]


class StmFlush(TenantScoped):
    """A topic-aware batch of buffered turns: one flush = one extraction call."""

    kind: Literal["stm_flush"] = "stm_flush"
    flush_id: str = Field(description="Deterministic: derived from the turn ids it holds")
    reason: FlushReason
    segments: list[FlushSegment] = Field(min_length=1)
    tokens: int = Field(ge=0)
    flushed_at: UtcDatetime

    def turns(self) -> list[CompressedTurn]:
        return [t for seg in self.segments for t in seg.turns]


def imported_flush(raw: bytes) -> bool:
    """Whether a ``memory.stm.flush`` record is a flush of imported turns only (the bulk lane's), read
    without validating it: for routing, it raises nothing (a malformed record is not imported)."""
    try:
        data = orjson.loads(raw)
        turns = [t for seg in data["segments"] for t in seg["turns"]] if data.get("kind") == "stm_flush" else []
        return bool(turns) and all(t.get("imported") is True for t in turns)
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return False


class StageCost(Part):
    """What one stage spent on the LLM for one message."""

    stage: str
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str | None = None

    def __add__(self, other: StageCost) -> StageCost:
        return StageCost(
            stage=self.stage,
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            model=self.model or other.model,
        )


class Provenance(Part):
    turn_ids: list[str] = Field(min_length=1)
    scene_id: str | None = None
    session_ids: list[str] = Field(default_factory=list)


class Card(Part):
    """An atomic, self-contained memory item with provenance to its source turns."""

    card_id: str
    subject: str = Field(min_length=1, description="An explicit name, never a pronoun")
    type: CardType
    content: str = Field(min_length=1)
    event_time: UtcDatetime | None = Field(None, description="Absolute time of what the card states")
    time_phrase: str | None = Field(None, description="The original relative phrase the time came from")
    provenance: Provenance
    atomic: bool = True
    entity_triggers: list[str] = Field(default_factory=list)
    bridge_triggers: list[str] = Field(default_factory=list)
    speaker: str | None = None
    version: int = 1
    valid_from: UtcDatetime
    valid_to: UtcDatetime | None = None
    superseded_by: str | None = None


class Scene(Part):
    """A coherent segment of conversation with its triggers."""

    scene_id: str
    topic_label: str
    summary: str
    participants: list[str]
    start_time: UtcDatetime
    end_time: UtcDatetime
    turn_ids: list[str] = Field(min_length=1)
    scene_triggers: list[str] = Field(default_factory=list)
    horizon_triggers: list[str] = Field(default_factory=list)


class ProfileUpdate(Part):
    speaker: str
    traits: list[str] = Field(default_factory=list)
    preferences: list[str] = Field(default_factory=list)
    relationships: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    source_turn_ids: list[str] = Field(default_factory=list)


class SourceTurn(Part):
    """The raw turn kept for Replay."""

    turn_id: str
    session_id: str
    speaker: str
    role: str
    text: str
    event_time: UtcDatetime
    image_captions: list[str] = Field(default_factory=list)
    seq: int = Field(description="Position in the conversation, for the Replay window (imported history: below 0)")
    received_at: UtcDatetime | None = Field(None, description="When the turn reached the turns topic")


class MemoryWrite(TenantScoped):
    """Everything one flush produced, on ``memory.cards``; the index stage upserts it."""

    kind: Literal["memory_write"] = "memory_write"
    write_id: str
    flush_id: str
    mode: ExtractionMode
    cards: list[Card]
    scenes: list[Scene]
    profile_updates: list[ProfileUpdate] = Field(default_factory=list)
    source_turns: list[SourceTurn]
    costs: list[StageCost] = Field(default_factory=list)
    written_at: UtcDatetime


class FreshTurn(TenantScoped):
    """A turn (or chunk) as the compress stage let it in, on ``memory.cards`` ahead of its flush: the
    index stage makes it retrievable at once as a raw turn. It writes the turn's point only where
    there is none, so the flush's write of the turn, whenever it comes, is what stays."""

    kind: Literal["fresh_turn"] = "fresh_turn"
    turn: Turn
    received_at: UtcDatetime | None = Field(None, description="When the turn reached the turns topic")


ConsolidationAction = Literal["keep_both", "duplicate", "merge", "supersede"]


class ConsolidationCandidate(Part):
    card_id: str
    score: float


class PairDecision(Part):
    """What consolidation decided about two similar cards of one subject (always older → newer)."""

    older_card_id: str
    newer_card_id: str
    similarity: float
    action: ConsolidationAction
    decided_by: Literal["llm", "rules"]


class CardPatch(Part):
    """Payload fields one decision sets on a stored card. Patches combine commutatively: the earliest
    successor (by ``successor_order``) wins and ``support`` is a set, so order and replays do not matter."""

    card_id: str
    valid_to: UtcDatetime | None = None
    superseded_by: str | None = None
    successor_order: tuple[float, float, str] | None = Field(
        None, description="(event time, said time, id) of the successor: the earliest one wins"
    )
    duplicate_of: str | None = None
    support: list[str] = Field(default_factory=list, description="Card ids that repeated this card")
    lineage: list[str] = Field(default_factory=list, description="For a merged card: the cards it combines")


class ConsolidationUpdate(TenantScoped):
    """One update queue's outcome on ``memory.updates``; applying it to the store is idempotent, so
    replaying the topic rebuilds the same state. Nothing is deleted: cards leave the current view."""

    kind: Literal["consolidation_update"] = "consolidation_update"
    update_id: str = Field(description="Deterministic: the queue's card and its candidates")
    card_id: str = Field(description="The card the queue was built for")
    subject: str
    candidates: list[ConsolidationCandidate] = Field(default_factory=list)
    decisions: list[PairDecision] = Field(default_factory=list)
    patches: list[CardPatch] = Field(default_factory=list)
    merged_cards: list[Card] = Field(default_factory=list, description="New cards a merge created")
    costs: list[StageCost] = Field(default_factory=list)
    written_at: UtcDatetime | None = Field(None, description="When the card was written (for the lag metric)")
    decided_at: UtcDatetime
    as_of: UtcDatetime | None = Field(
        None,
        description="When its run began (the command's time): the run's queues see the store as of then, so "
        "a run redone after a crash makes the same decisions whatever it had already applied",
    )


class ConsolidateCommand(ScopeKeyed):
    """On ``memory.control``: consolidate now. Without a conversation, every pending conversation
    (of the tenant, or of all tenants) in the partitions that receive it."""

    kind: Literal["consolidate"] = "consolidate"
    tenant_id: str | None = Field(None, pattern=ID_PATTERN)
    conversation_id: str | None = Field(None, pattern=ID_PATTERN)
    reason: Literal["command", "idle", "schedule"] = "command"
    requested_at: UtcDatetime
    scope: Literal["pending", "all"] = Field(
        "pending",
        description="pending: the cards written since the last run; all: every card of the conversation "
        "decided again (after changing tau or the decider)",
    )

    @model_validator(mode="after")
    def _conversation_needs_tenant(self) -> ConsolidateCommand:
        if self.conversation_id and not self.tenant_id:
            raise ValueError("a conversation is named within a tenant: give tenant_id too")
        return self
