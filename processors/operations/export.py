"""Data portability: every memory of a tenant (or one conversation) as plain records, with its
provenance (source turn ids) and its versions (version, validity, successor, lineage, support)."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from memstream.ports import StoreFilter, VectorStore
from memstream.processors.write.index import CARDS, PROFILES, SCENES, TRIGGERS, TURNS

# Raw turns first (what everything else cites), then what was derived from them.
EXPORT_ORDER = (TURNS, CARDS, SCENES, PROFILES, TRIGGERS)


def export_records(
    store: VectorStore,
    tenant_id: str,
    conversation_id: str | None = None,
    collections: Sequence[str] = EXPORT_ORDER,
) -> Iterator[dict[str, Any]]:
    """One record per stored point of the scope: ``{"collection", "id", **payload}`` (the payload
    holds the tenant, conversation, text, ``turn_ids`` and, for cards, the version fields)."""
    where = StoreFilter(equals={"conversation_id": conversation_id}) if conversation_id else None
    for collection in collections:
        n = store.count(collection, tenant_id, where=where)
        if not n:
            continue
        hits = store.scroll(collection, tenant_id, where=where, limit=n + 1)
        for hit in sorted(hits, key=lambda h: (h.payload.get("conversation_id", ""), _order(h.payload), h.id)):
            yield {"collection": collection, "id": hit.id, **hit.payload}


def _order(payload: dict[str, Any] | Any) -> float:
    seq = payload.get("seq")
    if isinstance(seq, (int, float)):
        return float(seq)
    ts = payload.get("event_ts")
    return float(ts) if isinstance(ts, (int, float)) else 0.0
