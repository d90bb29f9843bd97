"""Forgetting: which turns a forget covers, tombstones, scrubbed windows and buffers, and erasure of
the store with lineage repaired (on the real embedded Qdrant, in a temp folder)."""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from memstream.adapters.qdrant_edge_store import QdrantEdgeStore
from memstream.ports import StoreFilter
from memstream.processors.consolidation.consolidate import refers_to_erased_cards
from memstream.processors.forgetting.forget import (
    ForgetScope,
    add_tombstone,
    erase,
    existing_cards,
    forgotten_turns,
    remaining,
    scrub_buffer,
    scrub_pending,
    scrub_window,
    tombstoned,
)
from memstream.processors.write.index import CARDS, COLLECTIONS, PROFILES, SCENES, TRIGGERS, TURNS, index_write
from memstream.processors.write.segment import SegmenterState
from memstream.processors.write.stm import StmState
from memstream.schemas import (
    Card,
    CardPatch,
    ConsolidationUpdate,
    Forget,
    MemoryWrite,
    ProfileUpdate,
    Provenance,
    Scene,
    SchemaError,
    SourceTurn,
    decode_message,
)
from memstream.schemas.topics import Topic
from tests.factories import T0, compressed, turn

NOW = T0 + timedelta(days=30)
# Card and scene ids are their points' ids: UUIDs, as the pipeline makes them.
NAMES = ("card-caroline", "card-mixed", "card-mel", "scene1", "scene2")


def ids_of(tenant: str, conversation: str) -> dict[str, str]:
    return {name: str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tenant}/{conversation}/{name}")) for name in NAMES}


ID = ids_of("t1", "c1")


def forget(**kw) -> Forget:
    base = {"forget_id": "f1", "tenant_id": "t1", "requested_at": NOW, "reply_topic": "memory.replies"}
    return Forget(**{**base, **kw})


# --- scope ----------------------------------------------------------------------------------------


def test_a_scope_narrows_by_conversation_speaker_turn_ids_and_time():
    scope = ForgetScope.of(forget(conversation_id="c1", speaker="Caroline"))
    assert scope.covers_turn(turn("D1:1", speaker="Caroline"))
    assert not scope.covers_turn(turn("D1:2", speaker="Mel"))
    assert not scope.covers_turn(turn("D1:1", speaker="Caroline", conversation="c2"))
    assert not scope.covers_turn(turn("D1:1", speaker="Caroline", tenant="t2"))
    later = turn("D9:1", speaker="Caroline", minutes=int(timedelta(days=31).total_seconds() // 60))
    assert not scope.covers_turn(later)  # said after the request: not forgotten
    by_ids = ForgetScope.of(forget(conversation_id="c1", turn_ids=["D1:2"]))
    assert by_ids.covers_turn(turn("D1:2", speaker="Mel")) and not by_ids.covers_turn(turn("D1:1"))
    tenant = ForgetScope.of(forget())
    assert tenant.covers_turn(turn(conversation="c9")) and not tenant.covers_turn(turn(tenant="t10"))
    assert ForgetScope.from_dict(scope.to_dict()) == scope


def test_turn_ids_need_a_conversation_and_a_forget_travels_on_every_ingest_topic():
    with pytest.raises(ValueError):
        forget(turn_ids=["D1:1"])
    f = forget(conversation_id="c1")
    assert f.key == "t1/c1" and forget().key == "t1/*"
    for topic in (Topic.TURNS, Topic.TURNS_COMPRESSED, Topic.SEGMENTS, Topic.STM_FLUSH, Topic.CARDS, Topic.CONTROL):
        assert decode_message(topic, f.to_bytes()) == f
    with pytest.raises(SchemaError):
        decode_message(Topic.TURNS, b'{"kind": "forget", "tenant_id": "t1"}')


def test_a_tombstone_drops_covered_turns_until_it_expires():
    scope = ForgetScope.of(forget(conversation_id="c1", speaker="Caroline"))
    entries = add_tombstone(None, scope, now=1000.0, ttl_s=100.0)
    assert tombstoned(entries, turn(speaker="Caroline"), now=1050.0)
    assert not tombstoned(entries, turn(speaker="Mel"), now=1050.0)
    assert not tombstoned(entries, turn(speaker="Caroline"), now=1101.0)  # expired
    again = add_tombstone(entries, scope, now=1050.0, ttl_s=100.0)  # a redelivery renews, not doubles
    assert len(again) == 1 and again[0]["expires_at"] == 1150.0
    other = add_tombstone(again, ForgetScope.of(forget(conversation_id="c2")), now=1200.0, ttl_s=100.0)
    assert len(other) == 1  # the expired one left


def test_windows_and_buffers_drop_only_the_covered_turns():
    scope = ForgetScope.of(forget(conversation_id="c1", speaker="Caroline"))
    turns = [turn(f"D1:{i}", f"text {i}", speaker="Caroline" if i % 2 else "Mel", seq=i) for i in range(1, 6)]
    window = SegmenterState(pending=[compressed(t).model_dump(mode="json") for t in turns])
    assert scrub_window(window, scope) == 3
    assert [t["turn"]["turn_id"] for t in window.pending] == ["D1:2", "D1:4"]
    groups = [
        {"segment_id": "s1", "topic_label": "a", "turns": [compressed(t).model_dump(mode="json") for t in turns[:1]]},
        {"segment_id": "s2", "topic_label": "b", "turns": [compressed(t).model_dump(mode="json") for t in turns[1:]]},
    ]
    buffer = StmState(tenant_id="t1", conversation_id="c1", groups=groups, tokens=999)
    assert scrub_buffer(buffer, scope) == 3
    assert [g["segment_id"] for g in buffer.groups] == ["s2"]  # a topic left empty goes
    kept = buffer.groups[0]["turns"]
    assert [t["turn"]["turn_id"] for t in kept] == ["D1:2", "D1:4"]
    assert buffer.tokens == sum(t["tokens_out"] for t in kept)


# --- the store ------------------------------------------------------------------------------------

DIM = 8


class HashEmbedder:
    """Deterministic unit vectors from the text (the store needs vectors, not meaning)."""

    dim = DIM
    name = "hash"

    def embed(self, texts):
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little")
            v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows) if rows else np.zeros((0, DIM), np.float32)

    def clear_cache(self) -> None:
        pass


def source(turn_id: str, speaker: str, text: str, seq: int) -> SourceTurn:
    return SourceTurn(turn_id=turn_id, session_id="S1", speaker=speaker, role="user", text=text, event_time=T0, seq=seq)


def card(card_id: str, turn_ids: list[str], text: str, scene_id: str, **kw) -> Card:
    return Card(
        card_id=card_id,
        subject="Caroline",
        type="fact",
        content=text,
        provenance=Provenance(turn_ids=turn_ids, scene_id=scene_id),
        entity_triggers=["Lisbon"],
        valid_from=T0,
        **kw,
    )


def write(tenant: str = "t1", conversation: str = "c1") -> MemoryWrite:
    ID = ids_of(tenant, conversation)  # the module's name for the same thing
    return MemoryWrite(
        tenant_id=tenant,
        conversation_id=conversation,
        write_id=f"w-{tenant}-{conversation}",
        flush_id="fl1",
        mode="extractive",
        cards=[
            card(ID["card-caroline"], ["D1:1"], "Caroline went to the museum in Lisbon.", ID["scene1"]),
            card(ID["card-mixed"], ["D1:1", "D1:2"], "Caroline and Mel talked about Lisbon.", ID["scene1"]),
            card(ID["card-mel"], ["D1:2"], "Mel likes painting.", ID["scene1"]),
        ],
        scenes=[
            Scene(
                scene_id=ID["scene1"],
                topic_label="trip",
                summary="A trip to Lisbon.",
                participants=["Caroline", "Mel"],
                start_time=T0,
                end_time=T0,
                turn_ids=["D1:1", "D1:2"],
                scene_triggers=["Lisbon trip"],
            ),
            Scene(
                scene_id=ID["scene2"],
                topic_label="art",
                summary="Painting.",
                participants=["Mel"],
                start_time=T0,
                end_time=T0,
                turn_ids=["D1:2"],
            ),
        ],
        profile_updates=[ProfileUpdate(speaker="Caroline", traits=["curious"], source_turn_ids=["D1:1"])],
        source_turns=[
            source("D1:1", "Caroline", "I went to the museum in Lisbon.", 0),
            source("D1:2", "Mel", "I like painting.", 1),
        ],
        written_at=T0,
    )


@pytest.fixture
def store(tmp_path):
    s = QdrantEdgeStore(tmp_path / "q")
    s.ensure_collections(COLLECTIONS, DIM)
    for w in (write(), write(conversation="c2"), write(tenant="t2")):
        index_write(w, HashEmbedder(), s)
    yield s
    s.close()


def counts(store, tenant: str) -> dict[str, int]:
    return {c: store.count(c, tenant) for c in COLLECTIONS}


def test_forgetting_a_speaker_erases_every_point_derived_from_their_turns_and_nothing_else(store):
    other_tenant, other_conversation = counts(store, "t2"), store.count(CARDS, "t1", where=conv("c2"))
    scope = ForgetScope.of(forget(conversation_id="c1", speaker="Caroline"))
    assert forgotten_turns(store, scope) == {"c1": {"D1:1"}}
    done = erase(store, scope)
    # D1:1's raw turn; its card, the mixed card; the scene holding it; its profile item; their triggers
    assert done["store:turns"] == 1 and done["store:cards"] == 2 and done["store:scenes"] == 1
    assert done["store:profiles"] == 1 and done["store:triggers"] >= 2
    assert remaining(store, "t1", {"c1": {"D1:1"}}) == {c: 0 for c in (CARDS, SCENES, PROFILES, TURNS)}
    left = store.scroll(TRIGGERS, "t1", where=conv("c1"))
    assert {h.payload["host_id"] for h in left} <= {ID["card-mel"], ID["scene2"]}
    assert {h.payload["turn_id"] for h in store.scroll(TURNS, "t1", where=conv("c1"))} == {"D1:2"}
    assert counts(store, "t2") == other_tenant
    assert store.count(CARDS, "t1", where=conv("c2")) == other_conversation
    assert erase(store, scope)["store:cards"] == 0  # redelivered: nothing more


def test_forgetting_a_whole_tenant_leaves_the_other_tenant_whole(store):
    before = counts(store, "t2")
    erase(store, ForgetScope.of(forget()))
    assert all(n == 0 for n in counts(store, "t1").values())
    assert counts(store, "t2") == before


def test_a_card_whose_successor_was_erased_is_current_again(store):
    # card-mel was superseded by card-caroline and repeated by card-mixed; both get erased.
    store.set_payload(
        CARDS,
        "t1",
        ID["card-mel"],
        {
            "superseded_by": ID["card-caroline"],
            "retired": True,
            "valid_to": NOW.isoformat(),
            "support": [ID["card-mixed"]],
        },
    )
    done = erase(store, ForgetScope.of(forget(conversation_id="c1", speaker="Caroline")))
    assert done["store:repaired"] == 1
    [mel] = store.scroll(CARDS, "t1", where=StoreFilter(equals={"conversation_id": "c1", "card_id": ID["card-mel"]}))
    assert mel.payload["superseded_by"] is None and mel.payload["retired"] is False
    assert mel.payload["valid_to"] is None and mel.payload["support"] == []


def test_an_update_decided_before_the_erase_is_not_applied_after_it(store):
    update = ConsolidationUpdate(
        tenant_id="t1",
        conversation_id="c1",
        update_id="u1",
        card_id=ID["card-mel"],
        subject="Mel",
        patches=[CardPatch(card_id=ID["card-mel"], superseded_by=ID["card-caroline"])],
        decided_at=NOW,
    )
    assert not refers_to_erased_cards(store, update)
    erase(store, ForgetScope.of(forget(conversation_id="c1", speaker="Caroline")))
    assert refers_to_erased_cards(store, update)


def test_pending_cards_that_were_erased_leave_the_consolidation_table(store):
    state = {"cards": [ID["card-caroline"], ID["card-mel"], ID["card-mixed"]], "last_write": 1.0}
    erase(store, ForgetScope.of(forget(conversation_id="c1", speaker="Caroline")))
    existing = existing_cards(store, "t1", state["cards"])
    scrubbed, removed = scrub_pending(state, existing)
    assert removed == 2 and scrubbed is not None and scrubbed["cards"] == [ID["card-mel"]]
    assert scrub_pending(None, existing) == (None, 0)


def conv(conversation: str) -> StoreFilter:
    return StoreFilter(equals={"conversation_id": conversation})


def test_requested_at_bounds_what_a_forget_covers():
    scope = ForgetScope.of(forget(requested_at=datetime(2000, 1, 1, tzinfo=timezone.utc)))
    assert not scope.covers_turn(turn())  # the turn was said in 2023, after the request


def test_naming_a_long_turn_forgets_its_chunks_too():
    scope = ForgetScope.of(forget(conversation_id="c1", turn_ids=["D1:1"]))
    assert scope.covers_turn(turn("D1:1#2")) and not scope.covers_turn(turn("D1:10#1"))
