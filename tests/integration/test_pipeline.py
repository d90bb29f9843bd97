"""The whole pipeline on the real broker, LLM server, embedder and Qdrant."""

from __future__ import annotations

import time
import urllib.request

import orjson
import pytest

from memstream.client import MemoryClient, QueryTimeout
from memstream.processors.write.index import CARDS, SCENES, TRIGGERS, TURNS
from memstream.schemas import CompressedTurn, MemoryWrite, StmFlush, decode_compressed_message, memory_writes

from .conftest import first_sessions, metric_total, record_collections, unique_id

pytestmark = pytest.mark.integration

# LoCoMo conv-26 single-hop question (category 4) whose gold turn is in session 2; with our own
# conversation (no ../shared) the matching question of the demo file is used instead.
LOCOMO_QUESTION = ("What did the charity race raise awareness for?", "D2:2")
DEMO_QUESTION = ("What is the name of Tomas's dog?", "D2:5")


def sample_value(exposition: str, series: str) -> float:
    for line in exposition.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} not exported")


@pytest.fixture
def shared(shared_pipeline, local_llm):
    """The module's deployment for tests that only write and read, each under a tenant of its own."""
    return shared_pipeline(**local_llm, MEMSTREAM_EXTRACT_MODE="extractive")


def single_hop(sample_id: str) -> tuple[str, str]:
    return LOCOMO_QUESTION if sample_id == "conv-26" else DEMO_QUESTION


def test_turns_become_cards_and_raw_turns_and_a_question_finds_its_gold_turn(shared):
    tenant = unique_id("acme")
    conversation, turns, _ = first_sessions(2, tenant=tenant)
    pipe = shared
    port = int(pipe.env["MEMSTREAM_METRICS_PORT"])
    # The worker is the module's: what it did for this test is what its counters grew by.
    series = {
        "compress": ("memstream_stage_messages_in_total", {"stage": "compress"}),
        "query": ("memstream_stage_messages_in_total", {"stage": "query"}),
        "answer": ("memstream_llm_calls_total", {"model": "smollm2", "stage": "answer"}),
    }
    before = {k: metric_total(port, name, **labels) for k, (name, labels) in series.items()}
    assert pipe.produce(turns) == len(turns)
    pipe.drain()

    question, gold = single_hop(conversation)
    reply = pipe.ask(question, tenant=tenant, conversation=conversation)
    assert reply.ok, reply.error
    assert reply.correlation_id and reply.access_profile == "lookup"
    assert reply.answer_mode == "llm" and reply.answer, "the local LLM server answered"
    assert [c.stage for c in reply.costs] == ["answer"] and reply.costs[0].prompt_tokens > 0
    turn_ids = [tid for e in reply.evidence for tid in e.turn_ids]
    assert gold in turn_ids, f"gold {gold} not in evidence {turn_ids}"
    assert all(e.event_time is not None for e in reply.evidence)

    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    after = {k: metric_total(port, name, **labels) for k, (name, labels) in series.items()}
    assert after["compress"] - before["compress"] == len(turns)
    assert after["query"] - before["query"] == 1
    assert after["answer"] - before["answer"] == 1
    assert sample_value(metrics, "memstream_llm_enabled") == 1
    assert sample_value(metrics, "memstream_compression_enabled") == 0

    dia_ids = {t.turn_id for t in turns}
    stored = record_collections(pipe.settings, tenant)  # what the store holds, read while the worker runs
    raw, cards = stored[TURNS], stored[CARDS]
    assert {p["turn_id"] for p in raw} == dia_ids and len(raw) == len(turns)
    assert cards and all(set(p["turn_ids"]) <= dia_ids for p in cards)
    assert {tid for p in cards for tid in p["turn_ids"]} == dia_ids  # every turn is reachable
    assert len(stored[SCENES]) >= 2  # at least one scene per session


def test_the_same_turns_twice_leave_the_point_count_unchanged(make_pipeline):
    conversation, turns, _ = first_sessions(1)
    turns = turns[:6]  # a few turns make cards, scenes and raw turns: any duplicate changes a count
    pipe = make_pipeline()
    pipe.start_worker()
    pipe.produce(turns)
    pipe.drain()
    pipe.stop_workers()
    with pipe.store() as store:
        before = {c: store.count(c) for c in (CARDS, SCENES, TURNS, "triggers")}
    assert before[TURNS] == len(turns)

    pipe.start_worker()
    pipe.produce(turns)  # a chat platform retrying, or a replay of the log
    pipe.drain()
    pipe.stop_workers()
    with pipe.store() as store:
        after = {c: store.count(c) for c in (CARDS, SCENES, TURNS, "triggers")}
    assert after == before


def test_an_unfinished_session_is_written_once_the_conversation_idles(shared):
    tenant = unique_id("idle")
    conversation, turns, _ = first_sessions(1, tenant=tenant)
    open_session = [t.model_copy(update={"last_in_session": False}) for t in turns[:5]]  # no end marker
    pipe = shared  # its conversations idle after MEMSTREAM_STM_IDLE_S=3
    pipe.produce(open_session)
    pipe.drain(flush=False)  # consumed, but waiting in the sensory window: nothing is written yet
    deadline = time.monotonic() + 90
    writes: list[MemoryWrite] = []
    while not writes and time.monotonic() < deadline:
        time.sleep(1)
        writes = [w for w in memory_writes(v for _, v in pipe.read_topic("cards")) if w.tenant_id == tenant]
    assert writes, "the idle window and buffer were flushed"
    flushes = [f for _, v in pipe.read_topic("stm.flush") if (f := StmFlush.from_bytes(v)).tenant_id == tenant]
    assert [f.reason for f in flushes] == ["idle"]
    assert sorted(t.turn_id for w in writes for t in w.source_turns) == sorted(t.turn_id for t in open_session)


def test_sessions_share_a_buffer_until_a_client_flushes_it(make_pipeline):
    conversation, turns, _ = first_sessions(2)
    # The last turns of each session, its end marker included: two sessions are what the test is about.
    sessions = dict.fromkeys(t.session_id for t in turns)  # in order
    turns = [t for s in sessions for t in [u for u in turns if u.session_id == s][-3:]]
    assert sum(t.last_in_session for t in turns) == 2
    pipe = make_pipeline(MEMSTREAM_STM_IDLE_S=600, MEMSTREAM_STM_TOKENS=100_000)  # nothing idles or fills
    pipe.start_worker()
    pipe.produce(turns)
    # Every message handled, the session ends included: a flush they made would be on the topic now.
    pipe.drain(flush=False)
    assert pipe.read_topic("stm.flush") == [], "session ends do not flush the buffer"

    with MemoryClient(pipe.settings) as client:
        assert client.flush([("acme", conversation)]) == 1
    pipe.drain(flush=False)
    flushes = [StmFlush.from_bytes(v) for _, v in pipe.read_topic("stm.flush")]
    assert [f.reason for f in flushes] == ["forced"]
    [flush] = flushes
    assert [t.turn.turn_id for t in flush.turns()] == [t.turn_id for t in turns]  # both sessions, one call
    assert {t.turn.session_id for t in flush.turns()} == {t.session_id for t in turns}
    writes = memory_writes(v for _, v in pipe.read_topic("cards"))
    assert len(writes) == 1 and {t.turn_id for t in writes[0].source_turns} == {t.turn_id for t in turns}
    pipe.stop_workers()


def test_a_locomo_session_compressed_and_extracted_by_the_llm_gives_valid_scenes_cards_and_triggers(
    make_pipeline, local_llm, compressor_model
):
    conversation, turns, _ = first_sessions(1)
    pipe = make_pipeline(**local_llm, MEMSTREAM_EXTRACT_MODE="llm", MEMSTREAM_COMPRESSOR_MODEL=compressor_model)
    pipe.start_worker()
    pipe.produce(turns)
    pipe.drain(timeout_s=600)

    on_topic = [decode_compressed_message(v) for _, v in pipe.read_topic("turns.compressed")]
    compressed = [c for c in on_topic if isinstance(c, CompressedTurn)]  # and the drain's flush tick
    assert {c.turn.turn_id for c in compressed} == {t.turn_id for t in turns}
    assert all(c.compressor.startswith("llmlingua1:") for c in compressed)
    assert sum(c.tokens_out for c in compressed) < sum(c.tokens_in for c in compressed)
    assert all(
        c.turn.text == t.text
        for c, t in zip(sorted(compressed, key=lambda c: c.turn.turn_id), sorted(turns, key=lambda t: t.turn_id))
    )  # raw kept for Replay

    writes = memory_writes(v for _, v in pipe.read_topic("cards"))
    assert writes, "the session's flushes produced memory writes"
    ids = {t.turn_id for t in turns}
    for write in writes:
        # The tiny test model may fail the schema twice; then the flush falls back, and says so.
        assert write.mode in ("llm", "extractive_fallback")
        [cost] = write.costs
        assert cost.stage == "extract" and 1 <= cost.calls <= 2 and cost.prompt_tokens > 0
        scene_ids = {s.scene_id for s in write.scenes}
        assert write.scenes and all(set(s.turn_ids) <= ids and s.start_time <= s.end_time for s in write.scenes)
        assert write.cards and all(set(c.provenance.turn_ids) <= ids for c in write.cards)
        assert all(c.provenance.scene_id in scene_ids for c in write.cards)
        assert all(c.subject.strip() and c.valid_from for c in write.cards)
    assert sorted(t.turn_id for w in writes for t in w.source_turns) == sorted(ids)  # every turn, once
    assert any(c.entity_triggers for w in writes for c in w.cards)

    pipe.stop_workers()
    with pipe.store() as store:
        triggers = store.scroll(TRIGGERS, "acme", limit=10_000)
        cards = {h.id for h in store.scroll(CARDS, "acme", limit=10_000)}
        scenes = {h.id for h in store.scroll(SCENES, "acme", limit=10_000)}
    assert triggers and all(t.payload["host_id"] in (cards | scenes) for t in triggers)
    assert {t.payload["family"] for t in triggers} >= {"entity"}


def test_a_query_for_another_tenant_never_sees_these_memories(shared):
    tenant_a, tenant_b = unique_id("tenant-a"), unique_id("tenant-b")
    conversation, turns, _ = first_sessions(1, tenant=tenant_a)
    pipe = shared
    pipe.produce(turns)
    pipe.drain()
    question = turns[2].text  # the very words of a stored turn
    mine = pipe.ask(question, tenant=tenant_a, conversation=conversation, answer=False)
    assert mine.evidence, "the owner finds it"
    for profile in ("lookup", "compose", "replay"):
        other = pipe.ask(question, tenant=tenant_b, conversation=conversation, profile=profile, answer=False)
        assert other.ok and other.evidence == [] and other.profile_text is None, profile


def test_malformed_messages_go_to_the_dead_letter_topic_and_the_worker_goes_on(shared):
    tenant = unique_id("acme")
    conversation, turns, _ = first_sessions(1, tenant=tenant)
    pipe = shared
    good = orjson.loads(turns[0].to_bytes())
    key = f"{tenant}/{conversation}".encode()
    bad = {
        "bad json": b"{this is not json " + tenant.encode(),  # its own: the dead-letter topic is the module's
        "missing field": orjson.dumps({k: v for k, v in good.items() if k != "speaker"}),
        "wrong type": orjson.dumps({**good, "event_time": ["not", "a", "time"]}),
        "2 MB text": orjson.dumps({**good, "turn_id": "D99:1", "text": "x" * (2 * 1024 * 1024)}),
    }
    for value in bad.values():
        pipe.produce_raw("turns", key, value)
    # Long, not too long: 80,000 characters go on as three chunks of the turn's id.
    long_text = " ".join(f"Line {i} of a very long pasted document." for i in range(2000))[:80_000]
    long_turn = turns[0].model_copy(update={"turn_id": "D1:900", "text": long_text})
    pipe.produce([*turns[:2], long_turn, turns[2].model_copy(update={"last_in_session": True})])
    pipe.drain()

    # This test's letters: its tenant's, and any whose message is one of its own (whatever tenant was read).
    letters = [d for d in pipe.dead_letters() if d.tenant_id == tenant or d.original in bad.values()]
    assert len(letters) == len(bad)
    assert {letter.original for letter in letters} == set(bad.values())  # nothing is lost
    assert all(letter.stage == "compress" and letter.topic == pipe.settings.topic("turns") for letter in letters)
    reasons = " | ".join(letter.reason for letter in letters)
    assert "not JSON" in reasons and "speaker" in reasons and "event_time" in reasons and "too long" in reasons
    assert all(letter.tenant_id == tenant for letter in letters)

    reply = pipe.ask(turns[1].text, tenant=tenant, conversation=conversation, answer=False)
    assert turns[1].turn_id in {tid for e in reply.evidence for tid in e.turn_ids}
    stored = {p["turn_id"]: p["text"] for p in record_collections(pipe.settings, tenant)[TURNS]}
    chunks = sorted(t for t in stored if t.startswith("D1:900#"))
    assert chunks == ["D1:900#1", "D1:900#2", "D1:900#3"]
    assert " ".join(stored[c] for c in chunks).split() == long_text.split()


def test_a_client_waiting_past_its_timeout_gets_a_clear_error(make_pipeline):
    pipe = make_pipeline()  # topics exist, but no worker answers
    with pytest.raises(QueryTimeout, match="no reply to query .* within 2s .*'query' stage"):
        pipe.ask("anyone there?", tenant="acme", conversation="c1", timeout_s=2)
