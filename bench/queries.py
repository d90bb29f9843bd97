"""A bench's question for evidence only (no answer): as the query the engine runs in process (no
broker), or asked over Kafka."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, Protocol

from memstream.client import AsyncMemoryClient
from memstream.schemas import Query, Reply

TENANT = "bench"


class Asked(Protocol):
    """A bench's question (``cases.BenchQuestion``, ``retrieval.Question``)."""

    @property
    def conversation_id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def asked_at(self) -> datetime: ...


def bench_query(q: Asked, *, reply_topic: str, sent_at: datetime | None = None, **fields: Any) -> Query:
    """``q`` as a query of the bench tenant, sent now (or at ``sent_at``); ``fields``: k, profile, max_tokens."""
    return Query(
        tenant_id=TENANT,
        conversation_id=q.conversation_id,
        correlation_id=uuid.uuid4().hex,
        reply_topic=reply_topic,
        question=q.text,
        question_time=q.asked_at,
        answer=False,
        sent_at=sent_at or datetime.now(timezone.utc),
        **fields,
    )


async def ask_for_evidence(client: AsyncMemoryClient, q: Asked, timeout_s: float, **options: Any) -> Reply:
    """``q`` over Kafka as the bench tenant, for evidence only (no answer); ``options``: k, raise_on_error."""
    return await client.ask(
        q.text,
        tenant_id=TENANT,
        conversation_id=q.conversation_id,
        answer=False,
        question_time=q.asked_at,
        timeout_s=timeout_s,
        **options,
    )
