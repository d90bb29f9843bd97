"""Stage 5: turn a memory write into store points (cards, scenes, triggers, raw turns, profiles).

Pure: the caller embeds ``PointSpec.text`` and upserts. Point ids are deterministic, so redelivery
rewrites the same points; online writes only insert (consolidation versions them later).

A fresh turn (``FreshTurn``, sent by the compress stage as the turn comes in) writes the turn's raw
point early, flagged ``fresh``, so the turn is retrievable before any card holds it; it writes only
where the point is absent, and the flush's write of the turn replaces it whole (no flag left).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from memstream.ports import Embedder, StoreFilter, StorePoint, VectorStore
from memstream.processors.ids import point_id
from memstream.processors.write.provenance import supporting_turns
from memstream.schemas import Card, FreshTurn, MemoryWrite, SourceTurn, Turn

CARDS, SCENES, TRIGGERS, TURNS, PROFILES = "cards", "scenes", "triggers", "turns", "profiles"
COLLECTIONS = (CARDS, SCENES, TRIGGERS, TURNS, PROFILES)
LEXICAL = (CARDS, SCENES, TURNS)  # collections also searchable by BM25 over their embedded text
PROFILE_ITEM_TURNS = 2  # a profile item's provenance: the turns of its speaker that support it best
FRESH = "fresh"  # payload flag of a raw turn written ahead of its flush (the flush's write has none)


@dataclass(frozen=True)
class PointSpec:
    collection: str
    id: str
    text: str  # what is embedded
    payload: dict[str, Any]


def _ts(dt) -> float | None:
    return dt.timestamp() if dt is not None else None


def turn_point_id(tenant_id: str, conversation_id: str, turn_id: str) -> str:
    """The raw turn's point: one per turn, however often it is delivered."""
    return point_id("turn", tenant_id, conversation_id, [turn_id], "")


def turn_fields(turn: Turn | SourceTurn) -> dict[str, Any]:
    """A raw turn point's own fields, the same whether a fresh turn or the flush's write stores it."""
    return {
        "kind": "turn",
        "turn_id": turn.turn_id,
        "turn_ids": [turn.turn_id],
        "session_id": turn.session_id,
        "speaker": turn.speaker,
        "subject": turn.speaker,
        "role": turn.role,
        "text": turn.text,
        "image_captions": turn.image_captions,
        "event_time": turn.event_time.isoformat(),
        "event_ts": _ts(turn.event_time),
    }


def embedding_text(collection: str, payload: Mapping[str, Any]) -> str:
    """The text a point's vector is made from, read from its payload (a rebuild re-embeds it)."""
    if collection == PROFILES:
        return f"{payload['subject']} {payload['field']}: {payload['text']}"
    return str(payload["text"])


def lexical_text(collection: str, payload: Mapping[str, Any]) -> str | None:
    """The text a point is BM25-indexed by (None: not lexically searchable)."""
    return embedding_text(collection, payload) if collection in LEXICAL else None


def is_fresh(payload: dict[str, Any]) -> bool:
    """A raw turn's point as a fresh turn wrote it: its flush's write has not reached the store yet."""
    return bool(payload.get(FRESH))


def fresh_turn_spec(fresh: FreshTurn) -> PointSpec:
    """The early raw-turn point: the fields a flush's write gives the turn that the turn itself
    carries (no ``write_id``; ``seq`` only when the producer numbered it), flagged ``fresh``."""
    turn = fresh.turn
    base = {"tenant_id": fresh.tenant_id, "conversation_id": fresh.conversation_id}
    payload: dict[str, Any] = {**base, **turn_fields(turn), FRESH: True}
    if turn.seq is not None:  # its producer numbered it: a Replay window may show it
        payload["seq"] = turn.seq  # (else the segment stage numbers it, and the flush's write has it)
    return PointSpec(TURNS, turn_point_id(fresh.tenant_id, fresh.conversation_id, turn.turn_id), turn.text, payload)


def turn_point_exists(store: VectorStore, tenant_id: str, conversation_id: str, turn_id: str) -> bool:
    where = StoreFilter(equals={"conversation_id": conversation_id, "turn_id": turn_id})
    return store.count(TURNS, tenant_id, where=where) > 0


def has_turn_position_from(store: VectorStore, tenant_id: str, conversation_id: str, position: int) -> bool:
    """The store holds a numbered turn of the conversation at ``position`` or later."""
    where = StoreFilter(equals={"conversation_id": conversation_id}, range_ts={"seq": (float(position), None)})
    return store.count(TURNS, tenant_id, where=where) > 0


def index_fresh_turn(fresh: FreshTurn, embedder: Embedder, store: VectorStore) -> bool:
    """Write the fresh turn's point unless the turn has one already: from its flush's write (a fresh
    turn delivered again after it must not undo it) or from an earlier delivery. Returns whether it
    wrote. The look spares the embedding; the write itself inserts only a new point, so a flush's
    write that lands in between (a worker frozen here and expelled, whose partition moved on)
    still stays."""
    if turn_point_exists(store, fresh.tenant_id, fresh.conversation_id, fresh.turn.turn_id):
        return False
    spec = fresh_turn_spec(fresh)
    # The segmenter embeds the same text: whichever comes second finds it in the embedding cache.
    [vector] = embedder.embed([spec.text])
    store.upsert(TURNS, [StorePoint(spec.id, vector, spec.payload, spec.text)], only_new=True)
    return True


def points_for_write(write: MemoryWrite) -> list[PointSpec]:
    base = {"tenant_id": write.tenant_id, "conversation_id": write.conversation_id, "write_id": write.write_id}
    specs: list[PointSpec] = []
    for turn in write.source_turns:
        specs.append(
            PointSpec(
                TURNS,
                turn_point_id(write.tenant_id, write.conversation_id, turn.turn_id),
                turn.text,  # the text the segmenter embedded: the worker's embedding cache answers it
                {**base, **turn_fields(turn), "seq": turn.seq},
            )
        )
    for scene in write.scenes:
        specs.append(
            PointSpec(
                SCENES,
                scene.scene_id,
                scene.summary,
                {
                    **base,
                    "kind": "scene",
                    "scene_id": scene.scene_id,
                    "topic_label": scene.topic_label,
                    "text": scene.summary,
                    "participants": scene.participants,
                    "turn_ids": scene.turn_ids,
                    "event_time": scene.start_time.isoformat(),
                    "event_ts": _ts(scene.start_time),
                    "end_ts": _ts(scene.end_time),
                    "scene_triggers": scene.scene_triggers,
                    "horizon_triggers": scene.horizon_triggers,
                },
            )
        )
        for family, triggers in (("scene", scene.scene_triggers), ("horizon", scene.horizon_triggers)):
            specs += _triggers(write, base, scene.scene_id, "scene", family, triggers)
    roles = {t.turn_id: t.role for t in write.source_turns}
    for card in write.cards:
        specs.append(card_spec(base, card, roles.get(card.provenance.turn_ids[0], "user")))
        # The speaker's own name would promote every card they ever said: it stays in the payload (for
        # the entity vote in the rerank) but is no trigger point.
        speaker = (card.speaker or "").lower()
        entity = [t for t in card.entity_triggers if t.lower() != speaker]
        for family, triggers in (("entity", entity), ("bridge", card.bridge_triggers)):
            specs += _triggers(write, base, card.card_id, "card", family, triggers)
    for profile in write.profile_updates:
        said = [
            (t.turn_id, t.text)
            for t in write.source_turns
            if t.speaker == profile.speaker and (not profile.source_turn_ids or t.turn_id in profile.source_turn_ids)
        ]
        for field in ("traits", "preferences", "relationships", "constraints"):
            for item in getattr(profile, field):
                # Its own turn, not every turn of the speaker in the flush (those say nothing of it).
                turn_ids = supporting_turns(item, said, PROFILE_ITEM_TURNS) or list(profile.source_turn_ids)
                payload = {
                    **base,
                    "kind": "profile",
                    "subject": profile.speaker,
                    "field": field,
                    "text": item,
                    "turn_ids": turn_ids,
                }
                specs.append(
                    PointSpec(
                        PROFILES,
                        point_id("profile", write.tenant_id, write.conversation_id, [profile.speaker, field], item),
                        embedding_text(PROFILES, payload),
                        payload,
                    )
                )
    return specs


def card_spec(base: dict[str, Any], card: Card, role: str) -> PointSpec:
    """A card's point (``base``: tenant, conversation and the write it came from)."""
    return PointSpec(
        CARDS,
        card.card_id,
        card.content,
        {
            **base,
            "kind": "card",
            "card_id": card.card_id,
            "subject": card.subject,
            "type": card.type,
            "text": card.content,
            "speaker": card.speaker,
            "role": role,
            "turn_ids": card.provenance.turn_ids,
            "scene_id": card.provenance.scene_id,
            "session_ids": card.provenance.session_ids,
            "event_time": card.event_time.isoformat() if card.event_time else None,
            "event_ts": _ts(card.event_time),
            "time_phrase": card.time_phrase,
            "atomic": card.atomic,
            "entity_triggers": card.entity_triggers,
            "bridge_triggers": card.bridge_triggers,
            "version": card.version,
            "valid_from": card.valid_from.isoformat(),
            "valid_to": card.valid_to.isoformat() if card.valid_to else None,
            "superseded_by": card.superseded_by,
        },
    )


def _triggers(
    write: MemoryWrite, base: dict[str, Any], host_id: str, host_kind: str, family: str, triggers: list[str]
) -> list[PointSpec]:
    return [
        PointSpec(
            TRIGGERS,
            point_id("trigger", write.tenant_id, write.conversation_id, [host_id, family], trigger),
            trigger,
            {**base, "kind": "trigger", "family": family, "host_id": host_id, "host_kind": host_kind, "text": trigger},
        )
        for trigger in triggers
    ]


def index_write(write: MemoryWrite, embedder: Embedder, store: VectorStore) -> dict[str, int]:
    """Embed a write's points and upsert them (deterministic ids: a redelivered write rewrites the
    same points). Raw turns go last: their presence marks the whole write as indexed. Returns the
    points written per collection."""
    specs = points_for_write(write)
    vectors = embedder.embed([p.text for p in specs])
    by_collection: dict[str, list[StorePoint]] = {}
    for spec, vector in zip(specs, vectors):
        lexical = spec.text if spec.collection in LEXICAL else None
        by_collection.setdefault(spec.collection, []).append(StorePoint(spec.id, vector, spec.payload, lexical))
    for collection in sorted(by_collection, key=lambda c: c == TURNS):
        store.upsert(collection, by_collection[collection])
    return {collection: len(points) for collection, points in by_collection.items()}
