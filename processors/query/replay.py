"""The Replay profile's last step: from the evidence, follow provenance to the raw source turns and
the turns around them, source turns first, within a token cap (raw turns are longer than the cards)."""

from __future__ import annotations

from typing import Sequence

from memstream.ports import StoreFilter, VectorStore
from memstream.processors.query.retrieve import Scope
from memstream.processors.tokens import count_tokens
from memstream.processors.write.index import TURNS
from memstream.schemas import Evidence


def cap_to_budget(texts: Sequence[str], max_tokens: int) -> int:
    """How many of ``texts``, in order, fit in ``max_tokens`` (at least one)."""
    used = 0
    for i, text in enumerate(texts):
        used += count_tokens(text)
        if used > max_tokens and i > 0:
            return i
    return len(texts)


def replay_window(sources: Sequence[int], window: int) -> list[int]:
    """Conversation positions to replay: each source turn's position ± ``window``."""
    return sorted({s + d for s in sources for d in range(-window, window + 1) if s + d >= 0})


def replay(store: VectorStore, scope: Scope, evidence: list[Evidence], window: int, max_tokens: int) -> list[Evidence]:
    """The raw turns the evidence cites (± ``window`` positions), source turns first, capped at
    ``max_tokens``."""
    turn_ids: list[str] = []
    for e in evidence:
        turn_ids += [t for t in e.turn_ids if t not in turn_ids]
    sources = store.scroll(TURNS, scope.tenant_id, where=scope.conversation(turn_id=turn_ids), limit=len(turn_ids) + 1)
    # A fresh turn numbered by no producer has no position: it opens no window.
    positions = [int(h.payload["seq"]) for h in sources if "seq" in h.payload]
    wanted = replay_window(positions, window)
    around = store.scroll(
        TURNS,
        scope.tenant_id,
        where=StoreFilter(equals={"conversation_id": scope.conversation_id}, any_of={"seq": wanted}),
        limit=len(wanted) * 4 + 1,
    )
    order = {tid: i for i, tid in enumerate(turn_ids)}
    around.sort(key=lambda h: (h.payload["turn_id"] not in order, order.get(h.payload["turn_id"], 0), h.payload["seq"]))
    texts = [f"{h.payload['speaker']}: {h.payload['text']}" for h in around]
    keep = cap_to_budget(texts, max_tokens)
    return [
        Evidence(
            evidence_id=f"R{i + 1}",
            kind="turn",
            point_id=h.id,
            text=texts[i],
            subject=h.payload.get("speaker"),
            event_time=h.payload.get("event_time"),
            turn_ids=[h.payload["turn_id"]],
            session_ids=[h.payload.get("session_id", "")],
            score=1.0 if h.payload["turn_id"] in order else 0.5,
            found_by=["replay"],
        )
        for i, h in enumerate(around[:keep])
    ]


__all__ = ["cap_to_budget", "replay", "replay_window"]
