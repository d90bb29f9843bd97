"""The write path: segmenting, the short-term buffer, extracting memory cards."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ExtractMode = Literal["auto", "llm", "extractive"]


class WritePathSettings(BaseModel):
    """How turns become segments, short-term flushes and memory cards."""

    segment_method: Literal["hybrid", "similarity", "attention"] = Field(
        "hybrid",
        description="Topic boundaries from similarity within reach of attention candidates, or one signal alone",
    )
    segment_threshold: float = Field(0.2, description="Start of the adaptive similarity threshold θ")
    segment_threshold_max: float = Field(
        0.5, description="θ rises by 0.05 up to this until a full window has a boundary"
    )
    segment_window_turns: int = Field(12, ge=2, description="Sensory window: turns segmented together")
    segment_carry_turns: int = Field(3, ge=0, description="Turns kept from one window as context for the next")
    segment_coarse_radius: int = Field(
        3, ge=0, description="A similarity boundary must lie this close to an attention candidate"
    )
    segment_heads: str | None = Field(
        None, description="Attention heads as 'layer:head,...'; unset = calibrated heads of the model"
    )
    segment_attention_model: str | None = Field(
        None,
        description="Encoder whose attention proposes topic boundaries (named or a folder, as embedding_model); "
        "unset = the packaged all-MiniLM-L6-v2, whose heads are calibrated, whatever the embedder",
    )
    stm_tokens: int = Field(
        1536,
        ge=16,
        description="STM flush budget in tokens: one extraction call per flush (1,536: the smallest multiple "
        "of 256 whose LoCoMo tune-split flushes stay within 25 per 1,000 turns; 768 made 40.6)",
    )
    stm_idle_s: float = Field(30.0, gt=0, description="Flush a conversation's buffer after this many idle seconds")
    stm_tick_s: float = Field(5.0, gt=0, description="How often workers look for idle buffers")
    fresh_turns: bool = Field(
        True,
        description="The compress stage also sends each turn it lets in to the index stage at once "
        "(a fresh turn on memory.cards): retrievable as a raw turn within a second or two, before its cards",
    )
    extract_mode: ExtractMode = Field("auto", description="auto = LLM when configured, else extractive")
    extract_max_cards: int = Field(
        24, ge=1, description="Most cards one extraction call may return (bounds the output)"
    )
    extract_max_tokens: int = Field(2048, ge=64, description="Completion token limit of an extraction call")
    extract_max_card_turns: int = Field(
        4, ge=1, description="Most turns an LLM card may cite: more are cut to those that support its text best"
    )
    llm_outage_s: float = Field(
        120.0,
        ge=0,
        description="How long extraction waits for an unreachable LLM "
        "(trying again with back-off) before a flush falls back to the extractive mode",
    )
