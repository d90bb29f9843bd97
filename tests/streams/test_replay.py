"""A replay after a worker died between writing a table entry and committing the input offset: the
entry is ahead of the offset the next owner starts from. The replay rule (streams/runtime/replay.py)
skips what the entry reflects; without it, an idle tick handled again, later, against a buffer that
has since taken more turns, flushes turns that a flush already carried (the STM's table entry and
the stage's order of work, as streams/stages/stm.py composes them: produce the flushes, then write
the entry stamped with its input)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import orjson

from memstream.processors.write.stm import StmPolicy, buffer_step
from memstream.schemas import StmFlush, StmTick
from memstream.streams.runtime.replay import APPLIED, reflects, stamped
from tests.factories import segmented, turn

POLICY = StmPolicy(budget_tokens=30, idle_s=10.0)
TEN_TOKENS = "one two three four five six seven eight nine ten"
PARTITION = 3


def tick() -> StmTick:
    return StmTick(tenant_id="t1", conversation_id="c1", sent_at=datetime(2026, 1, 1, tzinfo=timezone.utc))


# offset, message, wall-clock time of the first handling
MESSAGES = [
    (10, segmented(turn("D1:1", TEN_TOKENS)), 0.0),
    (11, segmented(turn("D1:2", TEN_TOKENS)), 1.0),
    (12, tick(), 5.0),  # not idle yet (10 s): no flush
    (13, segmented(turn("D1:3", TEN_TOKENS)), 6.0),  # the budget: flushes D1:1-3
]


def handle(entry: Any, offset: int, message: Any, now: float, *, rule: bool) -> tuple[Any, list[StmFlush]]:
    """One message as the stage handles it: skipped if the entry reflects it (with the rule), else
    the flushes and the entry to write, stamped with its input."""
    if rule and reflects(entry, PARTITION, offset):
        return entry, []
    new, flushes, _duplicate = buffer_step(entry, message, now, POLICY)
    return stamped(new, PARTITION, offset), flushes


def killed_and_replayed(*, rule: bool) -> list[StmFlush]:
    """Handle every message; the worker dies after producing the last one's flush and before writing
    its entry, with nothing committed. The next owner recovers the last entry written and is handed
    every message again, 60 s later. Returns every flush produced, both times."""
    entry: Any = None
    produced: list[StmFlush] = []
    for i, (offset, message, now) in enumerate(MESSAGES):
        new, flushes = handle(entry, offset, message, now, rule=rule)
        produced += flushes
        if i < len(MESSAGES) - 1:  # the last entry never reached the changelog
            entry = orjson.loads(orjson.dumps(new))  # as the changelog keeps it
    for offset, message, now in MESSAGES:
        entry, flushes = handle(entry, offset, message, now + 60.0, rule=rule)
        produced += flushes
    return produced


def turns_in_two_flushes(flushes: list[StmFlush]) -> set[str]:
    carried: dict[str, set[str]] = {}
    for f in flushes:
        for t in f.turns():
            carried.setdefault(t.turn.turn_id, set()).add(f.flush_id)
    return {turn_id for turn_id, ids in carried.items() if len(ids) > 1}


def test_a_replay_against_an_entry_ahead_of_it_flushes_no_turn_twice():
    flushes = killed_and_replayed(rule=True)
    assert turns_in_two_flushes(flushes) == set()
    assert {f.flush_id for f in flushes} == {flushes[0].flush_id}  # the same flush, delivered twice
    assert [t.turn.turn_id for t in flushes[0].turns()] == ["D1:1", "D1:2", "D1:3"]


def test_without_the_rule_the_replayed_tick_flushes_turns_a_flush_carried():
    # What the chaos bench counts as duplicated: D1:1 and D1:2 in two different memory writes.
    assert turns_in_two_flushes(killed_and_replayed(rule=False)) == {"D1:1", "D1:2"}


def test_an_entry_reflects_its_own_input_and_what_came_before_in_its_partition():
    entry = stamped({"tokens": 5}, PARTITION, 12)
    assert entry[APPLIED] == [PARTITION, 12] and entry["tokens"] == 5
    assert reflects(entry, PARTITION, 12) and reflects(entry, PARTITION, 3)
    assert not reflects(entry, PARTITION, 13)
    assert not reflects(entry, PARTITION + 1, 3)  # another partition's offsets say nothing


def test_entries_without_a_stamp_and_messages_without_an_offset_are_always_handled():
    assert not reflects(None, 0, 0)
    assert not reflects({"tokens": 5}, 0, 0)  # written before the rule, or scrubbed without a source
    assert not reflects({APPLIED: "junk"}, 0, 0)
    entry = stamped({"tokens": 5}, 0, 7)
    assert not reflects(entry, 0, -1)
    assert stamped({"tokens": 5}, 0, -1) == {"tokens": 5}
    assert stamped(None, 0, 7) is None
