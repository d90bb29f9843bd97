"""Stage 6: sleep-time consolidation of a conversation's new cards (LightMem's update, done better).

For each new card, an ANN search finds the current cards of the same tenant, conversation and
subject with similarity ≥ τ (top n): its update queue. One search per card, so O(N·k), never
O(N²). Each pair is oriented by time, so only a newer card updates an older one, whichever arrived
first. One decision call per queue (or the rules of :mod:`processors.versioning`) gives keep_both /
duplicate / merge / supersede per pair, which become commutative payload patches: nothing is deleted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, Mapping, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, Field

from memstream.ports import LLM, Embedder, StoreFilter, StoreHit, StorePoint, VectorStore
from memstream.processors.consolidation import prompts
from memstream.processors.consolidation.versioning import (
    ACTIONS,
    Action,
    CardView,
    NewCard,
    apply_patches,
    changed_fields,
    oriented,
    patches_for,
    rule_decision,
)
from memstream.processors.ids import stable_id
from memstream.processors.structured import StructuredCall, chat
from memstream.processors.write.index import CARDS, card_spec
from memstream.schemas import (
    Card,
    CardPatch,
    ConsolidationCandidate,
    ConsolidationUpdate,
    PairDecision,
    Provenance,
    StageCost,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConsolidateParams:
    tau: float = 0.8
    top_n: int = 10
    duplicate_similarity: float = 0.95


@dataclass(frozen=True)
class Candidate:
    card: CardView
    payload: Mapping[str, Any]
    similarity: float


def current_as_of(conversation_id: str, as_of: float, **equals: str) -> StoreFilter:
    """Cards that were current when a run began: not retired by an earlier run, and not created by
    this one (a merge). What this run itself retires stays in its queues, so the run decides the
    same whether it runs once or is redone after a crash that had applied part of it."""
    return StoreFilter(
        equals={"conversation_id": conversation_id, **equals},
        not_range_ts={"retired_ts": (None, as_of - 1e-3), "created_ts": (as_of, None)},
    )


def update_queue(
    store: VectorStore,
    tenant_id: str,
    conversation_id: str,
    card: CardView,
    vector: Sequence[float],
    params: ConsolidateParams,
    *,
    as_of: float,
) -> list[Candidate]:
    """The card's queue: similar cards of its subject current as of the run's start, in time order."""
    hits = store.search(
        CARDS,
        tenant_id,
        vector,
        where=current_as_of(conversation_id, as_of, subject=card.subject),
        limit=params.top_n + 1,
    )
    queue = [
        Candidate(CardView.from_payload(h.id, h.payload), h.payload, round(h.score, 5))
        for h in hits
        if h.id != card.card_id and h.score >= params.tau
    ][: params.top_n]
    return sorted(queue, key=lambda c: c.card.order)


class Decider(Protocol):
    def decide(
        self, card: CardView, queue: Sequence[Candidate]
    ) -> tuple[list[PairDecision], dict[str, str], StageCost | None]:
        """Per pair a decision; merged texts keyed "<older id>|<newer id>"; what the LLM cost (None without one)."""
        ...


class RuleDecider:
    def __init__(self, params: ConsolidateParams):
        self.params = params

    def decide(
        self, card: CardView, queue: Sequence[Candidate]
    ) -> tuple[list[PairDecision], dict[str, str], StageCost | None]:
        return [self.rule(card, c) for c in queue], {}, None

    def rule(self, card: CardView, c: Candidate) -> PairDecision:
        older, newer = oriented(card, c.card)
        action = rule_decision(older, newer, c.similarity, duplicate_similarity=self.params.duplicate_similarity)
        return pair_decision(older, newer, c, action, "rules")


def pair_decision(
    older: CardView, newer: CardView, c: Candidate, action: Action, decided_by: Literal["llm", "rules"]
) -> PairDecision:
    return PairDecision(
        older_card_id=older.card_id,
        newer_card_id=newer.card_id,
        similarity=c.similarity,
        action=action,
        decided_by=decided_by,
    )


class _LlmChoice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    candidate: str
    action: str
    merged: str = ""


class _LlmDecisions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    decisions: list[_LlmChoice] = Field(default_factory=list)


class DecisionsInvalid(ValueError):
    """The LLM's consolidation output could not be used."""


_DECIDE = StructuredCall("consolidate", "consolidation", _LlmDecisions, DecisionsInvalid)


class LlmDecider:
    """One JSON-schema call per queue; invalid output gets one repair, then the rules decide."""

    def __init__(self, llm: LLM, params: ConsolidateParams, *, max_tokens: int = 512, stable_schema: bool = True):
        self.llm = llm
        self.rules = RuleDecider(params)
        self.max_tokens = max_tokens
        # the schema's labels: always C1..C{top_n} (the same schema every call, for prompt caches), or this queue's
        self.schema_labels_up_to = params.top_n if stable_schema else None

    def decide(
        self, card: CardView, queue: Sequence[Candidate]
    ) -> tuple[list[PairDecision], dict[str, str], StageCost | None]:
        if not queue:
            return [], {}, None
        labels = prompts.consolidate_labels(len(queue))
        user = prompts.consolidate_user(card, [(lab, c.card) for lab, c in zip(labels, queue)])
        schema = prompts.consolidate_schema(
            prompts.consolidate_labels(len(queue), self.schema_labels_up_to), list(ACTIONS)
        )
        attempt = _DECIDE.ask(
            self.llm, chat(prompts.CONSOLIDATE_SYSTEM, user), schema, max_tokens=self.max_tokens, read=_DECIDE.parse
        )
        if attempt.value is None:
            log.warning("consolidation of %s fell back to the rules: %s", card.card_id, attempt.error)
            decisions, _, _ = self.rules.decide(card, queue)
            return decisions, {}, attempt.cost
        chosen = {d.candidate: d for d in attempt.value.decisions if d.candidate in labels and d.action in ACTIONS}
        decisions, merged = [], {}
        for label, c in zip(labels, queue):
            d = chosen.get(label)
            if d is None:  # skipped by the model: the rules decide this pair
                decisions.append(self.rules.rule(card, c))
                continue
            older, newer = oriented(card, c.card)
            decisions.append(pair_decision(older, newer, c, d.action, "llm"))  # type: ignore[arg-type]  # in ACTIONS
            if d.action == "merge" and d.merged.strip():
                merged[f"{older.card_id}|{newer.card_id}"] = d.merged.strip()
        return decisions, merged, attempt.cost


def consolidate_card(
    store: VectorStore,
    decider: Decider,
    tenant_id: str,
    conversation_id: str,
    hit: StoreHit,
    params: ConsolidateParams,
    *,
    as_of: datetime,
) -> ConsolidationUpdate | None:
    """One queue of the run that began at ``as_of``: build it, decide, turn decisions into patches
    (and merged cards). None if empty."""
    card = CardView.from_payload(hit.id, hit.payload)
    if hit.vector is None:
        raise ValueError("consolidation needs the card's stored vector (scroll with_vectors=True)")
    queue = update_queue(store, tenant_id, conversation_id, card, hit.vector, params, as_of=as_of.timestamp())
    if not queue:
        return None
    decisions, merged_texts, cost = decider.decide(card, queue)
    payloads = {hit.id: hit.payload, **{c.card.card_id: c.payload for c in queue}}
    views = {card.card_id: card, **{c.card.card_id: c.card for c in queue}}
    patches, merged_cards = [], []
    for d in decisions:
        found, new_cards = patches_for(
            d.action,
            views[d.older_card_id],
            views[d.newer_card_id],
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            merged_text=merged_texts.get(f"{d.older_card_id}|{d.newer_card_id}"),
        )
        patches += found
        merged_cards += [merged_card(n, payloads[d.older_card_id], payloads[d.newer_card_id]) for n in new_cards]
    written = hit.payload.get("valid_from")
    return ConsolidationUpdate(
        tenant_id=tenant_id,
        conversation_id=conversation_id,
        update_id=stable_id("queue", tenant_id, conversation_id, card.card_id, *sorted(c.card.card_id for c in queue)),
        card_id=card.card_id,
        subject=card.subject,
        candidates=[ConsolidationCandidate(card_id=c.card.card_id, score=c.similarity) for c in queue],
        decisions=decisions,
        patches=patches,
        merged_cards=merged_cards,
        costs=[cost] if cost is not None else [],
        written_at=datetime.fromisoformat(written) if written else None,
        decided_at=datetime.now(timezone.utc),
        as_of=as_of,
    )


def merged_card(new: NewCard, older: Mapping[str, Any], newer: Mapping[str, Any]) -> Card:
    """The card a merge creates: provenance of both, the newer card's time and type, lineage to both."""
    turn_ids = list(dict.fromkeys([*older.get("turn_ids", []), *newer.get("turn_ids", [])]))
    sessions = list(dict.fromkeys([*older.get("session_ids", []), *newer.get("session_ids", [])]))
    event_time = newer.get("event_time")
    return Card(
        card_id=new.card_id,
        subject=new.subject,
        type=new.type,
        content=new.text,  # type: ignore[arg-type]
        event_time=datetime.fromisoformat(event_time) if event_time else None,
        provenance=Provenance(turn_ids=turn_ids, scene_id=newer.get("scene_id"), session_ids=sessions),
        entity_triggers=list(dict.fromkeys([*older.get("entity_triggers", []), *newer.get("entity_triggers", [])])),
        speaker=newer.get("speaker"),
        valid_from=datetime.fromisoformat(newer["valid_from"]),
        version=max(int(older.get("version", 1)), int(newer.get("version", 1))) + 1,
    )


def refers_to_erased_cards(store: VectorStore, update: ConsolidationUpdate) -> bool:
    """The update names a card that is no longer stored (a forget erased it after the update was
    decided): applying it would write back a merged card of forgotten turns or point at nothing."""
    created = {c.card_id for c in update.merged_cards}
    named = {update.card_id, *(c.card_id for c in update.candidates)}
    for d in update.decisions:
        named |= {d.older_card_id, d.newer_card_id}
    for p in update.patches:
        named |= {p.card_id, *(x for x in (p.superseded_by, p.duplicate_of) if x), *p.support, *p.lineage}
    named -= created
    if not named:
        return False
    where = StoreFilter(equals={"conversation_id": update.conversation_id}, any_of={"card_id": sorted(named)})
    return store.count(CARDS, update.tenant_id, where=where) < len(named)


def apply_update(store: VectorStore, embedder: Embedder, update: ConsolidationUpdate) -> int:
    """Apply one queue's outcome to the store: insert merged cards, then patch payloads. Idempotent
    (patches combine commutatively), so a redelivered or replayed update changes nothing more.
    Returns how many cards changed."""
    run_ts = update.as_of.timestamp() if update.as_of is not None else None
    if update.merged_cards:
        base = {
            "tenant_id": update.tenant_id,
            "conversation_id": update.conversation_id,
            "write_id": update.update_id,
            "created_ts": run_ts,
        }
        specs = [card_spec(base, c, "user") for c in update.merged_cards]
        vectors = embedder.embed([p.text for p in specs])
        store.upsert(CARDS, [StorePoint(p.id, v, p.payload, p.text) for p, v in zip(specs, vectors)])
    by_card: dict[str, list[CardPatch]] = {}
    for patch in update.patches:
        by_card.setdefault(patch.card_id, []).append(patch)
    if not by_card:
        return 0
    stored = store.scroll(
        CARDS,
        update.tenant_id,
        where=StoreFilter(equals={"conversation_id": update.conversation_id}, any_of={"card_id": list(by_card)}),
        limit=len(by_card) + 1,
    )
    changed = 0
    for hit in stored:
        fields = changed_fields(hit.payload, apply_patches(hit.payload, by_card[hit.id], run_ts=run_ts))
        if fields:
            changed += store.set_payload(CARDS, update.tenant_id, hit.id, fields)
    return changed


__all__ = [
    "ConsolidateParams",
    "apply_update",
    "refers_to_erased_cards",
    "Candidate",
    "current_as_of",
    "update_queue",
    "Decider",
    "RuleDecider",
    "LlmDecider",
    "consolidate_card",
    "merged_card",
]
