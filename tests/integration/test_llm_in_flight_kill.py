"""A kill -9 of a worker with LLM calls in flight (issue 44), through the real broker and the real
local LLM server: nothing lost, nothing doubled, a conversation's writes in flush order. A module of
its own (helpers from test_llm_in_flight.py), so make test's two workers can run it beside the others."""

from __future__ import annotations

from collections import defaultdict

import pytest

from memstream.processors.write.index import TURNS
from memstream.schemas import MemoryWrite

from . import test_llm_in_flight as base

pytestmark = pytest.mark.integration


def test_kill_9_with_calls_in_flight_loses_and_doubles_nothing(make_pipeline, local_llm):
    # Twelve turns each in smaller buffers: two flushes per conversation before the drain, enough for
    # a write out and three flushes in extraction, two of them calls at the server: few calls for
    # the serial local model, which drops a call whose client (the killed worker) has gone.
    convs = {tenant: turns[:12] for tenant, turns in base.conversations().items()}
    small = {"MEMSTREAM_STM_TOKENS": "64", "MEMSTREAM_LLM_MAX_CONCURRENCY": "2"}
    pipe = make_pipeline(**(local_llm | base.IN_FLIGHT_ENV | small))
    pipe.start_worker("before-kill")
    for turns in convs.values():
        pipe.produce(turns)

    def in_flight_now() -> bool:
        flushed = sum(map(len, base.flushes_on_topic(pipe).values()))
        written = sum(isinstance(m, MemoryWrite) for ms in base.cards_messages(pipe).values() for m in ms)
        return written >= 1 and flushed - written >= 3

    base.wait_for(in_flight_now, 240, "a write out and three flushes in extraction")
    [worker] = pipe.workers
    worker.kill()
    pipe.workers = []
    pipe.start_worker("after-kill")
    # The flushes made so far, the ones in flight at the kill among them, extracted and written; what
    # the windows and buffers still hold stays there (its flush would be more calls, none in flight at
    # the kill), and their turns are in the store as fresh turns.
    pipe.drain(timeout_s=240, flush=False)
    pipe.stop_workers()

    flushes, cards = base.flushes_on_topic(pipe), base.cards_messages(pipe)
    for key, flush_ids in flushes.items():
        writes = [m for m in cards[key] if isinstance(m, MemoryWrite)]
        assert {w.flush_id for w in writes} == set(flush_ids), f"{key}: a flush was lost"
        by_flush: dict[str, set[tuple[str, ...]]] = defaultdict(set)
        for w in writes:
            by_flush[w.flush_id].add(tuple(sorted(c.card_id for c in w.cards)))
        doubled = {f: v for f, v in by_flush.items() if len(v) > 1}
        assert not doubled, f"{key}: a flush written twice with different cards: {doubled}"
        firsts = list(dict.fromkeys(w.flush_id for w in writes))  # a redelivery repeats one already out
        assert firsts == sorted(firsts, key=flush_ids.index), f"{key}: writes out of flush order"
    with pipe.store() as store:
        for tenant, turns in convs.items():
            ids = [h.payload["turn_id"] for h in store.scroll(TURNS, tenant, limit=10_000)]
            assert sorted(ids) == sorted(t.turn_id for t in turns), f"{tenant}: turns lost or doubled"
