"""Forgetting a scope of turns and everything derived from them: which turns a forget covers, the
tombstones that drop such turns arriving later, scrubbing the sensory window and the STM buffer,
and erasing the store (raw turns, cards, scenes, triggers, profile items) with lineage repaired.

Pure apart from the store port: no Kafka here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping

from memstream.ports import StoreFilter, VectorStore
from memstream.processors.write.index import CARDS, PROFILES, SCENES, TRIGGERS, TURNS
from memstream.processors.write.segment import SegmenterState
from memstream.processors.write.stm import StmState
from memstream.schemas import Forget, Turn
from memstream.schemas.base import base_turn_id

# The collections whose points name their source turns in ``turn_ids`` (triggers name their host).
BY_TURNS = (CARDS, SCENES, PROFILES, TURNS)
# Card fields that point at another card: repaired when that card is erased.
SUCCESSOR_FIELDS = ("superseded_by", "duplicate_of")
PAGE = 1000


@dataclass(frozen=True)
class ForgetScope:
    """Which turns a forget covers: the tenant's, narrowed by conversation, speaker and turn ids,
    with an event time not after the request's time."""

    tenant_id: str
    conversation_id: str | None
    speaker: str | None
    turn_ids: frozenset[str]
    until: datetime

    @classmethod
    def of(cls, forget: Forget) -> ForgetScope:
        return cls(
            forget.tenant_id, forget.conversation_id, forget.speaker, frozenset(forget.turn_ids), forget.requested_at
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ForgetScope:
        return cls(
            data["tenant_id"],
            data.get("conversation_id"),
            data.get("speaker"),
            frozenset(data.get("turn_ids") or ()),
            datetime.fromisoformat(data["until"]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id,
            "conversation_id": self.conversation_id,
            "speaker": self.speaker,
            "turn_ids": sorted(self.turn_ids),
            "until": self.until.isoformat(),
        }

    def covers_conversation(self, tenant_id: str, conversation_id: str) -> bool:
        return tenant_id == self.tenant_id and self.conversation_id in (None, conversation_id)

    def covers(self, tenant_id: str, conversation_id: str, turn_id: str, speaker: str, event_time: datetime) -> bool:
        return (
            self.covers_conversation(tenant_id, conversation_id)
            and self.speaker in (None, speaker)
            and self.covers_turn_id(turn_id)
            and event_time <= self.until
        )

    def covers_turn_id(self, turn_id: str) -> bool:
        """Named by the scope (or no ids named); a chunk of a long turn goes with its turn."""
        return not self.turn_ids or turn_id in self.turn_ids or base_turn_id(turn_id) in self.turn_ids

    def covers_turn(self, turn: Turn) -> bool:
        return self.covers(turn.tenant_id, turn.conversation_id, turn.turn_id, turn.speaker, turn.event_time)

    def covers_turn_json(self, data: Mapping[str, Any]) -> bool:
        """A turn as a table keeps it (``Turn`` JSON)."""
        return self.covers_turn(Turn.model_validate(data))


# --- tombstones: turns of a forgotten scope that reach the pipeline after the forget ------------


def add_tombstone(
    entries: list[dict[str, Any]] | None, scope: ForgetScope, now: float, ttl_s: float
) -> list[dict[str, Any]]:
    """A tenant's tombstones with ``scope`` added (once, a redelivery renews it) and the expired
    ones left out. A tombstone lives as long as the topics keep records (``ttl_s``): no older copy
    of a covered turn can arrive after that."""
    kept = [e for e in entries or [] if e["expires_at"] > now and e["scope"] != scope.to_dict()]
    return [*kept, {"scope": scope.to_dict(), "expires_at": now + ttl_s}]


def live_tombstones(entries: list[dict[str, Any]] | None, now: float) -> list[ForgetScope]:
    return [ForgetScope.from_dict(e["scope"]) for e in entries or [] if e["expires_at"] > now]


def tombstoned(entries: list[dict[str, Any]] | None, turn: Turn, now: float) -> bool:
    """The turn belongs to a scope forgotten before it arrived."""
    return any(scope.covers_turn(turn) for scope in live_tombstones(entries, now))


# --- in-flight state ------------------------------------------------------------------------------


def scrub_window(state: SegmenterState, scope: ForgetScope) -> int:
    """Drop the covered turns from a sensory window (``pending`` holds ``CompressedTurn`` JSON)."""
    kept = [t for t in state.pending if not scope.covers_turn_json(t["turn"])]
    removed = len(state.pending) - len(kept)
    state.pending = kept
    return removed


def scrub_buffer(state: StmState, scope: ForgetScope) -> int:
    """Drop the covered turns from an STM buffer; its token count follows, empty topics go."""
    removed = 0
    groups = []
    for group in state.groups:
        kept = [t for t in group["turns"] if not scope.covers_turn_json(t["turn"])]
        removed += len(group["turns"]) - len(kept)
        if kept:
            groups.append({**group, "turns": kept})
    state.groups = groups
    state.tokens = sum(int(t.get("tokens_out", 0)) for g in groups for t in g["turns"])
    return removed


# --- the store ------------------------------------------------------------------------------------


def _scroll_all(store: VectorStore, collection: str, tenant_id: str, where: StoreFilter) -> list[Any]:
    # One call with a high limit: the embedded stores page internally; the count bounds it.
    limit = max(PAGE, store.count(collection, tenant_id, where=where) + 1)
    return store.scroll(collection, tenant_id, where=where, limit=limit)


def forgotten_turns(store: VectorStore, scope: ForgetScope) -> dict[str, set[str]]:
    """Conversation -> the turn ids of the scope the store holds (raw-turn points)."""
    equals: dict[str, str | int | bool] = {}
    if scope.conversation_id:
        equals["conversation_id"] = scope.conversation_id
    if scope.speaker:
        equals["speaker"] = scope.speaker
    where = StoreFilter(equals=equals, range_ts={"event_ts": (None, scope.until.timestamp())})
    out: dict[str, set[str]] = {}
    for hit in _scroll_all(store, TURNS, scope.tenant_id, where):
        if scope.covers_turn_id(hit.payload["turn_id"]):  # in Python: chunk ids extend the named ones
            out.setdefault(hit.payload["conversation_id"], set()).add(hit.payload["turn_id"])
    return out


def erase(store: VectorStore, scope: ForgetScope) -> dict[str, int]:
    """Delete every point derived from a covered turn, then the triggers of deleted cards and
    scenes, then repair the cards that pointed at a deleted card. Returns the points deleted
    (``store:<collection>``) and the cards repaired (``store:repaired``)."""
    turns = forgotten_turns(store, scope)
    counts: dict[str, int] = {f"store:{c}": 0 for c in (*BY_TURNS, TRIGGERS)}
    counts["store:repaired"] = 0
    deleted_hosts: set[str] = set()
    deleted_cards: set[str] = set()
    for conversation, ids in sorted(turns.items()):
        where = StoreFilter(equals={"conversation_id": conversation}, any_of={"turn_ids": sorted(ids)})
        for collection in BY_TURNS:
            hit_ids = [h.id for h in _scroll_all(store, collection, scope.tenant_id, where)]
            counts[f"store:{collection}"] += store.delete(collection, scope.tenant_id, hit_ids)
            if collection in (CARDS, SCENES):
                deleted_hosts.update(hit_ids)
            if collection == CARDS:
                deleted_cards.update(hit_ids)
    if deleted_hosts:
        where = StoreFilter(any_of={"host_id": sorted(deleted_hosts)})
        trigger_ids = [h.id for h in _scroll_all(store, TRIGGERS, scope.tenant_id, where)]
        counts[f"store:{TRIGGERS}"] += store.delete(TRIGGERS, scope.tenant_id, trigger_ids)
    if deleted_cards:
        counts["store:repaired"] += repair_lineage(store, scope.tenant_id, deleted_cards)
    return counts


def repaired_fields(payload: Mapping[str, Any], deleted: set[str]) -> dict[str, Any]:
    """The fields to set on a card some of whose related cards were deleted: a card whose successor
    is gone is current again; deleted cards leave its ``support`` and ``lineage``."""
    fields: dict[str, Any] = {}
    if any(payload.get(f) in deleted for f in SUCCESSOR_FIELDS if payload.get(f)):
        fields |= {
            "superseded_by": None,
            "duplicate_of": None,
            "valid_to": None,
            "successor_order": None,
            "retired": False,
            "retired_ts": None,
        }
    for field in ("support", "lineage"):
        values = payload.get(field) or []
        if any(v in deleted for v in values):
            fields[field] = [v for v in values if v not in deleted]
    return fields


def repair_lineage(store: VectorStore, tenant_id: str, deleted: set[str]) -> int:
    """No version keeps pointing at a deleted card. Returns the cards changed."""
    ids = sorted(deleted)
    changed = 0
    seen: set[str] = set()
    for field in (*SUCCESSOR_FIELDS, "support", "lineage"):
        for hit in _scroll_all(store, CARDS, tenant_id, StoreFilter(any_of={field: ids})):
            if hit.id in seen:
                continue
            fields = repaired_fields(hit.payload, deleted)
            if fields:
                seen.add(hit.id)
                changed += store.set_payload(CARDS, tenant_id, hit.id, fields)
    return changed


def remaining(store: VectorStore, tenant_id: str, turns: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Points of a tenant that still derive from ``turns`` (conversation -> turn ids), per
    collection: what erasure must leave at 0."""
    out: dict[str, int] = {}
    for conversation, ids in turns.items():
        if not ids:
            continue
        where = StoreFilter(equals={"conversation_id": conversation}, any_of={"turn_ids": sorted(set(ids))})
        for collection in BY_TURNS:
            out[collection] = out.get(collection, 0) + store.count(collection, tenant_id, where=where)
    return out


def scrub_pending(state: dict[str, Any] | None, existing: set[str]) -> tuple[dict[str, Any] | None, int]:
    """A consolidation table entry without the pending cards that no longer exist (erased)."""
    if not state or not state.get("cards"):
        return state, 0
    kept = [c for c in state["cards"] if c in existing]
    return {**state, "cards": kept}, len(state["cards"]) - len(kept)


def existing_cards(store: VectorStore, tenant_id: str, card_ids: Iterable[str]) -> set[str]:
    ids = sorted(set(card_ids))
    if not ids:
        return set()
    hits = store.scroll(CARDS, tenant_id, where=StoreFilter(any_of={"card_id": ids}), limit=len(ids) + 1)
    return {h.id for h in hits}
