"""Forgetting: which turns a forget covers, tombstones, scrubbed windows and buffers, and erasure of
the store with lineage repaired (on the real embedded Qdrant, in a temp folder)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

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
from memstream.processors.write.index import CARDS, COLLECTIONS, PROFILES, SCENES, TRIGGERS, TURNS
from memstream.processors.write.segment import SegmenterState
from memstream.processors.write.stm import StmState
from memstream.schemas import CardPatch, ConsolidationUpdate, Forget, SchemaError, decode_message
from memstream.schemas.topics import Topic
from tests.factories import T0, compressed, sample_ids, sample_write, turn
from tests.stores import edge_store

NOW = T0 + timedelta(days=30)
ID = sample_ids("t1", "c1")


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


@pytest.fixture
def store(tmp_path):
    with edge_store(tmp_path / "q", sample_write(), sample_write(conversation="c2"), sample_write(tenant="t2")) as s:
        yield s


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
