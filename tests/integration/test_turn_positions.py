"""Turns a producer did not number (the SDK, the gateway, chat platforms send no ``metadata.seq``)
get their positions in the conversation from the pipeline, one by one across flushes, through the
real broker, worker and store: the raw turns the store keeps are numbered 0, 1, 2, … in the order
they were said, and a Replay window holds the turns said next to its sources, not those at the same
place of another flush."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memstream.client import MemoryClient
from memstream.schemas import Turn, memory_writes

pytestmark = pytest.mark.integration

TENANT = "acme"
FIRST = ["I moved to Porto in March.", "The flat is near the river.", "My sister visits in June."]
SECOND = ["I started learning the cello.", "Lessons are on Tuesday evenings.", "My teacher is called Ines."]


NORA = {"tenant_id": TENANT, "conversation_id": "positions", "session_id": "S1", "speaker": "Nora"}


def said(i: int, text: str) -> Turn:
    """Nora's turn ``i``, a minute after the one before, as the SDK sends it: no seq."""
    at = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc) + timedelta(minutes=i)
    return Turn(**NORA, turn_id=f"m{i}", text=text, event_time=at, metadata={"platform": "sdk"})


def test_unnumbered_turns_are_numbered_in_order_across_flushes(make_pipeline):
    pipe = make_pipeline(MEMSTREAM_EXTRACT_MODE="extractive")
    pipe.start_worker()
    turns = [said(i, text) for i, text in enumerate(FIRST + SECOND)]
    with MemoryClient(pipe.settings) as client:
        client.remember(turns[: len(FIRST)])
        pipe.drain()  # the first flush
        client.remember(turns[len(FIRST) :])
        pipe.drain()  # the second
        writes = memory_writes(v for _, v in pipe.read_topic("cards"))
        assert len(writes) >= 2, "two flushes"
        written = {t.turn_id: t.seq for w in writes for t in w.source_turns}
        assert written == {t.turn_id: i for i, t in enumerate(turns)}
        stored = client.read("timeline", tenant_id=TENANT, conversation_id="positions", limit=100)
        kept = {r["turn_id"]: r.get("seq") for r in stored.records if r["collection"] == "turns"}
        assert kept == written
        # Replay reads the turns next to the evidence by position.
        reply = client.ask(
            "What is the cello teacher called?",
            tenant_id=TENANT,
            conversation_id="positions",
            profile="replay",
            answer=False,
        )
    assert reply.ok, reply.error
    replayed = [e for e in reply.evidence if "replay" in e.found_by]
    order = {t.turn_id: i for i, t in enumerate(turns)}
    sources = {order[e.turn_ids[0]] for e in replayed if e.score == 1.0}
    neighbours = {order[e.turn_ids[0]] for e in replayed if e.score < 1.0}
    assert sources and neighbours, reply.evidence
    window = pipe.settings.replay_window
    # Each neighbour is one said next to a source turn (numbered per flush, m4 would bring m1 too).
    assert all(any(abs(n - s) <= window for s in sources) for n in neighbours), (sources, neighbours)
