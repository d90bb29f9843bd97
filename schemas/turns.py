"""Conversation turns as they move through compress → segment → stm."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from .base import ID_PATTERN, TenantScoped, UtcDatetime
from .text import INVISIBLE_SPEAKER, VISIBLE_PATTERN, has_visible

Role = Literal["user", "assistant", "system", "other"]


class Turn(TenantScoped):
    """One utterance produced by a chat platform onto ``memory.turns``."""

    kind: Literal["turn"] = "turn"
    session_id: str = Field(pattern=ID_PATTERN)
    turn_id: str = Field(pattern=ID_PATTERN, description="Unique within the conversation (LoCoMo: dia_id)")
    # The pattern says in JSON Schema what _speaker_is_visible checks (with a clearer reason).
    speaker: str = Field(min_length=1, max_length=200, json_schema_extra={"pattern": VISIBLE_PATTERN})
    role: Role = "user"
    text: str = Field(min_length=1)
    event_time: UtcDatetime
    image_captions: list[Annotated[str, Field(max_length=4000)]] = Field(default_factory=list, max_length=64)
    metadata: dict[str, Any] = Field(default_factory=dict, max_length=64)
    last_in_session: bool = Field(False, description="Producer marks the session's last turn: the STM flushes then")

    @property
    def seq(self) -> int | None:
        """The turn's position in its conversation, ``metadata.seq`` (an integer): the producer's, or
        the one the segment stage gives a turn that has none (from 0). Imported history is numbered
        below 0 (``memstream.client.history``): it comes before the conversation's live turns."""
        seq = self.metadata.get("seq")
        return seq if isinstance(seq, int) and not isinstance(seq, bool) else None

    @field_validator("speaker")
    @classmethod
    def _speaker_is_visible(cls, speaker: str) -> str:
        # "\u200b" would be stored as a name, and show in evidence as an invisible one.
        if not has_visible(speaker):
            raise ValueError(INVISIBLE_SPEAKER)
        return speaker


class CompressedTurn(TenantScoped):
    """A turn after pre-compression; the raw text is kept for Replay."""

    kind: Literal["compressed_turn"] = "compressed_turn"
    turn: Turn
    compressed_text: str
    tokens_in: int = Field(ge=0)
    tokens_out: int = Field(ge=0)
    compressor: str = Field(description="'off' when passed through")
    received_at: UtcDatetime | None = Field(
        None,
        description="When the turn reached the turns topic (its record timestamp): the start of turn-to-memory latency",
    )
    imported: bool = Field(
        False, description="Came through the bulk lane (a history import): its flushes wait behind live ones"
    )


class SegmentedTurn(TenantScoped):
    """A compressed turn with the topic segment it belongs to (``memory.segments``)."""

    kind: Literal["segmented_turn"] = "segmented_turn"
    item: CompressedTurn
    segment_id: str
    topic_label: str
    boundary: bool = Field(description="This turn opens a new segment")
    boundary_reason: Literal["first", "session", "hybrid", "similarity", "attention", "none"] = "none"


class StmTick(TenantScoped):
    """Control message on ``memory.segments``: re-check a conversation's buffer for an idle flush.

    Workers send it to the conversation's own partition, so the flush happens inside stream
    processing, where the changelog-backed table can be written.
    """

    kind: Literal["stm_tick"] = "stm_tick"
    sent_at: UtcDatetime
    force: bool = Field(False, description="Flush whatever is pending (e.g. on command)")
    conversation_idle: bool = Field(False, description="Sent by the segmenter after draining an idle window")


class WindowTick(TenantScoped):
    """Control message on ``memory.turns.compressed``: segment a conversation's idle sensory window.

    Like ``StmTick``, it travels on the conversation's own partition, behind its turns.
    """

    kind: Literal["window_tick"] = "window_tick"
    sent_at: UtcDatetime
    force: bool = Field(False, description="Segment the window and flush the STM now, idle or not (a client's flush)")
