"""Sleep-time consolidation over the real pipeline: a contradiction keeps its history, duplicates
collapse, and arrival order does not matter."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from processors.ids import point_id
from processors.index import CARDS
from schemas import Card, MemoryWrite, Provenance, SourceTurn

pytestmark = pytest.mark.integration

T0 = datetime(2024, 3, 4, 18, 0, tzinfo=timezone.utc)
CONV = "maria"


def write(tenant: str, day: int, texts: list[str]) -> MemoryWrite:
    """One session's memory write: a card per text, said by Maria on that day."""
    when = T0 + timedelta(days=day)
    turns = [SourceTurn(turn_id=f"D{day}:{i + 1}", session_id=f"S{day}", speaker="Maria", role="user", text=text,
                        event_time=when + timedelta(minutes=i), seq=day * 100 + i) for i, text in enumerate(texts)]
    cards = [Card(card_id=point_id("card", tenant, CONV, [t.turn_id], t.text), subject="Maria", type="state",
                  content=t.text, event_time=t.event_time, provenance=Provenance(turn_ids=[t.turn_id], session_ids=[t.session_id]),
                  entity_triggers=["Maria"], speaker="Maria", valid_from=t.event_time) for t in turns]
    return MemoryWrite(tenant_id=tenant, conversation_id=CONV, write_id=f"w{day}", flush_id=f"f{day}", mode="llm",
                       cards=cards, scenes=[], source_turns=turns, written_at=when)


def texts(reply) -> list[str]:  # noqa: ANN001
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
