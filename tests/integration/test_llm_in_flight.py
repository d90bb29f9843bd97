"""Many LLM calls in flight per worker (issue 44), through the real broker and the real local LLM
server: one conversation's flushes are extracted and written in order while other conversations'
flushes are in flight beside them, a forget behind a conversation's flushes lands after them, and a
kill -9 with calls in flight loses and doubles nothing."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from memstream.processors.index import CARDS, TURNS
from memstream.schemas import Forget, MemoryWrite, StmFlush, Turn
from memstream.schemas.topics import Topic, decode_cards_message

from .conftest import first_sessions, metric_total

pytestmark = pytest.mark.integration

TENANTS = ("t1", "t2", "t3")
# Small buffers: several flushes per conversation, each a short call for the local model.
IN_FLIGHT_ENV = {
    "MEMSTREAM_LLM_IN_FLIGHT": "8",
    "MEMSTREAM_LLM_MAX_CONCURRENCY": "4",  # calls really in flight at the server, which runs one at a time
    "MEMSTREAM_STM_TOKENS": "96",
    "MEMSTREAM_SEGMENT_WINDOW_TURNS": "6",
    "MEMSTREAM_SEGMENT_CARRY_TURNS": "2",
    "MEMSTREAM_EXTRACT_MAX_CARDS": "2",
    "MEMSTREAM_EXTRACT_MAX_TOKENS": "384",
    "MEMSTREAM_STM_IDLE_S": "600",  # nothing flushes on its own while the test looks
    "MEMSTREAM_SLEEP_IDLE_S": "3600",
}


def conversations() -> dict[str, list[Turn]]:
    out = {}
    for tenant in TENANTS:
        _, turns, _ = first_sessions(2, tenant=tenant)
        out[tenant] = turns
    return out


def cards_messages(pipe) -> dict[str, list[MemoryWrite | Forget]]:  # Pipeline
    """Memory writes and forgets on memory.cards, per key, in the order they were produced."""
    by_key: dict[str, list[MemoryWrite | Forget]] = defaultdict(list)
    for key, value in pipe.read_topic(Topic.CARDS):
        message = decode_cards_message(value)
        if isinstance(message, (MemoryWrite, Forget)) and key:
            by_key[key.decode()].append(message)
    return by_key


def flushes_on_topic(pipe) -> dict[str, list[str]]:  # Pipeline
    out: dict[str, list[str]] = defaultdict(list)
    for key, value in pipe.read_topic(Topic.STM_FLUSH):
        if key and b'"stm_flush"' in value:
            out[key.decode()].append(StmFlush.from_bytes(value).flush_id)
    return out


def wait_for(condition, timeout_s: float, what: str, watch=None) -> None:
    """Poll ``condition``; ``watch`` is called at each poll too (to sample a gauge meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        if watch:
            watch()
        time.sleep(0.5)


class Peak:
    """The highest value a worker's gauge showed while sampled."""

    def __init__(self, port: int | None, name: str, **labels: str):
        self.port, self.name, self.labels, self.value = port, name, labels, 0.0

    def __call__(self) -> None:
        self.value = max(self.value, metric_total(self.port, self.name, **self.labels))


def in_flush_order(writes: list[MemoryWrite], flush_ids: list[str]) -> bool:
    """Each write's flush comes later on memory.stm.flush than the flush of the write before it."""
    position = {f: i for i, f in enumerate(flush_ids)}
    seen = [position[w.flush_id] for w in writes]
    return seen == sorted(seen)


def test_flushes_in_flight_stay_in_order_and_a_forget_lands_behind_them(make_pipeline, local_llm):
    convs = conversations()
    pipe = make_pipeline(**(local_llm | IN_FLIGHT_ENV))
    worker = pipe.start_worker("in-flight")
    for turns in convs.values():
        pipe.produce(turns[: len(turns) - 2])  # the last turns wait in the window: the forget scrubs them
    forgotten = f"t3/{convs['t3'][0].conversation_id}"
    peak = Peak(worker.metrics_port, "memstream_stage_in_flight", stage="extract")
    # Send the forget while t3's flushes are on the flush topic and extraction still has them.
    wait_for(lambda: len(flushes_on_topic(pipe).get(forgotten, [])) >= 2, 240, "two flushes of t3", peak)
    assert len([m for m in cards_messages(pipe).get(forgotten, []) if isinstance(m, MemoryWrite)]) < len(
        flushes_on_topic(pipe)[forgotten]
    ), "the forget must be sent while t3's flushes are still being extracted"
    outcome = pipe.forget(tenant="t3", conversation=convs["t3"][0].conversation_id)
    assert outcome.done
    pipe.drain(flush=False)
    pipe.stop_workers()

    flushes, cards = flushes_on_topic(pipe), cards_messages(pipe)
    assert peak.value > 1, "flushes of different conversations were extracted side by side"
    for key, flush_ids in flushes.items():
        writes = [m for m in cards[key] if isinstance(m, MemoryWrite)]
        assert {w.flush_id for w in writes} == set(flush_ids), f"{key}: every flush written"
        assert in_flush_order(writes, flush_ids), f"{key}: writes out of flush order"
    kinds = ["forget" if isinstance(m, Forget) else "write" for m in cards[forgotten]]
    assert "forget" in kinds and "write" not in kinds[kinds.index("forget") :], (
        f"{forgotten}: a write came after the forget behind it: {kinds}"
    )
    with pipe.store() as store:
        assert store.count(CARDS, "t3") == 0 and store.count(TURNS, "t3") == 0, "the forgotten conversation is gone"
        assert store.count(CARDS, "t1") > 0 and store.count(CARDS, "t2") > 0


def test_kill_9_with_calls_in_flight_loses_and_doubles_nothing(make_pipeline, local_llm):
    convs = conversations()
    pipe = make_pipeline(**(local_llm | IN_FLIGHT_ENV))
    pipe.start_worker("before-kill")
    for turns in convs.values():
        pipe.produce(turns)

    def in_flight_now() -> bool:
        flushed = sum(map(len, flushes_on_topic(pipe).values()))
        written = sum(isinstance(m, MemoryWrite) for ms in cards_messages(pipe).values() for m in ms)
        return written >= 1 and flushed - written >= 3

    wait_for(in_flight_now, 240, "a write out and three flushes in extraction")
    [worker] = pipe.workers
    worker.kill()
    pipe.workers = []
    pipe.start_worker("after-kill")
    pipe.drain()  # and flush what the windows and buffers still hold
    pipe.stop_workers()

    flushes, cards = flushes_on_topic(pipe), cards_messages(pipe)
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
