"""Crash recovery: kill -9 of a worker loses nothing, the sensory window and the STM buffer included."""

from __future__ import annotations

import time

import pytest

from memstream.processors.write.index import TURNS
from memstream.streams import runtime

from .conftest import first_sessions, latest_table_value, record_points, store_points

pytestmark = pytest.mark.integration


def test_kill_9_mid_ingestion_then_restart_every_turn_indexed_exactly_once(make_pipeline):
    conversation, turns, _ = first_sessions(2)
    session1 = [t for t in turns if t.session_id == "S1"]
    half = len(session1) - 2  # with LoCoMo: a full sensory window went on to the STM, the rest waits in it
    # A long idle timeout: nothing flushes on its own, so buffered turns must survive the crash.
    pipe = make_pipeline(MEMSTREAM_STM_IDLE_S=600)
    pipe.start_worker("before-crash")

    pipe.produce(session1[:half])
    pipe.drain(flush=False)  # offsets committed: these turns now live only in the segmenter and STM tables
    key = f"acme/{conversation}"
    in_stm = [t["turn"]["turn_id"] for g in latest_table_value(pipe, "stm", key).get("groups", []) for t in g["turns"]]
    in_window = [t["turn"]["turn_id"] for t in latest_table_value(pipe, "segmenter", key).get("pending", [])]
    assert in_window, "the sensory window's changelog holds the newest turns"
    assert in_stm + in_window == [t.turn_id for t in session1[:half]]

    pipe.produce(turns[half:])
    time.sleep(1.5)  # mid-processing
    [worker] = pipe.workers
    worker.kill()
    pipe.workers = []

    pipe.start_worker("after-crash")
    pipe.drain()
    pipe.stop_workers()
    with pipe.store() as store:
        raw = store.scroll(TURNS, "acme", limit=10_000)
        stored = store_points(store, "acme")
    ids = [h.payload["turn_id"] for h in raw]
    assert len(ids) == len(set(ids)) == len(turns)
    assert set(ids) == {t.turn_id for t in turns}
    # Killed between a record write and its store write or not, the store holds no point the record
    # lacks, and after the redelivery the two agree point for point.
    assert stored == record_points(pipe.settings, "acme")


def test_a_worker_started_while_the_broker_is_down_waits_for_it_and_then_runs(own_broker, make_pipeline):
    """A broker restart while workers start (they load models for seconds first) must not kill them.
    On a broker of its own: the shared one stays up for the tests beside it."""
    pipe = make_pipeline(own_broker)
    _, turns, _ = first_sessions(1)
    runtime.KAFKA.stop(own_broker)
    try:
        worker = runtime.spawn_worker(pipe.env, pipe.settings.data_dir / "logs" / "early.log")
        pipe.workers.append(worker)
        deadline = time.monotonic() + 180
        while "unreachable (down, or refusing these credentials): waiting" not in worker.log_text():
            assert worker.alive(), worker.log_tail()
            assert time.monotonic() < deadline, worker.log_tail()
            time.sleep(0.5)
    finally:
        runtime.KAFKA.start(own_broker)
    runtime.wait_worker_ready(worker)
    assert "reachable again" in worker.log_text()
    pipe.produce(turns)
    pipe.drain()
    pipe.stop_workers()
    with pipe.store() as store:
        raw = store.scroll(TURNS, "acme", limit=10_000)
    assert sorted(h.payload["turn_id"] for h in raw) == sorted(t.turn_id for t in turns)
