"""Reads on ``memory.queries`` and their replies on ``memory.replies``: what memory holds, not an
answer (the inspector's pages, and ``memstream export`` beside running workers). The query stage
answers them from the store, so nothing but the store group opens it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from .base import ID_PATTERN, Payload, ScopeKeyed, UtcDatetime
from .query import TOPIC_PATTERN

# conversations: the tenant's conversations with counts; timeline: a page of a conversation's turns
# with the scenes, cards (every version) and profile items citing them; lineage: one memory, its
# versions, what it merged and the turns it came from; export: a page of every record of a scope.
ReadKind = Literal["conversations", "timeline", "lineage", "export"]
NEEDS_CONVERSATION: frozenset[str] = frozenset({"timeline"})
MAX_PAGE = 5000


class ReadRequest(ScopeKeyed):
    kind: Literal["read"] = "read"
    read: ReadKind
    tenant_id: str = Field(pattern=ID_PATTERN)
    conversation_id: str | None = Field(None, pattern=ID_PATTERN)
    point_id: str | None = Field(None, pattern=ID_PATTERN, description="The memory a lineage read is about")
    cursor: int | None = Field(
        None,
        description="timeline: the first turn seq (imported history is numbered below 0); export: the first record; "
        "none: from the start",
    )
    limit: int = Field(500, ge=1, le=MAX_PAGE, description="timeline: turns; export: records")
    correlation_id: str = Field(pattern=ID_PATTERN)
    reply_topic: str = Field(pattern=TOPIC_PATTERN)
    sent_at: UtcDatetime

    @model_validator(mode="after")
    def _scope(self) -> ReadRequest:
        if self.read in NEEDS_CONVERSATION and not self.conversation_id:
            raise ValueError(f"a {self.read} read needs conversation_id")
        if self.read == "lineage" and not self.point_id:
            raise ValueError("a lineage read needs point_id")
        if self.read == "export" and self.cursor is not None and self.cursor < 0:
            raise ValueError("an export cursor counts records: it is not below 0")
        return self


class ReadReply(Payload):
    kind: Literal["read_reply"] = "read_reply"
    read: ReadKind
    tenant_id: str = Field(pattern=ID_PATTERN)
    conversation_id: str | None = Field(None, pattern=ID_PATTERN)
    correlation_id: str
    ok: bool = True
    error: str | None = None
    found: bool = Field(True, description="False: nothing of this tenant by that id (a page reads 404)")
    records: list[dict[str, Any]] = Field(
        default_factory=list, description="Store records as exported: {collection, id, **payload}; per read"
    )
    summary: dict[str, Any] = Field(default_factory=dict, description="Counts and positions of the read")
    next_cursor: int | None = Field(None, description="Where the next page starts; None: this was the last")
    replied_at: UtcDatetime
