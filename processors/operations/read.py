"""Reads of what memory holds (the inspector's pages, export beside running workers): a tenant's
conversations, a page of one conversation's timeline, one memory's lineage, a page of an export.

The page logic is pure over exported records; ``ReadEngine`` only fetches them from the store, always
with the asker's tenant, so no read can reach another tenant's points."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import islice
from typing import Any, Iterable, Sequence

from memstream.ports import StoreFilter, VectorStore
from memstream.processors.operations.export import EXPORT_ORDER, export_records
from memstream.processors.write.index import CARDS, PROFILES, SCENES, TURNS
from memstream.schemas.read import ReadReply, ReadRequest

Record = dict[str, Any]
TIMELINE = (TURNS, SCENES, CARDS, PROFILES)  # triggers are the index's, not something to inspect
# Card fields naming other cards: a version's successor, a repeat's original, a merge's parts, support.
CARD_LINKS = ("superseded_by", "duplicate_of", "lineage", "support")


@dataclass
class Page:
    records: list[Record] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    next_cursor: int | None = None
    found: bool = True


def _seq(record: Record) -> int:
    return int(record["seq"]) if _numbered(record) else 0


def _numbered(turn: Record) -> bool:
    """The turn has its position (``seq``): all but a fresh turn its producer did not number, which
    gets one from the segment stage, and in the store with its flush's write."""
    seq = turn.get("seq")
    return isinstance(seq, (int, float)) and not isinstance(seq, bool)


def _position(turn: Record) -> tuple[int, float]:
    """Turns in conversation order: by position, then those without one (the newest) by time."""
    return (0, float(turn["seq"])) if _numbered(turn) else (1, float(turn.get("event_ts") or 0.0))


def conversation_summaries(turns: Iterable[Record], scenes: Iterable[Record], cards: dict[str, int]) -> list[Record]:
    """One line per conversation: turns, cards, scenes, the last turn, and the turns no scene holds
    yet (still in the window or the STM buffer: the ingest lag in turns). Newest activity first."""
    by_conv: dict[str, list[Record]] = defaultdict(list)
    for t in turns:
        by_conv[str(t.get("conversation_id", ""))].append(t)
    settled: dict[str, set[str]] = defaultdict(set)
    scene_count: dict[str, int] = defaultdict(int)
    for s in scenes:
        conv = str(s.get("conversation_id", ""))
        settled[conv].update(s.get("turn_ids") or [])
        scene_count[conv] += 1
    out = []
    for conv in set(by_conv) | set(cards):
        conv_turns = by_conv.get(conv, [])
        last = max(conv_turns, key=lambda t: (t.get("event_ts") or 0.0, _seq(t)), default=None)
        out.append(
            {
                "conversation_id": conv,
                "turns": len(conv_turns),
                "cards": cards.get(conv, 0),
                "scenes": scene_count.get(conv, 0),
                "speakers": sorted({str(t.get("speaker")) for t in conv_turns if t.get("speaker")}),
                "last_turn_id": last.get("turn_id") if last else None,
                "last_event_time": last.get("event_time") if last else None,
                "waiting_turns": sum(1 for t in conv_turns if t.get("turn_id") not in settled.get(conv, set())),
            }
        )
    return sorted(out, key=lambda c: (str(c["last_event_time"] or ""), c["conversation_id"]), reverse=True)


def timeline_page(records: Sequence[Record], cursor: int | None, limit: int) -> Page:
    """The turns with ``seq >= cursor`` (None: from the first; at most ``limit``, in order) and every
    scene, card version and profile item citing one of them; the summary counts the whole conversation. Turns not
    numbered yet (fresh, ahead of their flush) are the newest: on the last page, after the others."""
    turns = sorted((r for r in records if r["collection"] == TURNS), key=_position)
    later = [t for t in turns if _numbered(t) and (cursor is None or _seq(t) >= cursor)]
    more = len(later) > limit
    page = later[:limit] if more else later + [t for t in turns if not _numbered(t)][:limit]
    ids = {t.get("turn_id") for t in page}
    derived = [r for r in records if r["collection"] != TURNS and ids.intersection(r.get("turn_ids") or ())]
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        counts[r["collection"]] += 1
    summary = {
        "turns": counts[TURNS],
        "cards": counts[CARDS],
        "current_cards": sum(1 for r in records if r["collection"] == CARDS and _current(r)),
        "scenes": counts[SCENES],
        "profiles": counts[PROFILES],
        "sessions": sorted({str(t.get("session_id")) for t in turns if t.get("session_id")}),
        "speakers": sorted({str(t.get("speaker")) for t in turns if t.get("speaker")}),
        "first_seq": min((_seq(t) for t in turns if _numbered(t)), default=None),
        "last_seq": max((_seq(t) for t in turns if _numbered(t)), default=None),
    }
    return Page(page + derived, summary, _seq(later[limit]) if more else None, found=bool(records))


def _current(card: Record) -> bool:
    return not card.get("superseded_by") and not card.get("duplicate_of") and not card.get("valid_to")


def _links(card: Record) -> set[str]:
    out: set[str] = set()
    for name in CARD_LINKS:
        value = card.get(name)
        if isinstance(value, str) and value:
            out.add(value)
        elif isinstance(value, list):
            out.update(v for v in value if isinstance(v, str))
    return out


def lineage(cards: Sequence[Record], turns: Sequence[Record], point_id: str) -> Page:
    """The memory ``point_id`` with every card version linked to it (successors, predecessors, merge
    parts, repeats, support: followed both ways), oldest first, and the turns they came from."""
    by_id = {c["id"]: c for c in cards}
    if point_id not in by_id:
        return Page(found=False)
    linked_to: dict[str, set[str]] = defaultdict(set)
    for c in cards:
        for other in _links(c):
            linked_to[c["id"]].add(other)
            linked_to[other].add(c["id"])
    seen, todo = {point_id}, [point_id]
    while todo:
        for other in linked_to[todo.pop()]:
            if other in by_id and other not in seen:
                seen.add(other)
                todo.append(other)
    versions = sorted((by_id[i] for i in seen), key=lambda c: (str(c.get("valid_from") or ""), c.get("version", 1)))
    cited = {tid for c in versions for tid in c.get("turn_ids") or ()}
    sources = sorted((t for t in turns if t.get("turn_id") in cited), key=_seq)
    summary = {
        "point_id": point_id,
        "versions": len(versions),
        "current": [c["id"] for c in versions if _current(c)],
        "turns": len(sources),
    }
    return Page(versions + sources, summary)


class ReadEngine:
    """Fetches what a read needs from the store, scoped by the asker's tenant."""

    def __init__(self, store: VectorStore):
        self.store = store

    def _all(self, collection: str, tenant_id: str, where: StoreFilter | None = None) -> list[Record]:
        n = self.store.count(collection, tenant_id, where=where)
        if not n:
            return []
        hits = self.store.scroll(collection, tenant_id, where=where, limit=n + 1)
        return [{"collection": collection, "id": h.id, **h.payload} for h in hits]

    def conversations(self, tenant_id: str) -> Page:
        turns, scenes = self._all(TURNS, tenant_id), self._all(SCENES, tenant_id)
        convs = {str(r.get("conversation_id")) for r in turns}
        cards = {c: self.store.count(CARDS, tenant_id, where=StoreFilter(equals={"conversation_id": c})) for c in convs}
        rows = conversation_summaries(turns, scenes, cards)
        return Page(rows, {"conversations": len(rows)})

    def timeline(self, tenant_id: str, conversation_id: str, cursor: int | None, limit: int) -> Page:
        return timeline_page(list(export_records(self.store, tenant_id, conversation_id, TIMELINE)), cursor, limit)

    def lineage(self, tenant_id: str, point_id: str) -> Page:
        found = self._all(CARDS, tenant_id, StoreFilter(any_of={"card_id": [point_id]}))
        if not found:
            return Page(found=False)
        where = StoreFilter(equals={"conversation_id": str(found[0].get("conversation_id"))})
        return lineage(self._all(CARDS, tenant_id, where), self._all(TURNS, tenant_id, where), point_id)

    def export(self, tenant_id: str, conversation_id: str | None, cursor: int | None, limit: int) -> Page:
        cursor = cursor or 0
        records = list(
            islice(export_records(self.store, tenant_id, conversation_id, EXPORT_ORDER), cursor, cursor + limit + 1)
        )
        more = len(records) > limit
        return Page(records[:limit], {"records": len(records[:limit])}, cursor + limit if more else None)


def answer_read(engine: ReadEngine, request: ReadRequest) -> ReadReply:
    """The reply to a read: its page, or ``found=False`` for an id this tenant does not have."""
    if request.read == "conversations":
        page = engine.conversations(request.tenant_id)
    elif request.read == "timeline":
        assert request.conversation_id is not None  # the schema requires it
        page = engine.timeline(request.tenant_id, request.conversation_id, request.cursor, request.limit)
    elif request.read == "lineage":
        assert request.point_id is not None
        page = engine.lineage(request.tenant_id, request.point_id)
    else:
        page = engine.export(request.tenant_id, request.conversation_id, request.cursor, request.limit)
    return _reply(request, found=page.found, records=page.records, summary=page.summary, next_cursor=page.next_cursor)


def failed_read(request: ReadRequest, error: str) -> ReadReply:
    return _reply(request, ok=False, error=error)


def _reply(request: ReadRequest, **outcome: Any) -> ReadReply:
    """The reply to ``request`` (its read, tenant, conversation and correlation id), sent now."""
    return ReadReply(
        read=request.read,
        tenant_id=request.tenant_id,
        conversation_id=request.conversation_id,
        correlation_id=request.correlation_id,
        replied_at=datetime.now(timezone.utc),
        **outcome,
    )
