"""Queries on ``memory.queries`` and replies on ``memory.replies`` (request/reply by correlation id)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr

from .base import ID_PATTERN, TenantScoped, UtcDatetime
from .memory import CardType, Part, StageCost

AccessProfile = Literal["lookup", "compose", "replay"]
Operation = Literal["lookup", "aggregate", "temporal_select", "sort", "compare"]
# "fresh": a raw turn not yet in any card (written ahead of its flush), found by its own search.
FoundBy = Literal["dense", "sparse", "trigger", "cascade", "replay", "profile", "research", "graph", "fresh"]

TOPIC_PATTERN = r"^[A-Za-z0-9._\-]{1,200}$"


class Query(TenantScoped):
    kind: Literal["query"] = "query"
    correlation_id: str = Field(pattern=ID_PATTERN)
    reply_topic: str = Field(pattern=TOPIC_PATTERN)
    question: str = Field(min_length=1, max_length=4000)
    question_time: UtcDatetime | None = Field(None, description="Anchor for relative phrases; default now")
    profile: AccessProfile | Literal["auto"] = "auto"
    k: int | None = Field(None, ge=1, le=100)
    max_tokens: int | None = Field(
        None, ge=1, le=32_000, description="Most evidence tokens the asker wants (the adaptive policy's budget)"
    )
    answer: bool = Field(True, description="False = evidence only, no answer call")
    sent_at: UtcDatetime
    deadline: UtcDatetime | None = Field(
        None,
        description="When the asker stops waiting: the answer call is cut to fit, and a query that "
        "arrives after it gets an error reply at once (clocks of asker and worker in sync)",
    )


class Plan(Part):
    planner: Literal["llm", "rules"]
    entities: list[str] = Field(default_factory=list)
    participants: Literal["user", "assistant", "both", "ambiguous"] = "ambiguous"
    time_from: UtcDatetime | None = None
    time_to: UtcDatetime | None = None
    operation: Operation = "lookup"
    distributed: bool = False
    fidelity: bool = False
    rewrites: list[str] = Field(default_factory=list, max_length=2)
    history: bool = Field(False, description="About the past: superseded versions are evidence too")
    rounds: int = Field(1, ge=1, description="Retrieval rounds (more than one: the research loop ran)")
    profile: AccessProfile


class Evidence(Part):
    evidence_id: str = Field(description="Short id the answer cites, e.g. E1")
    kind: Literal["card", "scene", "turn", "profile"]
    point_id: str
    text: str
    subject: str | None = None
    type: CardType | None = None
    event_time: UtcDatetime | None = None
    turn_ids: list[str] = Field(default_factory=list)
    session_ids: list[str] = Field(default_factory=list)
    score: float
    found_by: list[FoundBy]


class Reply(TenantScoped):
    kind: Literal["reply"] = "reply"
    correlation_id: str
    ok: bool = True
    error: str | None = None
    answer: str | None = None
    answer_mode: Literal["llm", "evidence_only"] = "evidence_only"
    answer_error: str | None = Field(
        None, description="Why an answer was asked for and not given (the LLM failed, or the deadline left no time)"
    )
    evidence: list[Evidence] = Field(default_factory=list)
    plan: Plan | None = None
    access_profile: AccessProfile | None = None
    profile_text: str | None = None
    context_tokens: int = 0
    costs: list[StageCost] = Field(default_factory=list)
    latency_ms: dict[str, float] = Field(default_factory=dict)
    replied_at: UtcDatetime
    # Not in the payload: the trace id its record's traceparent header carries (memstream.client
    # reads it; tracing on), so an asker can quote the trace of its question.
    _trace_id: str | None = PrivateAttr(default=None)

    @property
    def trace_id(self) -> str | None:
        return self._trace_id
