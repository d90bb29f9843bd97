"""Graph expansion: links between cards (shared entity, scene, adjacent turn), path weights, hubs, and
the expansion over a real embedded store (tenant-scoped, off by default)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from memstream.processors.query.engine import QueryEngine, QueryOptions
from memstream.processors.query.graph import (
    GraphParams,
    Node,
    adjacent_turns,
    closeness,
    hubs,
    keep_best,
    links,
    names_of,
    path_weight,
    seed_nodes,
)
from memstream.processors.query.retrieve import RetrievalParams
from memstream.schemas import Card, MemoryWrite
from tests.factories import card, memory_write, query, source
from tests.fakes import HashEmbedder
from tests.stores import edge_store

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


def payload(subject: str, triggers: list[str], turns: list[str], scene: str | None = None) -> dict:
    return {"subject": subject, "entity_triggers": triggers, "turn_ids": turns, "scene_id": scene}


def test_names_leave_the_speakers_out_and_keep_one_spelling():
    p = payload("Caroline", ["Lisbon", "lisbon", "Caroline", " "], ["D1:1"])
    assert names_of(p) == {"caroline": "Caroline", "lisbon": "Lisbon"}
    assert names_of(p, speakers=["caroline"]) == {"lisbon": "Lisbon"}


def test_links_name_each_edge_type_between_a_seed_and_a_card():
    seed = Node("a", payload("Caroline", ["Lisbon"], ["D1:1"], "s1"), 1.0, 0)
    kw = {"speakers": ["Caroline"], "skip_names": set(), "adjacent": {"a": {"D1:2"}}}
    assert links(seed, payload("Melanie", ["Lisbon"], ["D9:9"]), **kw) == ["entity"]
    assert links(seed, payload("Melanie", [], ["D9:9"], "s1"), **kw) == ["scene"]
    assert links(seed, payload("Melanie", [], ["D1:2"]), **kw) == ["temporal"]
    # The speaker is in every other card: sharing only Caroline is no link.
    assert links(seed, payload("Caroline", ["bike"], ["D9:9"]), **kw) == []
    # A hub name links nothing.
    assert links(seed, payload("Melanie", ["Lisbon"], ["D9:9"]), **{**kw, "skip_names": {"lisbon"}}) == []


def test_path_weight_takes_the_best_seed_and_edge():
    params = GraphParams(hops=1, prior_entity=1.0, prior_scene=0.5, prior_temporal=0.25)
    seeds = [
        Node("a", payload("Caroline", ["Lisbon"], ["D1:1"], "s1"), 1.0, 0),
        Node("b", payload("Caroline", [], ["D2:1"], "s2"), 0.5, 0),
    ]
    kw = {"speakers": ["Caroline"], "skip_names": set(), "adjacent": {"a": {"D1:2"}, "b": {"D2:2"}}}
    assert path_weight(seeds, payload("M", ["Lisbon"], ["D5:5"]), params, **kw) == (1.0, "entity")
    assert path_weight(seeds, payload("M", [], ["D5:5"], "s2"), params, **kw) == (0.25, "scene")
    assert path_weight(seeds, payload("M", [], ["D1:2"], "s2"), params, **kw) == (0.25, "temporal")
    assert path_weight(seeds, payload("M", ["bike"], ["D7:7"]), params, **kw) == (0.0, None)


def test_hubs_are_names_more_neighbours_carry_than_the_degree_allows():
    many = [payload("M", ["Lisbon"], [f"D{i}:1"]) for i in range(4)] + [payload("M", ["Porto"], ["D9:1"])]
    assert hubs(many, ["Lisbon", "Porto"], max_degree=3) == {"lisbon"}
    assert hubs(many, ["Lisbon", "Porto"], max_degree=4) == set()


def test_seeds_weigh_by_score_over_the_best_and_keep_best_cuts_to_the_budget():
    seeds = seed_nodes([("a", {}, 2.0), ("b", {}, 1.0), ("c", {}, 0.5)], 2)
    assert [(s.id, s.weight) for s in seeds] == [("a", 1.0), ("b", 0.5)]
    reached = [(Node("x", {}, 0.5, 1), 0.9), (Node("y", {}, 1.0, 1), -0.2), (Node("z", {}, 0.0, 1), 1.0)]
    assert [n.id for n in keep_best(reached, 2)] == ["x", "y"]  # 0.5*0.95 > 1.0*0.4
    assert [n.id for n in keep_best(reached, 5)] == ["x", "y"]  # no path weight, not kept
    assert closeness(-1.0) == 0.0 and closeness(1.0) == 1.0 and closeness(0.0) == 0.5


def test_adjacent_turns_are_the_neighbours_by_position():
    seq_of = {"D1:1": 0, "D1:3": 2}
    turn_of_seq = {0: "D1:1", 1: "D1:2", 2: "D1:3", 3: "D1:4"}
    assert adjacent_turns(seq_of, turn_of_seq, ["D1:1"]) == {"D1:2"}
    assert adjacent_turns(seq_of, turn_of_seq, ["D1:1", "D1:3"]) == {"D1:2", "D1:4"}
    assert adjacent_turns(seq_of, turn_of_seq, ["D7:7"]) == set()


def write(tenant: str, cards: list[Card], turns) -> MemoryWrite:
    return memory_write(tenant, cards, turns, write_id=f"w-{tenant}", flush_id=f"f-{tenant}")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    turns = [
        source("D1:1", "Caroline", "My sister lives in Lisbon.", 0),
        source("D1:2", "Melanie", "That sounds lovely.", 1),
        source("D1:5", "Caroline", "The Lisbon flat has a blue door.", 4),
        source("D1:9", "Melanie", "I bought a bike.", 8),
    ]
    cards = [
        card(1, "Caroline", "Caroline's sister lives in Lisbon.", "D1:1", ["Caroline", "Lisbon"], speaker="Caroline"),
        card(2, "Melanie", "Melanie finds that lovely.", "D1:2", ["Melanie"], speaker="Melanie"),
        card(3, "Caroline", "The flat has a blue door.", "D1:5", ["Lisbon"], speaker="Caroline"),
        card(4, "Melanie", "Melanie bought a bike.", "D1:9", ["bike"], speaker="Melanie"),
    ]
    # Another tenant, same conversation id, naming the same city: never a node of acme's graph.
    other = [card(5, "Zed", "Zed's door in Lisbon is red.", "D1:3", ["Lisbon"], speaker="Zed")]
    others = write("other", other, [source("D1:3", "Zed", "My door in Lisbon is red.", 2)])
    with edge_store(tmp_path_factory.mktemp("graph") / "q", write("acme", cards, turns), others) as store:
        yield store


def ask(store, graph: GraphParams):
    # min_similarity above 1: the random hash vectors score nothing, only BM25 and the graph do.
    params = RetrievalParams(graph=graph, min_similarity=1.1, trigger_threshold=1.1, new_turns_only=False)
    engine = QueryEngine(store, HashEmbedder(), None, QueryOptions(retrieval=params))
    return engine.run(query("Where does Caroline's sister live?", NOW, k=10), clock=lambda: NOW)


def found(reply) -> dict[str, list[str]]:
    return {e.turn_ids[0]: e.found_by for e in reply.evidence}


def test_expansion_follows_entity_and_temporal_edges_within_the_tenant(store):
    off = found(ask(store, GraphParams(hops=0)))
    assert "D1:5" not in off and "D1:2" not in off  # nothing in their words matches the question
    on = ask(store, GraphParams(hops=1, seeds=1))
    by_turn = found(on)
    assert "graph" in by_turn["D1:5"]  # names Lisbon, as the seed does
    assert "graph" in by_turn["D1:2"]  # the turn right after the seed's
    assert "D1:9" not in by_turn  # linked to nothing
    assert "D1:3" not in by_turn  # the other tenant's Lisbon card
    assert "graph_ms" in on.latency_ms


def test_each_edge_type_can_be_switched_off_by_its_prior(store):
    entity_only = found(ask(store, GraphParams(hops=1, seeds=1, prior_scene=0.0, prior_temporal=0.0)))
    assert "D1:5" in entity_only and "D1:2" not in entity_only
    temporal_only = found(ask(store, GraphParams(hops=1, seeds=1, prior_entity=0.0, prior_scene=0.0)))
    assert "D1:2" in temporal_only and "D1:5" not in temporal_only


def test_a_hub_is_not_followed(store):
    # Degree 0: every name a neighbour carries is a hub, so only the temporal edge is left.
    by_turn = found(ask(store, GraphParams(hops=1, seeds=1, max_degree=0)))
    assert "D1:5" not in by_turn and "D1:2" in by_turn
