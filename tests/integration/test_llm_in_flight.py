"""Many LLM calls in flight per worker (issue 44), through the real broker and the real local LLM
server: one conversation's flushes are extracted and written in order while other conversations'
flushes are in flight beside them, a forget behind a conversation's flushes lands after them, and
429s slow the stage instead of failing its flushes (the kill -9 with calls in flight:
test_llm_in_flight_kill.py)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from datetime import datetime, timezone

import pytest

from memstream.adapters.openai_llm import OpenAICompatibleLLM
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.infra.llm import replay_server as replay
from memstream.processors.write.extract import LlmExtractor
from memstream.processors.write.index import CARDS, TURNS
from memstream.schemas import Forget, MemoryWrite, StmFlush, Turn, memory_writes
from memstream.schemas.memory import FlushSegment
from memstream.schemas.topics import Topic, decode_cards_message
from tests.factories import compressed

from .conftest import first_sessions, metric_total

pytestmark = pytest.mark.integration

TENANTS = ("t1", "t2")
# Small buffers: several flushes per conversation, each a short call for the local model. The calls
# are cut short (64 tokens, where a card takes ~250): each flush's call and its repair call are real
# and in flight at the server, a few seconds each, and the flush then falls back to the extractive
# mode. What these tests check is the order, loss and doubling of flushes around calls in flight, not
# the cards' text (test_pipeline.py checks the LLM's cards; the 429 test below compares them).
IN_FLIGHT_ENV = {
    "MEMSTREAM_LLM_IN_FLIGHT": "8",
    "MEMSTREAM_LLM_MAX_CONCURRENCY": "4",  # calls really in flight at the server, which runs one at a time
    "MEMSTREAM_STM_TOKENS": "96",
    "MEMSTREAM_SEGMENT_WINDOW_TURNS": "4",
    "MEMSTREAM_SEGMENT_CARRY_TURNS": "1",
    "MEMSTREAM_EXTRACT_MAX_CARDS": "1",
    "MEMSTREAM_EXTRACT_MAX_TOKENS": "64",  # the least the setting takes
    "MEMSTREAM_STM_IDLE_S": "600",  # nothing flushes on its own while the test looks
    "MEMSTREAM_SLEEP_IDLE_S": "3600",
}


def conversations() -> dict[str, list[Turn]]:
    out = {}
    for tenant in TENANTS:
        _, turns, _ = first_sessions(1, tenant=tenant)
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


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


class Peak(threading.Thread):
    """The highest value a worker's gauge shows, sampled every 0.2 s until ``stop``."""

    def __init__(self, port: int | None, name: str, **labels: str):
        super().__init__(daemon=True)
        self.port, self.name, self.labels, self.value = port, name, labels, 0.0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.value = max(self.value, metric_total(self.port, self.name, **self.labels))

    def stop(self) -> float:
        self.done.set()
        self.join()
        return self.value


def in_flush_order(writes: list[MemoryWrite], flush_ids: list[str]) -> bool:
    """Each write's flush comes later on memory.stm.flush than the flush of the write before it."""
    position = {f: i for i, f in enumerate(flush_ids)}
    seen = [position[w.flush_id] for w in writes]
    return seen == sorted(seen)


def test_flushes_in_flight_stay_in_order_and_a_forget_lands_behind_them(make_pipeline, local_llm):
    convs = conversations()
    pipe = make_pipeline(**(local_llm | IN_FLIGHT_ENV))
    worker = pipe.start_worker("in-flight")
    peak = Peak(worker.metrics_port, "memstream_stage_in_flight", stage="extract")
    peak.start()
    for turns in convs.values():
        pipe.produce(turns[: len(turns) - 2])  # the last turns wait in the window: the forget scrubs them
    forgotten = f"t2/{convs['t2'][0].conversation_id}"
    # Send the forget while t2's flushes are on the flush topic and extraction still has them.
    wait_for(lambda: len(flushes_on_topic(pipe).get(forgotten, [])) >= 2, 240, "two flushes of t2")
    assert len([m for m in cards_messages(pipe).get(forgotten, []) if isinstance(m, MemoryWrite)]) < len(
        flushes_on_topic(pipe)[forgotten]
    ), "the forget must be sent while t2's flushes are still being extracted"
    outcome = pipe.forget(tenant="t2", conversation=convs["t2"][0].conversation_id)
    assert outcome.done
    pipe.drain(timeout_s=900, flush=False)
    peak.stop()
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
        assert store.count(CARDS, "t2") == 0 and store.count(TURNS, "t2") == 0, "the forgotten conversation is gone"
        assert store.count(CARDS, "t1") > 0


# One card in room enough for it (a card takes ~250 tokens): each flush one call at the local model.
EXTRACT_ENV = {"MEMSTREAM_EXTRACT_MAX_CARDS": "1", "MEMSTREAM_EXTRACT_MAX_TOKENS": "320"}


def demo_flushes(n: int) -> list[StmFlush]:
    """``n`` flushes of the same four turns of the packaged conversation, each of its own tenant: one
    prompt for all (the tenant is not in it), so the real model is called for one flush, not ``n``. These
    four are ones the local model extracts with LLM-mode output within the test's budget."""
    [sample] = load_locomo(demo_conversation_path())
    turns = list(locomo_turns(sample, tenant_id="x"))[12:16]
    flushes = []
    for i in range(n):
        tenant = f"acme-{i}"
        chunk = [t.model_copy(update={"tenant_id": tenant}) for t in turns]
        flushes.append(
            StmFlush(
                tenant_id=tenant,
                conversation_id=chunk[0].conversation_id,
                flush_id=f"flush-{i}",
                reason="budget",
                segments=[FlushSegment(segment_id="s0", topic_label="talk", turns=[compressed(t) for t in chunk])],
                tokens=sum(len(t.text.split()) for t in chunk),
                flushed_at=datetime.now(timezone.utc),
            )
        )
    return flushes


def test_429s_slow_the_stage_instead_of_failing_its_flushes(make_pipeline, local_llm, tmp_path):
    """Against a provider-like endpoint (the local model's recorded answers, replayed) that takes two
    calls at once and answers 429 + Retry-After past that, four flushes in flight are all extracted
    by the LLM, as they were when the calls were recorded, none falling back to the extractive mode."""
    # Twice the endpoint's limit: with three, one was done before the last was sent (a CI run saw no 429).
    flushes = demo_flushes(4)
    recordings = tmp_path / "answers.jsonl"
    # Record the real model's answers to exactly the calls the worker will make: the same extractor,
    # with the worker's settings, through the replay server in record mode.
    record = ["record", "--upstream", local_llm["MEMSTREAM_LLM_BASE_URL"], "--recordings", str(recordings)]
    with replay.running(record, tmp_path / "record.log") as url:
        llm = OpenAICompatibleLLM(url, "smollm2", "none")
        # the worker's schema too: the local server's settings keep the enums of each flush's turn ids
        extractor = LlmExtractor(llm, max_tokens=320, max_cards=1, stable_schema=False)
        recorded = extractor.extract(flushes[0])  # the others' prompt is the same: answered from this recording
    assert recorded.mode == "llm", "the local model extracted the flush itself"

    pipe = make_pipeline(**(local_llm | EXTRACT_ENV))
    provider = ["replay", "--recordings", str(recordings), "--latency-fixed", "0.5", "--max-concurrency", "2"]
    with replay.running(provider, tmp_path / "replay.log") as url:
        env = {"MEMSTREAM_LLM_BASE_URL": url, "MEMSTREAM_LLM_IN_FLIGHT": "8", "MEMSTREAM_LLM_MAX_CONCURRENCY": "8"}
        worker = pipe.start_worker("limited", stages="extract", env=env)
        for flush in flushes:
            pipe.produce_raw(Topic.STM_FLUSH, flush.key.encode(), flush.to_bytes())
        pipe.drain(timeout_s=300, topics=[Topic.STM_FLUSH], flush=False)
        seen = replay.fetch_stats(url)
        limited = metric_total(worker.metrics_port, "memstream_llm_rate_limited_total")
        limit = metric_total(worker.metrics_port, "memstream_llm_concurrency_limit")
        pipe.stop_workers()
    assert seen["rate_limited"] > 0 and limited > 0, "the endpoint refused calls past its limit"
    assert seen["max_concurrent"] <= 2 and seen["misses"] == 0
    assert limit < 8, "the worker sends fewer calls at once after 429s"
    writes = {w.flush_id: w for w in memory_writes(v for _, v in pipe.read_topic(Topic.CARDS))}
    assert set(writes) == {f.flush_id for f in flushes}
    for flush_id, write in writes.items():
        assert write.mode == recorded.mode, f"{flush_id}: {write.mode}, recorded {recorded.mode}"
        assert [c.content for c in write.cards] == [c.content for c in recorded.cards]
