"""A Qdrant outage under a running worker: the store stages hold their messages and try again
(nothing committed, nothing dead-lettered), a question in the window gets an error reply in time,
and once the server is back every turn is stored. Needs a Qdrant binary (``make test-cluster``)."""

from __future__ import annotations

import time

import pytest

from memstream.adapters.qdrant_store import QdrantStore
from memstream.processors.write.index import TURNS
from tests.qdrant_servers import started

from .conftest import first_sessions, store_outages

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def test_a_store_outage_holds_the_messages_answers_questions_with_an_error_and_loses_nothing(make_pipeline, tmp_path):
    conversation, turns, _ = first_sessions(2)
    before, during = turns[: len(turns) // 2], turns[len(turns) // 2 :]
    qdrant = started(tmp_path / "qdrant", 28333, 1)
    try:
        pipe = make_pipeline(MEMSTREAM_QDRANT_URL=qdrant.url, MEMSTREAM_QDRANT_COLLECTION_PREFIX="outage_")
        worker = pipe.start_worker()
        pipe.produce(before)
        pipe.drain()

        qdrant.kill(1)
        pipe.produce(during)
        # The buffer flushes on idle: the new cards reach the index stage, which cannot write them.
        deadline = time.monotonic() + 120
        while store_outages(worker.metrics_port) == 0:
            assert time.monotonic() < deadline, "the index stage should meet the outage"
            time.sleep(1)
        asked = time.monotonic()
        reply = pipe.ask("What did they talk about?", tenant="acme", conversation=conversation, timeout_s=30)
        assert not reply.ok and "no Qdrant node answers" in (reply.error or "")
        assert time.monotonic() - asked < 30  # an error reply, not the asker's timeout
        assert pipe.lag(["cards"])["cards"] > 0  # held: not committed
        assert pipe.dead_letters() == []
        assert worker.alive()

        qdrant.start(1)  # the same storage
        pipe.drain()
        assert pipe.dead_letters() == []
        store = QdrantStore(url=qdrant.url, prefix="outage_")
        try:
            stored = {h.payload["turn_id"] for h in store.scroll(TURNS, "acme", limit=10_000)}
        finally:
            store.close()
        assert stored == {t.turn_id for t in turns}
        assert pipe.ask("What did they talk about?", tenant="acme", conversation=conversation, answer=False).ok
    finally:
        qdrant.run("stop", check=False)
