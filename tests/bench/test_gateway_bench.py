"""The gateway bench's request bodies: valid turns, every one new work."""

from __future__ import annotations

from memstream.bench.gateway import GatewayBenchOptions, ask_bodies, turn_bodies
from memstream.schemas import Turn


def test_turn_bodies_are_valid_turns_with_unique_ids_spread_over_conversations():
    options = GatewayBenchOptions(requests=30, batch=3, conversations=4)
    bodies = turn_bodies(options)
    turns = [Turn.model_validate({**t, "tenant_id": "bench"}) for b in bodies for t in b["turns"]]
    assert len(bodies) == 30 and len(turns) == 90
    assert len({(t.conversation_id, t.turn_id) for t in turns}) == 90
    assert {t.conversation_id for t in turns} == {"c0", "c1", "c2", "c3"}


def test_ask_bodies_ask_the_conversations_the_turns_went_to():
    bodies = ask_bodies(GatewayBenchOptions(requests=10, conversations=4))
    assert {b["conversation_id"] for b in bodies} <= {"c0", "c1", "c2", "c3"} and all(b["question"] for b in bodies)
    assert not any(b["answer"] for b in bodies)
