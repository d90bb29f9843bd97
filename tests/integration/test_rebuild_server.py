"""`memstream rebuild` on a Qdrant server while a worker serves: questions asked throughout are all
answered (from the old generation until the switch, from the new after it), turns keep streaming in
during the build and the switch, and afterwards the serving store is the record, point for point.
Needs a Qdrant binary (``make test-cluster``)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from qdrant_client import QdrantClient

from memstream.adapters.generations import active_generation
from memstream.bench.deployment import Deployment
from memstream.processors.write.index import TURNS
from memstream.streams.rebuild import Rebuild
from memstream.streams.services import Services

from .conftest import first_sessions, record_points, store_outages, store_points

pytestmark = [pytest.mark.integration, pytest.mark.cluster]
QUESTION = "What did they talk about?"


def test_a_rebuild_switches_a_serving_worker_to_the_new_generation_and_every_question_is_answered(
    kafka, qdrant_server, tmp_path
):
    conversation, turns, _ = first_sessions(3)
    sessions = sorted({t.session_id for t in turns})
    before = [t for t in turns if t.session_id == sessions[0]]
    during = [t for t in turns if t.session_id != sessions[0]]
    env = {
        "MEMSTREAM_QDRANT_URL": qdrant_server.url,
        "MEMSTREAM_QDRANT_COLLECTION_PREFIX": f"rb{uuid.uuid4().hex[:8]}_",
        "MEMSTREAM_STM_IDLE_S": "3",
        "MEMSTREAM_STM_TICK_S": "1",
    }
    pipe = Deployment(kafka, tmp_path / "p", env)
    try:
        pipe.start_worker("w1")
        pipe.produce(before)
        pipe.drain()

        replies, failures = [], []
        stop = threading.Event()

        def ask_throughout() -> None:
            while not stop.is_set():
                try:
                    reply = pipe.ask(QUESTION, tenant="acme", conversation=conversation, answer=False)
                    (replies if reply.ok else failures).append(reply.error or "")
                except Exception as exc:  # a timeout is a question not answered
                    failures.append(repr(exc))

        def stream_slowly() -> None:
            for i in range(0, len(during), 5):
                pipe.produce(during[i : i + 5])
                time.sleep(0.3)

        asking = threading.Thread(target=ask_throughout)
        streaming = threading.Thread(target=stream_slowly)
        asking.start()
        streaming.start()
        report = Rebuild(pipe.settings, Services(pipe.settings).embedder, batch=16).run(switch=True)
        streaming.join()
        answered_at_switch, deadline = len(replies) + len(failures), time.monotonic() + 120
        while len(replies) + len(failures) < answered_at_switch + 2:  # questions after the switch too
            assert time.monotonic() < deadline, "no question answered after the switch"
            time.sleep(0.2)
        stop.set()
        asking.join()
        pipe.drain()
    finally:
        pipe.stop_workers()

    assert report.switched and report.generation == 2 and report.previous == 1 and report.mismatches == {}
    assert active_generation(pipe.settings) == 2
    assert failures == [] and len(replies) >= 3
    with pipe.store() as store:
        served = store_points(store, "acme")
        raw = {h.payload["turn_id"] for h in store.scroll(TURNS, "acme", limit=100_000)}
    assert raw == {t.turn_id for t in turns}  # written during the build and the switch: none lost
    assert served == record_points(pipe.settings, "acme")


def test_with_every_collection_deleted_writes_wait_questions_get_an_error_and_a_rebuild_restores_all(
    kafka, qdrant_server, tmp_path
):
    conversation, turns, _ = first_sessions(2)
    before = [t for t in turns if t.session_id == "S1"]
    during = [t for t in turns if t.session_id != "S1"]
    prefix = f"dis{uuid.uuid4().hex[:8]}_"
    env = {"MEMSTREAM_QDRANT_URL": qdrant_server.url, "MEMSTREAM_QDRANT_COLLECTION_PREFIX": prefix}
    pipe = Deployment(kafka, tmp_path / "p", {**env, "MEMSTREAM_STM_IDLE_S": "3", "MEMSTREAM_STM_TICK_S": "1"})
    server = QdrantClient(url=qdrant_server.url, check_compatibility=False)
    try:
        worker = pipe.start_worker("w1")
        pipe.produce(before)
        pipe.drain()
        for collection in server.get_collections().collections:  # the disaster
            if collection.name.startswith(prefix):
                server.delete_collection(collection.name)

        pipe.produce(during)
        deadline = time.monotonic() + 120
        while store_outages(worker.metrics_port) == 0:
            assert time.monotonic() < deadline, "the index stage should find the store gone"
            time.sleep(1)
        asked = time.monotonic()
        reply = pipe.ask(QUESTION, tenant="acme", conversation=conversation, timeout_s=30)
        assert not reply.ok and "is gone from the server" in (reply.error or "")
        assert time.monotonic() - asked < 30  # an error reply, not the asker's timeout
        assert pipe.dead_letters() == [] and worker.alive()

        report = Rebuild(pipe.settings, Services(pipe.settings).embedder).run(switch=True)
        assert report.switched and report.mismatches == {}
        pipe.drain()  # the held writes go on, into the new generation
        assert pipe.ask(QUESTION, tenant="acme", conversation=conversation, answer=False).ok
    finally:
        pipe.stop_workers()
        server.close()
    assert pipe.dead_letters() == []
    with pipe.store() as store:
        served = store_points(store, "acme")
        raw = {h.payload["turn_id"] for h in store.scroll(TURNS, "acme", limit=100_000)}
    assert raw == {t.turn_id for t in turns}
    assert served == record_points(pipe.settings, "acme")
