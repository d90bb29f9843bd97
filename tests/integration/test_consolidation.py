"""Sleep-time consolidation over the real pipeline: a contradiction keeps its history, duplicates
collapse, and arrival order does not matter."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from memstream.bench.consolidate import life_stories
from memstream.processors.ids import point_id
from memstream.processors.write.index import CARDS
from memstream.schemas import Card, ConsolidationUpdate, MemoryWrite, Provenance, SourceTurn
from tests.factories import memory_write, source

pytestmark = pytest.mark.integration

T0 = datetime(2024, 3, 4, 18, 0, tzinfo=timezone.utc)
CONV = "maria"


def write(tenant: str, day: int, texts: list[str]) -> MemoryWrite:
    """One session's memory write: a card per text, said by Maria on that day."""
    when = T0 + timedelta(days=day)
    turns = [
        source(f"D{day}:{i + 1}", "Maria", text, day * 100 + i, at=when + timedelta(minutes=i), session_id=f"S{day}")
        for i, text in enumerate(texts)
    ]
    cards = [
        Card(
            card_id=point_id("card", tenant, CONV, [t.turn_id], t.text),
            subject="Maria",
            type="state",
            content=t.text,
            event_time=t.event_time,
            provenance=Provenance(turn_ids=[t.turn_id], session_ids=[t.session_id]),
            entity_triggers=["Maria"],
            speaker="Maria",
            valid_from=t.event_time,
        )
        for t in turns
    ]
    return day_write(tenant, day, cards, turns)


def day_write(tenant: str, day: int, cards: list[Card], turns: list[SourceTurn]) -> MemoryWrite:
    """The day's write, ids w<day> and f<day>, written as the day starts."""
    fields = {"write_id": f"w{day}", "flush_id": f"f{day}", "mode": "llm", "written_at": T0 + timedelta(days=day)}
    return memory_write(tenant, cards, turns, conversation=CONV, **fields)


def texts(reply) -> list[str]:
    return [e.text for e in reply.evidence]


def test_a_move_supersedes_the_old_city_without_deleting_it_and_repeats_collapse(make_pipeline):
    # MiniLM puts "Maria lives in Boston." and "Maria moved to Denver." at cosine 0.70 and the nurse
    # card at 0.65 from Boston: tau 0.68 takes the first pair into one queue and leaves the nurse out.
    pipe = make_pipeline(MEMSTREAM_CONSOLIDATE_TAU="0.68", MEMSTREAM_SLEEP_IDLE_S="3600")
    pipe.start_worker()
    # The newer session arrives first: only the newer card may update the older one all the same.
    later = write("acme", 21, ["Maria moved to Denver.", "Maria has a cat called Miso."])
    earlier = write("acme", 0, ["Maria lives in Boston.", "Maria has a cat named Miso.", "Maria works as a nurse."])
    for w in (later, earlier):
        pipe.produce_raw("cards", w.key.encode(), w.to_bytes())
    pipe.drain()

    before = pipe.ask("Where does Maria live?", tenant="acme", conversation=CONV, answer=False)
    assert "Maria lives in Boston." in texts(before)  # not consolidated yet: both are current

    assert pipe.consolidate(tenant="acme", conversation=CONV) == 1
    pipe.drain()

    now = pipe.ask("Where does Maria live?", tenant="acme", conversation=CONV, answer=False)
    assert "Maria moved to Denver." in texts(now) and "Maria lives in Boston." not in texts(now)
    assert not now.plan.history
    past = pipe.ask("Where did Maria live before?", tenant="acme", conversation=CONV, answer=False)
    assert past.plan.history and "Maria lives in Boston." in texts(past)
    cats = pipe.ask("What is the name of Maria's cat?", tenant="acme", conversation=CONV, answer=False)
    assert sum("Miso" in t for t in texts(cats)) == 1  # the repeat left the current view

    # Deciding every card again (what --all does after a change of tau) changes nothing here. The
    # broadcast reaches the worker once per partition: the conversation still runs once.
    assert pipe.consolidate(tenant="acme", scope="all") == pipe.settings.topic_partitions > 1
    pipe.drain()
    [worker] = pipe.workers
    assert worker.log_text().count(f"consolidated acme/{CONV}:") == 2
    pipe.stop_workers()
    boston_id, miso_id, nurse_id = (c.card_id for c in earlier.cards)
    denver_id, repeat_id = (c.card_id for c in later.cards)
    with pipe.store() as store:
        cards = {h.id: h.payload for h in store.scroll(CARDS, "acme", limit=100)}
    assert len(cards) == 5  # nothing deleted
    assert cards[boston_id]["superseded_by"] == denver_id
    assert cards[boston_id]["valid_to"] == denver_event_time(later)
    assert cards[boston_id]["retired"] and not cards[denver_id].get("retired") and not cards[nurse_id].get("retired")
    assert cards[denver_id]["valid_to"] is None and cards[nurse_id]["valid_to"] is None
    assert cards[repeat_id]["duplicate_of"] == miso_id and cards[miso_id]["support"] == [repeat_id]


def denver_event_time(later: MemoryWrite) -> str:
    return later.cards[0].event_time.isoformat()


def test_an_idle_conversation_is_consolidated_without_a_command(make_pipeline):
    pipe = make_pipeline(MEMSTREAM_CONSOLIDATE_TAU="0.68", MEMSTREAM_SLEEP_IDLE_S="2")
    pipe.start_worker()
    for w in (write("acme", 0, ["Maria lives in Boston."]), write("acme", 21, ["Maria moved to Denver."])):
        pipe.produce_raw("cards", w.key.encode(), w.to_bytes())
    pipe.drain()
    deadline = time.monotonic() + 90
    current = texts(pipe.ask("Where does Maria live?", tenant="acme", conversation=CONV, answer=False))
    while "Maria lives in Boston." in current and time.monotonic() < deadline:
        time.sleep(2)
        current = texts(pipe.ask("Where does Maria live?", tenant="acme", conversation=CONV, answer=False))
    assert current == ["Maria moved to Denver."], "the idle conversation was consolidated at sleep time"


def many_lives(tenant: str) -> list[MemoryWrite]:
    """The bench's life stories of 256 people (six cards each over ten weeks), one write per day."""
    by_day: dict[int, list[tuple[str, str]]] = {}
    for name, text, day in life_stories(256):
        by_day.setdefault(day, []).append((name, text))
    writes = []
    for day, said in sorted(by_day.items()):
        when = T0 + timedelta(days=day)
        turns = [
            source(
                f"D{day}:{i + 1}", name, text, day * 10_000 + i, at=when + timedelta(seconds=i), session_id=f"S{day}"
            )
            for i, (name, text) in enumerate(said)
        ]
        cards = [
            Card(
                card_id=point_id("card", tenant, CONV, [t.turn_id], t.text),
                subject=t.speaker,
                type="state",
                content=t.text,
                event_time=t.event_time,
                provenance=Provenance(turn_ids=[t.turn_id]),
                speaker=t.speaker,
                valid_from=t.event_time,
            )
            for t in turns
        ]
        writes.append(day_write(tenant, day, cards, turns))
    return writes


def versions(pipe, tenant: str) -> dict[tuple[str, str], tuple]:
    """Each card's consolidation state, with card ids replaced by (text, time): comparable across tenants."""
    with pipe.store() as store:
        cards = {h.id: h.payload for h in store.scroll(CARDS, tenant, limit=10_000)}
    key = {cid: (p["text"], p["event_time"]) for cid, p in cards.items()}
    return {
        key[cid]: (
            key.get(p.get("superseded_by")),
            key.get(p.get("duplicate_of")),
            p.get("valid_to"),
            bool(p.get("retired")),
            tuple(sorted(key[s] for s in p.get("support") or [])),
        )
        for cid, p in cards.items()
    }


def test_killing_the_worker_mid_run_and_restarting_gives_the_state_of_an_uninterrupted_run(make_pipeline):
    # One queue at a time: the run lasts long enough to be killed in the middle.
    pipe = make_pipeline(MEMSTREAM_SLEEP_IDLE_S="3600", MEMSTREAM_CONSOLIDATE_PARALLEL="1")
    worker = pipe.start_worker("before-crash")
    for tenant in ("steady", "crashing"):
        for w in many_lives(tenant):
            pipe.produce_raw("cards", w.key.encode(), w.to_bytes())
    pipe.drain()
    assert pipe.consolidate(tenant="steady", conversation=CONV) == 1
    pipe.drain()
    out_before = pipe.message_count("updates")

    assert pipe.consolidate(tenant="crashing", conversation=CONV) == 1
    deadline = time.monotonic() + 120
    while pipe.message_count("updates") == out_before and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.kill()  # some of the run's updates are out (and maybe applied), the rest not decided yet
    pipe.workers = []
    assert f"consolidated crashing/{CONV}" not in worker.log_text(), "the kill came after the run had finished"
    out_at_crash = pipe.message_count("updates") - out_before

    pipe.start_worker("after-crash")
    pipe.drain()
    pipe.stop_workers()
    redone = [ConsolidationUpdate.from_bytes(v) for _, v in pipe.read_topic("updates")]
    crashing = [u.update_id for u in redone if u.tenant_id == "crashing"]
    assert 0 < out_at_crash < len(set(crashing)) and len(crashing) > len(set(crashing)), "the run was redone"

    steady, crashed = versions(pipe, "steady"), versions(pipe, "crashing")
    assert len(steady) == 256 * 6
    assert sum(1 for v in steady.values() if v[0] and not v[1]) > 128, "moves superseded the old homes"
    assert sum(1 for v in steady.values() if v[1]) > 128, "the repeated homes are duplicates"
    assert crashed == steady


def test_the_llm_decider_against_the_local_server_makes_one_call_per_queue_and_keeps_time_order(local_llm):
    from memstream.adapters.openai_llm import OpenAICompatibleLLM
    from memstream.adapters.st_embedder import SentenceTransformerEmbedder
    from memstream.bench.consolidate import consolidate_stories
    from memstream.processors.consolidation.consolidate import ConsolidateParams, LlmDecider

    llm = OpenAICompatibleLLM(local_llm["MEMSTREAM_LLM_BASE_URL"], local_llm["MEMSTREAM_LLM_MODEL"], "none")
    params = ConsolidateParams()
    run = consolidate_stories(1, LlmDecider(llm, params), SentenceTransformerEmbedder(None), params=params)
    assert run["queues"] > 0
    # one call per queue, plus at most one repair each; every call and token counted
    assert run["queues"] <= run["llm_calls"] <= 2 * run["queues"]
    assert run["prompt_tokens"] > 0 and run["completion_tokens"] > 0
    assert run["pairs"] == sum(run["decisions"].values()) > 0
    assert all(k.split("/")[1] in {"llm", "rules"} for k in run["decisions"])
