"""STM flushes, memory writes (cards, scenes, triggers, profiles) and consolidation updates."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import TenantScoped, UtcDatetime
from .turns import CompressedTurn

CardType = Literal["fact", "event", "preference", "state", "plan", "interaction", "assistant_output"]
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
    seq: int = Field(ge=0, description="Position in the conversation, for the Replay window")


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


ConsolidationAction = Literal["candidates", "keep_both", "duplicate", "merge", "supersede"]


class ConsolidationCandidate(Part):
    card_id: str
    score: float


class ConsolidationUpdate(TenantScoped):
    """A consolidation outcome on ``memory.updates`` (applied to the store idempotently)."""

    kind: Literal["consolidation_update"] = "consolidation_update"
    update_id: str
    action: ConsolidationAction
    card_id: str = Field(description="The newer card the queue was built for")
    subject: str
    candidates: list[ConsolidationCandidate] = Field(default_factory=list)
    costs: list[StageCost] = Field(default_factory=list)
    decided_at: UtcDatetime
