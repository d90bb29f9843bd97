"""The research loop's rule path: a second round searches with the names the first round's best
evidence mentions and the question does not."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from memstream.adapters.qdrant_edge_store import QdrantEdgeStore
from memstream.processors.index import COLLECTIONS, index_write
from memstream.processors.query import QueryEngine, QueryOptions
from memstream.processors.research import follow_ups, needs_research, turns_of
from memstream.processors.retrieve import RetrievalParams
from memstream.schemas import Card, MemoryWrite, Plan, Provenance, Query
from tests.processors.test_forget import DIM, T0, HashEmbedder, source

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def test_follow_ups_take_the_names_the_question_does_not_mention():
    found = [
        {"subject": "Caroline", "entity_triggers": ["Caroline", "Melanie", "Lisbon"]},
        {"subject": "Melanie", "entity_triggers": ["hospital"]},
    ]
    queries = follow_ups("Where does Caroline's best friend work?", found, 2)
    assert queries == ["Melanie caroline's best friend work", "Lisbon caroline's best friend work"]
    assert follow_ups("Caroline Melanie Lisbon hospital", found, 3) == []
    assert turns_of([{"turn_ids": ["D1:1"]}, {"turn_ids": ["D1:2", "D1:1"]}, {}]) == {"D1:1", "D1:2"}


def test_only_multi_hop_plans_research():
    plan = Plan(planner="rules", profile="lookup")
    assert not needs_research(plan)
    assert needs_research(plan.model_copy(update={"operation": "aggregate"}))
    assert needs_research(plan.model_copy(update={"distributed": True}))


def card(card_id: str, subject: str, text: str, turn: str, triggers: list[str]) -> Card:
    return Card(
        card_id=card_id,
        subject=subject,
        type="fact",
        content=text,
        provenance=Provenance(turn_ids=[turn], scene_id=None),
        entity_triggers=triggers,
        valid_from=T0,
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory):  # noqa: ANN001, ANN201
    store = QdrantEdgeStore(tmp_path_factory.mktemp("research") / "q")
    store.ensure_collections(COLLECTIONS, DIM)
    write = MemoryWrite(
        tenant_id="acme",
        conversation_id="c1",
        write_id="w1",
        flush_id="f1",
        mode="extractive",
        cards=[
            card(
                "00000000-0000-5000-8000-000000000001",
                "Caroline",
                "Caroline's best friend is Melanie.",
                "D1:1",
                ["Caroline", "Melanie"],
            ),
            card(
                "00000000-0000-5000-8000-000000000002",
                "Melanie",
                "Melanie is a nurse at the city hospital.",
                "D1:2",
                ["Melanie", "hospital"],
            ),
        ],  # fmt: skip
        scenes=[],
        profile_updates=[],
        source_turns=[
            source("D1:1", "Caroline", "My best friend is Melanie.", 0),
            source("D1:2", "Melanie", "I am a nurse at the city hospital.", 1),
        ],
        written_at=T0,
    )
    index_write(write, HashEmbedder(), store)
    yield store
    store.close()


def ask(store, rounds: int):  # noqa: ANN001, ANN201
    params = RetrievalParams(research_rounds=rounds, new_turns_only=False, min_similarity=1.1, trigger_threshold=1.1)
    engine = QueryEngine(store, HashEmbedder(), None, QueryOptions(retrieval=params))
    query = Query(
        tenant_id="acme",
        conversation_id="c1",
        correlation_id="q1",
        reply_topic="memory.replies",
        question="How many shifts does Caroline's best friend work?",  # "how many": an aggregate
        sent_at=NOW,
        answer=False,
    )
    return engine.run(query, clock=lambda: NOW)


def test_a_second_round_finds_what_the_first_rounds_evidence_names(store):
    # min_similarity above 1: dense similarity alone scores nothing, so only lexical votes count.
    once, twice = ask(store, 1), ask(store, 2)
    assert once.plan.operation == "aggregate" and once.plan.rounds == 1
    assert [e.turn_ids for e in once.evidence] == [["D1:1"]]  # the question names nothing of D1:2
    assert twice.plan.rounds == 2
    assert {t for e in twice.evidence for t in e.turn_ids} == {"D1:1", "D1:2"}
    assert "research" in next(e.found_by for e in twice.evidence if e.turn_ids == ["D1:2"])
