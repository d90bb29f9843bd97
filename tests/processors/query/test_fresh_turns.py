"""Fresh turns: the early write of a turn the compress stage let in, its raw point (written only where
the turn has none, replaced whole by its flush's write), the reply's fresh evidence, and erasure (on
the real embedded Qdrant, in a temp folder)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memstream.ports import StoreFilter
from memstream.processors.forgetting.forget import ForgetScope, erase
from memstream.processors.query.engine import QueryEngine, QueryOptions
from memstream.processors.write.compress import fresh_turn
from memstream.processors.write.index import (
    TURNS,
    fresh_turn_spec,
    index_fresh_turn,
    index_write,
    is_fresh,
    points_for_write,
    turn_point_id,
)
from memstream.schemas import (
    Forget,
    FreshTurn,
    MemoryWrite,
    Query,
    SourceTurn,
    decode_cards_message,
    memory_writes,
)
from tests import factories
from tests.factories import T0, compressed, memory_write, sample_write, turn
from tests.fakes import HashEmbedder
from tests.stores import edge_store

NOW = T0 + timedelta(days=1)
SAID = "I adopted a greyhound called Biscuit this morning."


def said(turn_id: str = "D1:9", text: str = SAID, **kw) -> FreshTurn:
    return fresh_turn(compressed(turn(turn_id, text, **{"seq": 9, **kw})))


def flush_write(fresh: FreshTurn, seq: int = 9) -> MemoryWrite:
    """The write a flush of this one turn gives (no cards: only the raw turn matters here)."""
    said_as = fresh.turn.model_dump(include={"turn_id", "session_id", "speaker", "role", "text", "event_time"})
    source = SourceTurn(**said_as, seq=seq, received_at=fresh.received_at)
    flushed = {"write_id": "w-flush", "flush_id": "fl-9", "written_at": NOW}
    return memory_write(fresh.tenant_id, [], [source], conversation=fresh.conversation_id, **flushed)


@pytest.fixture
def store(tmp_path):
    with edge_store(tmp_path / "q", sample_write("t1", "c1")) as s:  # D1:1 and D1:2, flushed, with their cards
        yield s


def turn_payload(store, fresh: FreshTurn) -> dict | None:
    where = StoreFilter(equals={"conversation_id": fresh.conversation_id, "turn_id": fresh.turn.turn_id})
    hits = store.scroll(TURNS, fresh.tenant_id, where=where, limit=2)
    assert len(hits) <= 1
    return dict(hits[0].payload) if hits else None


def query(question: str, **kw) -> Query:
    return factories.query(question, NOW, tenant="t1", reply_topic="r", **kw)


def engine(store, fresh_k: int = 3) -> QueryEngine:
    return QueryEngine(store, HashEmbedder(), None, QueryOptions(fresh_k=fresh_k))


# --- the early write ------------------------------------------------------------------------------


def test_a_fresh_turn_is_keyed_like_its_conversation_and_travels_on_the_cards_topic():
    fresh = said()
    assert fresh.key == "t1/c1" and fresh.turn.text == SAID
    assert decode_cards_message(fresh.to_bytes()) == fresh
    forget = Forget(forget_id="f1", tenant_id="t1", conversation_id="c1", requested_at=NOW, reply_topic="r")
    flushed = flush_write(fresh)
    values = [fresh.to_bytes(), flushed.to_bytes(), forget.to_bytes()]
    assert memory_writes(values) == [flushed]  # readers of the writes skip fresh turns and forgets


def test_the_fresh_point_holds_what_the_flush_gives_the_turn_but_its_write_and_is_flagged():
    fresh = said()
    spec = fresh_turn_spec(fresh)
    [flushed] = [s for s in points_for_write(flush_write(fresh)) if s.collection == TURNS]
    assert spec.id == flushed.id == turn_point_id("t1", "c1", "D1:9") and spec.text == flushed.text
    assert is_fresh(spec.payload) and not is_fresh(flushed.payload)
    early = {k: v for k, v in spec.payload.items() if k != "fresh"}
    assert early == {k: v for k, v in flushed.payload.items() if k != "write_id"}  # seq 9 from the turn
    unnumbered = said().model_copy(update={"turn": said().turn.model_copy(update={"metadata": {}})})
    assert "seq" not in fresh_turn_spec(unnumbered).payload  # no position: no Replay window


# --- insert only where absent ---------------------------------------------------------------------


def test_a_fresh_turn_is_written_once_and_the_flush_replaces_it_whole(store):
    fresh = said()
    assert index_fresh_turn(fresh, HashEmbedder(), store)
    assert is_fresh(turn_payload(store, fresh))
    assert not index_fresh_turn(fresh, HashEmbedder(), store)  # delivered again: left as it is
    flushed = flush_write(fresh)
    index_write(flushed, HashEmbedder(), store)
    [expected] = [s.payload for s in points_for_write(flushed) if s.collection == TURNS]
    assert turn_payload(store, fresh) == expected  # no "fresh" left behind


def test_a_fresh_turn_arriving_after_its_flush_changes_nothing(store):
    fresh = said()
    flushed = flush_write(fresh)
    index_write(flushed, HashEmbedder(), store)
    before = turn_payload(store, fresh)
    assert not index_fresh_turn(fresh, HashEmbedder(), store)  # a redelivery behind the flush's write
    assert turn_payload(store, fresh) == before
    assert not index_fresh_turn(said("D1:1"), HashEmbedder(), store)  # a flushed turn of the fixture


class LateLook:
    """The store as a worker frozen between its look and its write saw it: no turn point yet."""

    def __init__(self, inner):
        self.inner = inner

    def count(self, *args, **kwargs) -> int:
        return 0

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_flush_write_landing_between_the_look_and_the_write_stays(store):
    fresh = said()
    flushed = flush_write(fresh)
    index_write(flushed, HashEmbedder(), store)
    before = turn_payload(store, fresh)
    index_fresh_turn(fresh, HashEmbedder(), LateLook(store))  # looked before the flush, writes after it
    assert turn_payload(store, fresh) == before  # the store inserts only a new point


# --- the reply ------------------------------------------------------------------------------------


def test_a_turn_just_said_is_fresh_evidence_after_the_cards_until_its_flush(store):
    fresh = said()
    index_fresh_turn(fresh, HashEmbedder(), store)
    reply = engine(store).run(query(SAID), clock=lambda: NOW)
    cards = [e for e in reply.evidence if e.kind == "card"]
    [early] = [e for e in reply.evidence if "fresh" in e.found_by]
    assert reply.evidence[: len(cards)] == cards  # the cards' ranking first, untouched
    assert early.kind == "turn" and early.turn_ids == ["D1:9"] and early.session_ids == ["S1"]
    assert early.text == f"Caroline: {SAID}" and early.subject == "Caroline" and early.event_time == T0
    assert early.evidence_id == "F1"
    without = engine(store, fresh_k=0).run(query(SAID), clock=lambda: NOW)
    assert without.evidence == cards  # the same cards, in the same order

    index_write(flush_write(fresh), HashEmbedder(), store)
    after = engine(store).run(query(SAID), clock=lambda: NOW)
    assert not [e for e in after.evidence if "fresh" in e.found_by]  # its cards' business now


def test_fresh_evidence_keeps_to_the_query_budget(store):
    index_fresh_turn(said(), HashEmbedder(), store)
    free = engine(store).run(query(SAID), clock=lambda: NOW)
    assert any("fresh" in e.found_by for e in free.evidence)
    budget = free.context_tokens - 1  # all of it but the fresh turn's last token
    capped = engine(store).run(query(SAID, max_tokens=budget), clock=lambda: NOW)
    assert not any("fresh" in e.found_by for e in capped.evidence) and capped.context_tokens <= budget


def test_replay_over_a_card_whose_turn_is_still_fresh_and_unnumbered_does_not_fail(store):
    bare = said()
    bare = bare.model_copy(update={"turn": bare.turn.model_copy(update={"metadata": {}})})
    index_fresh_turn(bare, HashEmbedder(), store)
    reply = engine(store).run(query("Where did Caroline go in Lisbon?", profile="replay"), clock=lambda: NOW)
    assert reply.access_profile == "replay" and reply.evidence


# --- erasure --------------------------------------------------------------------------------------


def test_a_forget_erases_fresh_turns_of_its_scope_too(store):
    index_fresh_turn(said("D1:9"), HashEmbedder(), store)
    index_fresh_turn(said("D1:10", "Mel here, just saying hi.", speaker="Mel"), HashEmbedder(), store)
    forget = Forget(
        forget_id="f1", tenant_id="t1", conversation_id="c1", speaker="Caroline", requested_at=NOW, reply_topic="r"
    )
    counts = erase(store, ForgetScope.of(forget))
    assert counts["store:turns"] == 2  # D1:1 (flushed) and D1:9 (fresh)
    assert turn_payload(store, said("D1:9")) is None
    assert turn_payload(store, said("D1:10")) is not None
