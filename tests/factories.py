"""Builders of valid payloads for tests: each fills what a test does not care about."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from memstream.processors.write.compress import compress_turn
from memstream.processors.write.stm import StmPolicy, StmState, add_turn, on_tick
from memstream.schemas import (
    Card,
    CompressedTurn,
    Evidence,
    MemoryWrite,
    ProfileUpdate,
    Provenance,
    Query,
    Reply,
    Scene,
    SegmentedTurn,
    SourceTurn,
    StmFlush,
    Turn,
)

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)


def turn(
    turn_id: str = "D1:1",
    text: str = "I went to the museum in Lisbon yesterday.",
    *,
    session: str = "S1",
    speaker: str = "Caroline",
    tenant: str = "t1",
    conversation: str = "c1",
    seq: int = 0,
    last: bool = False,
    minutes: int = 0,
) -> Turn:
    return Turn(
        tenant_id=tenant,
        conversation_id=conversation,
        session_id=session,
        turn_id=turn_id,
        speaker=speaker,
        text=text,
        event_time=T0 + timedelta(minutes=minutes),
        metadata={"seq": seq},
        last_in_session=last,
    )


def compressed(t: Turn) -> CompressedTurn:
    return compress_turn(t, None, 0.7)


def segmented(t: Turn, segment_id: str = "seg1", boundary: bool = False) -> SegmentedTurn:
    ct = compressed(t)
    return SegmentedTurn(
        tenant_id=t.tenant_id,
        conversation_id=t.conversation_id,
        item=ct,
        segment_id=segment_id,
        topic_label="topic",
        boundary=boundary,
    )


def flush_of(*turns: Turn, segment_ids: list[str] | None = None) -> StmFlush:
    """The STM's forced flush of ``turns`` (all in segment seg1 unless ``segment_ids`` say)."""
    state = StmState()
    for i, t in enumerate(turns):
        add_turn(
            state,
            segmented(t, segment_id=segment_ids[i] if segment_ids else "seg1"),
            0.0,
            StmPolicy(budget_tokens=10_000),
        )
    return on_tick(state, 1.0, StmPolicy(), force=True)


def source(turn_id: str, speaker: str, text: str, seq: int, *, at: datetime = T0, **fields) -> SourceTurn:
    """A raw turn as a memory write carries it (session S1, the user's side unless ``role`` says)."""
    base = {"session_id": "S1", "role": "user", **fields}
    return SourceTurn(turn_id=turn_id, speaker=speaker, text=text, event_time=at, seq=seq, **base)


def scene(
    scene_id: str,
    topic: str,
    summary: str,
    participants: list[str],
    turn_ids: list[str],
    *,
    at: datetime = T0,
    **fields,
) -> Scene:
    """A scene that starts and ends ``at``."""
    base = {"participants": participants, "turn_ids": turn_ids, "start_time": at, "end_time": at, **fields}
    return Scene(scene_id=scene_id, topic_label=topic, summary=summary, **base)


def card(n: int, subject: str, text: str, turn: str, triggers: list[str], **fields) -> Card:
    """Card ``n``: a fact from one turn, valid from T0, with a UUID for its id as the pipeline makes."""
    base = {"type": "fact", "provenance": Provenance(turn_ids=[turn], scene_id=None), "valid_from": T0, **fields}
    return Card(
        card_id=f"00000000-0000-5000-8000-{n:012d}", subject=subject, content=text, entity_triggers=triggers, **base
    )


def memory_write(
    tenant: str, cards: list[Card], source_turns: list[SourceTurn], *, conversation: str = "c1", **fields
) -> MemoryWrite:
    """One flush's write: ids w1 and f1, extractive, without scenes, written at T0 unless ``fields`` say
    otherwise."""
    base = {"write_id": "w1", "flush_id": "f1", "mode": "extractive", "scenes": [], "written_at": T0, **fields}
    return MemoryWrite(tenant_id=tenant, conversation_id=conversation, cards=cards, source_turns=source_turns, **base)


def query(question: str, sent_at: datetime, *, tenant: str = "acme", conversation: str = "c1", **fields) -> Query:
    """A query for evidence only (no answer call unless ``answer=True``), correlation id q1, replies on
    memory.replies unless ``fields`` say otherwise."""
    base = {"correlation_id": "q1", "reply_topic": "memory.replies", "answer": False, **fields}
    return Query(tenant_id=tenant, conversation_id=conversation, question=question, sent_at=sent_at, **base)


def evidence(text: str, n: int = 1, **fields) -> Evidence:
    """Evidence E<n>: a turn found by the dense search, score 1."""
    base = {"kind": "turn", "point_id": "p", "score": 1.0, "found_by": ["dense"], **fields}
    return Evidence(evidence_id=f"E{n}", text=text, **base)


def reply(*found: Evidence, **fields) -> Reply:
    """The reply to q1 of acme/c1, holding ``found``."""
    base = {"tenant_id": "acme", "conversation_id": "c1", "correlation_id": "q1", "replied_at": T0, **fields}
    return Reply(evidence=list(found), **base)


# --- the sample write: Caroline's trip to Lisbon, Mel's painting ----------------------------------------------------

SAMPLE_NAMES = ("card-caroline", "card-mixed", "card-mel", "scene1", "scene2")


def sample_ids(tenant: str = "t1", conversation: str = "c1") -> dict[str, str]:
    """The sample's card and scene ids by name: UUIDs, as the pipeline makes them."""
    return {name: str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tenant}/{conversation}/{name}")) for name in SAMPLE_NAMES}


def sample_write(tenant: str = "t1", conversation: str = "c1") -> MemoryWrite:
    """Two turns (D1:1 Caroline's, D1:2 Mel's), three cards over them (one cites both), two scenes, a
    profile update of Caroline's."""
    ids = sample_ids(tenant, conversation)

    def lisbon_card(name: str, turn_ids: list[str], text: str) -> Card:
        provenance = Provenance(turn_ids=turn_ids, scene_id=ids["scene1"])
        base = {"type": "fact", "entity_triggers": ["Lisbon"], "valid_from": T0}
        return Card(card_id=ids[name], subject="Caroline", content=text, provenance=provenance, **base)

    return memory_write(
        tenant,
        [
            lisbon_card("card-caroline", ["D1:1"], "Caroline went to the museum in Lisbon."),
            lisbon_card("card-mixed", ["D1:1", "D1:2"], "Caroline and Mel talked about Lisbon."),
            lisbon_card("card-mel", ["D1:2"], "Mel likes painting."),
        ],
        [
            source("D1:1", "Caroline", "I went to the museum in Lisbon.", 0),
            source("D1:2", "Mel", "I like painting.", 1),
        ],
        conversation=conversation,
        write_id=f"w-{tenant}-{conversation}",
        flush_id="fl1",
        scenes=[
            scene(
                ids["scene1"],
                "trip",
                "A trip to Lisbon.",
                ["Caroline", "Mel"],
                ["D1:1", "D1:2"],
                scene_triggers=["Lisbon trip"],
            ),
            scene(ids["scene2"], "art", "Painting.", ["Mel"], ["D1:2"]),
        ],
        profile_updates=[ProfileUpdate(speaker="Caroline", traits=["curious"], source_turn_ids=["D1:1"])],
    )
