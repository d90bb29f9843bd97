"""Stage 6 (first form): build each new card's update queue by ANN search.

For a new card, older cards of the same tenant, conversation and subject whose similarity is at
least tau join its queue (top n). Cost is one search per card: O(N·k), never O(N²). Decisions
(keep / merge / supersede / duplicate) come with the consolidation issue; this records the queues.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Sequence

from memstream.ports import StoreFilter, VectorStore
from schemas import Card, ConsolidationCandidate, ConsolidationUpdate

from .ids import stable_id
from .index import CARDS


def update_queue(
    store: VectorStore,
    tenant_id: str,
    conversation_id: str,
    card: Card,
    vector: Sequence[float],
    *,
    tau: float,
    top_n: int,
) -> ConsolidationUpdate:
    where = StoreFilter(equals={"conversation_id": conversation_id, "subject": card.subject})
    hits = store.search(CARDS, tenant_id, vector, where=where, limit=top_n + 1)
    card_ts = card.event_time.timestamp() if card.event_time else None
    candidates = [
        ConsolidationCandidate(card_id=h.id, score=round(h.score, 5))
        for h in hits
        if h.id != card.card_id
        and h.score >= tau
        # only a newer card updates an older one
        and (card_ts is None or h.payload.get("event_ts") is None or h.payload["event_ts"] <= card_ts)
    ][:top_n]
    return ConsolidationUpdate(
        tenant_id=tenant_id,
        conversation_id=conversation_id,
        update_id=stable_id("queue", tenant_id, conversation_id, card.card_id),
        action="candidates",
        card_id=card.card_id,
        subject=card.subject,
        candidates=candidates,
        decided_at=datetime.now(timezone.utc),
    )
