"""Forgetting: the request on ``memory.control``, the marker that carries it through the pipeline,
the reply on ``memory.replies`` and the content-free audit record on ``memory.audit``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import ID_PATTERN, Payload, ScopeKeyed, UtcDatetime
from .memory import Part
from .query import TOPIC_PATTERN

# Where a forget is on its way: sent by a client (on control), travelling with the turns through
# every ingest topic, then back on control once the store has erased it.
ForgetPhase = Literal["request", "pipeline", "erased"]


class Forget(ScopeKeyed):
    """Forget what a tenant's turns said: every turn of the scope whose event time is not after
    ``requested_at``, and everything derived from one of them.

    The scope is the tenant, narrowed by a conversation, a speaker and/or a list of turn ids (turn
    ids are unique within a conversation, so they need one). A request for a whole tenant (or a
    speaker across conversations) is sent to every partition; each copy is one ``part``.
    """

    kind: Literal["forget"] = "forget"
    forget_id: str = Field(pattern=ID_PATTERN)
    tenant_id: str = Field(pattern=ID_PATTERN)
    conversation_id: str | None = Field(None, pattern=ID_PATTERN)
    speaker: str | None = Field(None, min_length=1, max_length=200)
    turn_ids: list[str] = Field(default_factory=list, max_length=10_000)
    requested_at: UtcDatetime
    reply_topic: str = Field(pattern=TOPIC_PATTERN)
    part: int = Field(0, ge=0, description="The partition this copy travels on")
    parts: int = Field(1, ge=1, description="How many copies were sent (one reply each)")
    phase: ForgetPhase = "request"
    counts: dict[str, int] = Field(
        default_factory=dict, description="What each stage removed so far: '<where>:<name>' -> items"
    )

    @model_validator(mode="after")
    def _turns_need_a_conversation(self) -> Forget:
        if self.turn_ids and not self.conversation_id:
            raise ValueError("turn ids are unique within a conversation: give conversation_id too")
        for turn_id in self.turn_ids:
            if not isinstance(turn_id, str) or len(turn_id) > 128:
                raise ValueError("a turn id is a string of at most 128 characters")
        return self


class RetainedCopy(Part):
    """Raw text that stays in a topic (Kafka deletes records only by retention) until ``until``."""

    topic: str
    until: UtcDatetime


class ForgetReply(Payload):
    """One part's outcome: what it removed from the store and the tables, and what only retention
    removes later. A client sums the ``parts`` replies of one ``forget_id``."""

    kind: Literal["forget_reply"] = "forget_reply"
    forget_id: str
    tenant_id: str = Field(pattern=ID_PATTERN)
    part: int
    parts: int
    counts: dict[str, int] = Field(default_factory=dict)
    retained: list[RetainedCopy] = Field(default_factory=list)
    done_at: UtcDatetime


class ForgetAudit(Payload):
    """On the compacted ``memory.audit`` (key ``<forget_id>/<part>``): that a forget happened, its
    scope by kind only (no speaker name, no turn ids, no text) and its counts."""

    kind: Literal["forget_audit"] = "forget_audit"
    forget_id: str
    tenant_id: str = Field(pattern=ID_PATTERN)
    conversation_id: str | None = None
    by_speaker: bool = False
    turn_ids_given: int = 0
    part: int
    parts: int
    counts: dict[str, int] = Field(default_factory=dict)
    requested_at: UtcDatetime
    done_at: UtcDatetime
