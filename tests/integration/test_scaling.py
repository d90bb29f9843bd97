"""Horizontal scaling: two workers of the stage group compress, segment, stm, extract share one
consumer group; kill -9 of one mid-ingest loses nothing and stores nothing twice."""

from __future__ import annotations

import time

import pytest

from memstream.processors.write.index import TURNS
from memstream.schemas.topics import INGEST_TOPICS

from .conftest import first_sessions, handled

pytestmark = pytest.mark.integration

INGEST_GROUP = "compress,segment,stm,extract"


def test_kill_9_of_one_of_two_workers_of_a_stage_group_loses_no_turn_and_stores_none_twice(make_pipeline):
    conversation, turns, _ = first_sessions(2)
    # The same sessions as six conversations: their keys spread over the partitions of both workers.
    conversations = [[t.model_copy(update={"conversation_id": f"{conversation}-{i}"}) for t in turns] for i in range(6)]
    everything = [t for c in conversations for t in c]
    pipe = make_pipeline()
    a = pipe.start_worker("ingest-a", stages=INGEST_GROUP)
    b = pipe.start_worker("ingest-b", stages=INGEST_GROUP)
    pipe.start_worker("store", stages="index,consolidate,query")

    pipe.produce(everything)
    deadline = time.monotonic() + 120
    while min(handled(a.metrics_port, "segment"), handled(b.metrics_port, "segment")) == 0:
        assert time.monotonic() < deadline, "both ingest workers should get partitions and work"
        time.sleep(0.5)
    b.kill()  # mid-ingest: its uncommitted messages go to the survivor after the rebalance

    pipe.drain(timeout_s=600)
    assert pipe.lag(INGEST_TOPICS) == {t: 0 for t in INGEST_TOPICS}
    pipe.stop_workers()
    with pipe.store() as store:
        raw = store.scroll(TURNS, "acme", limit=100_000)
    stored = [(h.payload["conversation_id"], h.payload["turn_id"]) for h in raw]
    assert len(stored) == len(set(stored)) == len(everything)
    assert set(stored) == {(t.conversation_id, t.turn_id) for t in everything}
