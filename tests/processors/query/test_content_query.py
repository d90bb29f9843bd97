"""The content query (the question with its speakers' names made "someone") and the graph budget
that grows with K: the pure parts, and one engine run over a real embedded Qdrant store."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from memstream.ports import StoreHit
from memstream.processors.query.engine import QueryEngine, QueryOptions
from memstream.processors.query.graph import GraphParams
from memstream.processors.query.retrieve import Pool, RetrievalParams, pool_speakers, speakers_named
from memstream.processors.text import without_names
from tests.factories import card, memory_write, query, source
from tests.stores import edge_store

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def test_names_become_someone_possessives_included_longest_first():
    assert without_names("What is Caroline's identity?", ["Caroline"]) == "What is someone's identity?"
    assert without_names("Did James' dog meet Ann?", ["James", "Ann"]) == "Did someone's dog meet someone?"
    # "Ann" inside "Anna Lee" is not a name of its own; the longer name goes first.
    assert without_names("Anna Lee met Ann", ["Ann", "Anna Lee"]) == "someone met someone"
    assert without_names("Where is Annabel?", ["Ann"]) == "Where is Annabel?"
    assert without_names("What does Melanie do?", []) == "What does Melanie do?"
    assert without_names("Is Caroline's dog with Caroline?", ["Caroline"], word="they") == "Is their dog with they?"


def test_only_pooled_speakers_that_the_question_names_are_dropped():
    pool = Pool()
    pool.add(
        "dense:0:None",
        "dense",
        [
            StoreHit("a", 0.0, {"speaker": "Melanie", "text": "x"}),
            StoreHit("b", 0.0, {"speaker": "Caroline", "text": "y"}),
            StoreHit("c", 0.0, {"text": "z"}),
        ],
    )
    speakers = pool_speakers(pool)
    assert speakers == {"Melanie", "Caroline"}
    assert speakers_named("What does Melanie do with Paris?", speakers) == ["Melanie"]
    assert speakers_named("Do Caroline and Melanie agree?", speakers) == ["Caroline", "Melanie"]
    assert speakers_named("What did Melanies say?", speakers) == []  # whole words only


def test_the_graph_keeps_more_neighbours_when_more_evidence_is_asked():
    g = GraphParams(per_hop=16, per_item=0.5)
    assert g.kept(0) == g.kept(10) == 16
    assert g.kept(83) == 42
    assert GraphParams(per_hop=16, per_item=0.0).kept(200) == 16


def unit(*xs: float) -> list[float]:
    v = np.asarray(xs, dtype=np.float32)
    return (v / np.linalg.norm(v)).tolist()


# Hand-set vectors: a short card of the named speaker is closest to the question because of the
# name (dimension 0), the card that answers is closest to the question's content.
VECTORS = {
    "Take care of yourself.": unit(3, 0, 1, 0),
    "I run far to relax.": unit(3, 2, 0, 1),
    "How does Melanie unwind?": unit(3, 1, 1, 0),
    "How does someone unwind?": unit(0, 1, 1, 0),
}


class TableEmbedder:
    """Vectors from the table above; any other text (the store's other points) points elsewhere.
    ``calls`` keeps each batch it was asked for."""

    dim = 4
    name = "table"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return np.asarray([VECTORS.get(t, unit(0, 0, 0, 1)) for t in texts], dtype=np.float32)

    def clear_cache(self) -> None:
        pass


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    turns = [
        source("D1:1", "Melanie", "Take care of yourself.", 0),
        source("D1:2", "Melanie", "I run far to relax.", 1),
    ]
    # No word of the question is in a card's text: BM25 votes for neither, the ranking is semantic.
    cards = [
        card(1, "Melanie", "Take care of yourself.", "D1:1", [], speaker="Melanie"),
        card(2, "Melanie", "I run far to relax.", "D1:2", [], speaker="Melanie"),
    ]
    written = memory_write("acme", cards, turns)
    with edge_store(tmp_path_factory.mktemp("content") / "q", written, embedder=TableEmbedder()) as store:
        yield store


QUESTION = "How does Melanie unwind?"


def engine(store, mode: str) -> tuple[QueryEngine, TableEmbedder]:
    embedder = TableEmbedder()
    params = RetrievalParams(content_query=mode, graph=GraphParams(hops=0), trigger_threshold=1.1)
    return QueryEngine(store, embedder, None, QueryOptions(retrieval=params)), embedder


def first_turn(engine: QueryEngine) -> str:
    return engine.run(query(QUESTION, NOW, k=2), clock=lambda: NOW).evidence[0].turn_ids[0]


def test_the_content_query_ranks_the_answer_above_a_card_that_only_shares_the_name(store):
    plain, embedder = engine(store, "none")
    assert first_turn(plain) == "D1:1"
    assert all("How does someone unwind?" not in batch for batch in embedder.calls)

    content, embedder = engine(store, "semantic")
    assert first_turn(content) == "D1:2"
    # The first question of a conversation learns its speakers from the pool: one more pass.
    assert embedder.calls[0] == [QUESTION] and ["How does someone unwind?"] in embedder.calls
    embedder.calls.clear()
    assert first_turn(content) == "D1:2"
    # From then on the content query rides in the question's own pass.
    assert embedder.calls[0] == [QUESTION, "How does someone unwind?"]
    assert ["How does someone unwind?"] not in embedder.calls
