"""Consolidation (sleep time): when it runs and how older cards are matched with new ones."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ConsolidationSettings(BaseModel):
    """When a conversation's new cards are consolidated with older ones."""

    consolidate_tau: float = Field(0.8, description="Similarity for an older card to join a new card's update queue")
    consolidate_top_n: int = Field(10, ge=1, description="Most candidates in one card's update queue")
    sleep_idle_s: float = Field(600.0, gt=0, description="Consolidate a conversation once it has been idle this long")
    consolidate_every_s: float = Field(
        0.0, ge=0, description="Also consolidate every pending conversation on this schedule (0 = off)"
    )
    consolidate_parallel: int = Field(4, ge=1, description="Update queues decided at once (bounded worker pool)")
    consolidate_yield: float = Field(
        3.0,
        ge=0,
        description="While the worker ingests, a run pauses this many times "
        "as long as each chunk of queues took (0 = never gives way)",
    )
