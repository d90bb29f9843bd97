"""History imports through the bulk lane, over the real broker, worker and embedded store: a live
turn of another tenant is in memory while an import is still being let in; imported turns come
before the conversation's live turns in its order; and an old fact imported after a newer live one
is superseded by it at sleep time, never the other way round."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest

from memstream.client import MemoryClient
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.processors.write.index import CARDS
from memstream.schemas import Turn
from memstream.schemas.background import is_background
from memstream.schemas.topics import Topic, message_kind
from memstream.streams.kafka_options import client_options

from .conftest import metric_total

pytestmark = pytest.mark.integration

T0 = datetime(2024, 3, 4, 18, 0, tzinfo=timezone.utc)


def said(conversation: str, turn_id: str, text: str, day: int, tenant: str = "acme") -> Turn:
    """Maria's turn, unnumbered (the pipeline or the importer numbers it)."""
    return Turn(
        tenant_id=tenant,
        conversation_id=conversation,
        session_id=f"S{day}",
        turn_id=turn_id,
        speaker="Maria",
        text=text,
        event_time=T0 + timedelta(days=day),
    )


def history(tenant: str, copies: int = 16) -> list[Turn]:
    """The packaged conversation (30 turns) as an export of ``copies`` conversations would give it:
    no positions. Enough that letting it in takes longer than a live turn's way to memory."""
    sample = load_locomo(demo_conversation_path())[0]
    turns = [t.model_copy(update={"metadata": {}}) for t in locomo_turns(sample, tenant_id=tenant)]
    return [t.model_copy(update={"conversation_id": f"old-{i}"}) for i in range(copies) for t in turns]


LIVE_FACTS = ["I keep bees on the library roof.", "The bees swarmed on Tuesday.", "I sold six jars of honey."]


def test_live_turns_go_ahead_of_an_import_that_is_then_let_in_whole(make_pipeline):
    # A stream buffer of 128 records: the import's waiting turns pass faust's pressure mark (102)
    # at once. A fetch larger than the room above it filled the buffer, and delivery to every
    # stage stopped: the live turns' later steps never came, and the import waited on them.
    pipe = make_pipeline(MEMSTREAM_EXTRACT_MODE="extractive", MEMSTREAM_STREAM_BUFFER_RECORDS="128")
    pipe.start_worker()
    port = pipe.workers[0].metrics_port
    old = history("importer")
    with MemoryClient(pipe.settings) as client:
        assert client.import_history(old) == len(old)
        for i, fact in enumerate(LIVE_FACTS):
            client.remember([said("live", f"l{i}", fact, 400 + i, tenant="beekeeper")])
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                page = client.read("timeline", tenant_id="beekeeper", conversation_id="live")
                if any(r.get("turn_id") == f"l{i}" for r in page.records):
                    break
                time.sleep(0.2)
            let_in = metric_total(port, "memstream_imported_turns_total")
            print(f"live turn {i} was in memory with {let_in:.0f} of {len(old)} imported turns let in")
            assert any(r.get("turn_id") == f"l{i}" for r in page.records), f"live turn {i} reached memory"
            if i == 0:
                assert let_in < len(old), f"the live turn was in memory after the import ({let_in} of {len(old)})"
        pipe.drain()
        assert metric_total(port, "memstream_imported_turns_total") == len(old)
        assert metric_total(port, "memstream_bulk_wait_seconds_count") == len(old)
        stored = client.read("timeline", tenant_id="importer", conversation_id="old-3", limit=5000)
    turns = [r for r in stored.records if r["collection"] == "turns"]
    one = [t for t in old if t.conversation_id == "old-3"]
    assert len(turns) == len(one)
    by_time = sorted(one, key=lambda t: t.event_time)
    assert [r["turn_id"] for r in turns] == [t.turn_id for t in by_time], "in event-time order"
    assert [r["seq"] for r in turns] == list(range(-len(one), 0)), "numbered before any live turn"
    assert stored.summary["first_seq"] == -len(one)


async def headers_by_tenant(settings, topic: str) -> dict[str, list[bool]]:
    """Per tenant (the record key's), whether each record on ``topic`` that carries turns is marked as
    background work."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(settings.topic(topic), **client_options(settings), auto_offset_reset="earliest")
    await consumer.start()
    try:
        marks: dict[str, list[bool]] = {}
        while batch := await consumer.getmany(timeout_ms=3000):
            for records in batch.values():
                for r in records:
                    if not message_kind(r.value).endswith("_tick"):  # a timer's, neither live nor imported
                        marks.setdefault(r.key.decode().split("/")[0], []).append(is_background(r.headers))
        return marks
    finally:
        await consumer.stop()


def test_an_imports_later_steps_are_marked_and_let_questions_go_first(make_pipeline):
    pipe = make_pipeline(MEMSTREAM_EXTRACT_MODE="extractive")
    pipe.start_worker()
    port = pipe.workers[0].metrics_port
    old = history("importer", copies=8)
    with MemoryClient(pipe.settings) as client:
        client.remember([said("live", f"l{i}", fact, 400 + i, tenant="beekeeper") for i, fact in enumerate(LIVE_FACTS)])
        client.import_history(old)
        # Questions one after another while the import goes through: the gate lets imported turns in
        # between them, and their later steps find the next question in the worker.
        asked = 0
        while metric_total(port, "memstream_imported_turns_total") < len(old) and asked < 2000:
            client.ask("Who keeps bees?", tenant_id="beekeeper", conversation_id="live", answer=False)
            asked += 1
        pipe.drain()
        yielded = metric_total(port, "memstream_background_yield_seconds_count")
    print(f"{asked} questions; background handlings that waited for one: {yielded:.0f}")
    assert yielded > 0, "no background handling waited for a question"
    for topic in (Topic.TURNS_COMPRESSED, Topic.SEGMENTS, Topic.STM_FLUSH):
        marks = asyncio.run(headers_by_tenant(pipe.settings, topic))
        assert marks["importer"] and all(marks["importer"]), f"every imported record on {topic} is marked"
        assert marks["beekeeper"] and not any(marks["beekeeper"]), f"no live record on {topic} is marked"


def test_an_old_fact_imported_late_is_superseded_by_the_newer_live_one(make_pipeline):
    pipe = make_pipeline(
        MEMSTREAM_EXTRACT_MODE="extractive", MEMSTREAM_CONSOLIDATE_TAU="0.68", MEMSTREAM_SLEEP_IDLE_S="3600"
    )
    pipe.start_worker()
    with MemoryClient(pipe.settings) as client:
        client.remember([said("maria", "m21", "Maria now lives in Denver.", 21)])
        pipe.drain()
        client.import_history([said("maria", "m0", "Maria lives in Boston.", 0)])
        pipe.drain()
        page = client.read("timeline", tenant_id="acme", conversation_id="maria")
        assert [(r["turn_id"], r["seq"]) for r in page.records if r["collection"] == "turns"] == [
            ("m0", -1),
            ("m21", 0),
        ], "the imported turn comes first"
    assert pipe.consolidate(tenant="acme", conversation="maria") == 1
    pipe.drain()
    pipe.stop_workers()
    with pipe.store() as store:
        cards = [h.payload for h in store.scroll(CARDS, "acme", limit=100)]
    boston = [c for c in cards if "Boston" in c["text"]]
    denver = [c for c in cards if "Denver" in c["text"]]
    assert boston and denver, cards
    assert all(c.get("superseded_by") for c in boston), f"the older fact, imported last, is superseded: {cards}"
    assert not any(c.get("superseded_by") or c.get("valid_to") for c in denver), "the newer live fact stays current"


def test_the_cli_imports_history_and_waits_with_a_bar_until_it_is_let_in_and_written(make_pipeline):
    pipe = make_pipeline(MEMSTREAM_EXTRACT_MODE="extractive")
    pipe.start_worker()
    args = [sys.executable, "-m", "memstream.streams.cli", "ingest", str(demo_conversation_path())]
    args += ["--bulk", "--wait", "--sessions", "1", "--tenant", "cli"]
    run = subprocess.run(args, env={**os.environ, **pipe.env}, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "let in" in run.stdout and "pipeline drained, every turn written" in run.stdout, run.stdout
    sample = load_locomo(demo_conversation_path())[0]
    sent = list(locomo_turns(sample, tenant_id="cli", max_sessions=1))
    with MemoryClient(pipe.settings) as client:
        page = client.read("timeline", tenant_id="cli", conversation_id=sample.sample_id)
    seqs = [r["seq"] for r in page.records if r["collection"] == "turns"]
    # The loader numbers LoCoMo turns from 0 itself: a producer's positions are kept.
    assert seqs == [t.seq for t in sent]
    assert metric_total(pipe.workers[0].metrics_port, "memstream_imported_turns_total") == len(sent)
