"""What a quiet conversation's table entries may be evicted, and how its positions come back after."""

from __future__ import annotations

import pytest

from memstream.config import Settings
from memstream.processors.consolidation.sleep import mark_pending, pending_evictable
from memstream.processors.write.segment import SegmenterState, highest_position, window_evictable
from memstream.processors.write.stm import StmState, buffer_evictable

DAY = 86400.0


def test_a_window_goes_only_when_empty_and_quiet_for_the_idle_time():
    quiet = SegmenterState(last_activity=1000.0, next_seq=7)
    assert window_evictable(quiet, 1000.0 + DAY, DAY)
    assert not window_evictable(quiet, 1000.0 + DAY - 1, DAY)
    holding = SegmenterState(last_activity=1000.0, pending=[{"turn": {}}])
    assert not window_evictable(holding, 1000.0 + 10 * DAY, DAY)  # turns in flight stay, however old


def test_a_buffer_goes_only_when_flushed_and_quiet():
    flushed = StmState(last_activity=50.0, seen=["a", "b"])
    assert buffer_evictable(flushed, 50.0 + DAY, DAY)
    assert not buffer_evictable(flushed, 49.0 + DAY, DAY)
    waiting = StmState(last_activity=50.0, groups=[{"segment_id": "s", "topic_label": "", "turns": [{}]}])
    assert not buffer_evictable(waiting, 50.0 + 10 * DAY, DAY)


def test_consolidation_marks_go_only_when_no_card_waits_and_no_run_or_write_is_recent():
    state = mark_pending(None, ["c1"], now=100.0)
    assert not pending_evictable(state, 100.0 + 10 * DAY, DAY)  # a card waits for its run
    state = {**state, "cards": [], "last_run": 200.0, "last_as_of": 200.0}
    assert not pending_evictable(state, 150.0 + DAY, DAY)  # the run is more recent than the write
    assert pending_evictable(state, 200.0 + DAY, DAY)


@pytest.mark.parametrize("top", [0, 1, 2, 3, 7, 8, 9, 100, 1023, 1024, 5000])
def test_the_highest_position_is_found_in_logarithmically_many_questions(top):
    asked: list[int] = []

    def has_from(p: int) -> bool:
        asked.append(p)
        return p <= top

    assert highest_position(has_from) == top
    assert len(asked) <= 2 * (top.bit_length() + 1) + 1


def test_a_conversation_never_seen_has_no_position_after_one_question():
    asked: list[int] = []
    assert highest_position(lambda p: asked.append(p) or False) is None
    assert asked == [0]


def test_eviction_waits_for_the_idle_flush_and_the_sleep_run():
    assert Settings(state_evict_idle_s=300, sleep_idle_s=600).state_evict_after_s == 600
    assert Settings(state_evict_idle_s=20, stm_idle_s=30, sleep_idle_s=10).state_evict_after_s == 30
    assert Settings(state_evict_idle_s=601, sleep_idle_s=600).state_evict_after_s == 601
    # consolidation turned off by a huge idle time: entries stay as long, the settings are accepted
    assert Settings(sleep_idle_s=1e9).state_evict_after_s == 1e9
    assert Settings().state_evict_after_s == DAY
