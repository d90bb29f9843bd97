"""A conversation that goes quiet leaves no table state behind, and one that comes back continues,
through the real broker, worker and embedded store: after its window drained, its buffer flushed and
its sleep-time run, its entries in the segment, stm and consolidate tables, and the sealed pieces of
its recent turn ids, are deleted (a tombstone each on their changelogs); then it speaks again, and
its new turns are numbered after the old ones, written and indexed, and none of its earlier cards
is lost."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import orjson
import pytest

from memstream.client import MemoryClient
from memstream.schemas import Turn, memory_writes
from memstream.topology import TOPOLOGY

from .conftest import metric_total

pytestmark = pytest.mark.integration

TENANT = "acme"
CONVERSATION = "returns"
KEY = f"{TENANT}/{CONVERSATION}"
BEFORE = ["I moved to Porto in March.", "The flat is near the river.", "My sister visits in June."]
AFTER = ["I started learning the cello.", "Lessons are on Tuesday evenings.", "My teacher is called Ines."]
STAGES = ("segment", "stm", "consolidate")


def said(i: int, text: str) -> Turn:
    """Nora's turn ``i`` as the SDK sends it: no seq, the pipeline numbers it."""
    at = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc) + timedelta(minutes=i)
    return Turn(
        tenant_id=TENANT,
        conversation_id=CONVERSATION,
        session_id="S1",
        speaker="Nora",
        turn_id=f"m{i}",
        text=text,
        event_time=at,
    )


def changelog_values(pipe, stage: str, table: str = "", key: str = KEY) -> list[bytes | None]:
    """The values the stage's table changelog holds for ``key``, oldest first (None: a tombstone)."""
    topic = f"{pipe.group}-{table or TOPOLOGY[stage].table}-changelog"
    return [v for k, v in pipe.read_topic(topic, prefixed=False) if k and orjson.loads(k) == key]


def segmented_ids(pipe) -> list[str]:
    """The turn ids the segmenter emitted, in order (a turn dropped as seen is not among them)."""
    values = (orjson.loads(v) for _, v in pipe.read_topic("segments"))
    return [v["item"]["turn"]["turn_id"] for v in values if "item" in v]


def evicted(pipe, stage: str) -> float:
    return metric_total(pipe.workers[0].metrics_port, "memstream_state_evicted_total", stage=stage)


def test_a_quiet_conversation_is_evicted_and_continues_when_it_comes_back(make_pipeline):
    pipe = make_pipeline(
        MEMSTREAM_EXTRACT_MODE="extractive",
        MEMSTREAM_SLEEP_IDLE_S="4",
        MEMSTREAM_STATE_EVICT_IDLE_S="25",  # time to send a turn again before the entries go
        MEMSTREAM_STATE_SEEN_PIECE_IDS="2",  # the first two turn ids are sealed into a piece of their own
    )
    pipe.start_worker()
    turns = [said(i, text) for i, text in enumerate(BEFORE + AFTER)]
    with MemoryClient(pipe.settings) as client:
        client.remember(turns[: len(BEFORE)])
        pipe.drain()
        cards_before = {c.card_id for w in memory_writes(v for _, v in pipe.read_topic("cards")) for c in w.cards}
        assert cards_before, "the first turns made cards"
        for stage in ("segment", "stm"):
            piece = changelog_values(pipe, stage, TOPOLOGY[stage].seen_table, f"{KEY}#0")
            assert piece and orjson.loads(piece[0]) == ["m0", "m1"], f"{stage} sealed the first two ids: {piece}"
            entry = [v for v in changelog_values(pipe, stage) if v][-1]
            assert orjson.loads(entry)["seen"] == ["m2"], "the entry holds the rest"
        client.remember(turns[:1])  # sent again: its id is only in the sealed piece
        pipe.drain()
        assert segmented_ids(pipe) == ["m0", "m1", "m2"], "the turn seen in a sealed piece is dropped"

        # Quiet: the idle flush, the sleep-time run, then the eviction of each entry.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(evicted(pipe, stage) >= 1 for stage in STAGES):
            time.sleep(1)
        assert all(evicted(pipe, stage) >= 1 for stage in STAGES), {s: evicted(pipe, s) for s in STAGES}
        for stage in STAGES:
            values = changelog_values(pipe, stage)
            assert values and values[0] is not None, f"{stage} kept an entry for the conversation first"
            assert values[-1] is None, f"{stage}'s changelog ends with a tombstone for it"
            if TOPOLOGY[stage].seen_table:
                piece = changelog_values(pipe, stage, TOPOLOGY[stage].seen_table, f"{KEY}#0")
                assert piece[-1] is None, f"{stage}'s sealed piece went with the entry"

        # It comes back.
        client.remember(turns[len(BEFORE) :])
        pipe.drain()
        writes = memory_writes(v for _, v in pipe.read_topic("cards"))
        written = {t.turn_id: t.seq for w in writes for t in w.source_turns}
        assert written == {t.turn_id: i for i, t in enumerate(turns)}, "positions go on after the evicted window's"
        stored = client.read("timeline", tenant_id=TENANT, conversation_id=CONVERSATION, limit=200)
    kept = {r["turn_id"]: r.get("seq") for r in stored.records if r["collection"] == "turns"}
    assert kept == written
    cards_now = {r.get("card_id") for r in stored.records if r["collection"] == "cards"}
    cards_all = {c.card_id for w in writes for c in w.cards}
    assert cards_all > cards_before, "the new turns made cards"
    assert cards_all <= cards_now, "every card is in the store, the earlier ones too"
    reply = pipe.ask("Who is the cello teacher?", tenant=TENANT, conversation=CONVERSATION, answer=False)
    assert reply.ok, reply.error
    assert any("m5" in e.turn_ids for e in reply.evidence), reply.evidence
