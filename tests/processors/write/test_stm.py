from memstream.processors.write.stm import StmPolicy, StmState, add_turn, is_idle, on_tick
from tests.factories import segmented, turn

POLICY = StmPolicy(budget_tokens=30, idle_s=10.0)
TEN_TOKENS = "one two three four five six seven eight nine ten"


def test_buffers_until_the_budget_then_flushes_once():
    state = StmState()
    assert add_turn(state, segmented(turn("D1:1", TEN_TOKENS)), 0.0, POLICY) == []
    assert add_turn(state, segmented(turn("D1:2", TEN_TOKENS)), 1.0, POLICY) == []
    [flush] = add_turn(state, segmented(turn("D1:3", TEN_TOKENS)), 2.0, POLICY)
    assert flush.reason == "budget"
    assert [t.turn.turn_id for t in flush.turns()] == ["D1:1", "D1:2", "D1:3"]
    assert flush.tokens == 30
    assert state.groups == [] and state.tokens == 0


def test_a_new_topic_that_would_overflow_flushes_the_pending_topic_first():
    state = StmState()
    add_turn(state, segmented(turn("D1:1", TEN_TOKENS), "a"), 0.0, POLICY)
    add_turn(state, segmented(turn("D1:2", TEN_TOKENS), "a"), 0.0, POLICY)
    [flush] = add_turn(state, segmented(turn("D1:3", TEN_TOKENS + " eleven"), "b", True), 0.0, POLICY)
    assert [s.segment_id for s in flush.segments] == ["a"]
    assert [g["segment_id"] for g in state.groups] == ["b"]


def test_topics_stay_grouped_inside_a_flush():
    state = StmState()
    add_turn(state, segmented(turn("D1:1", "short one"), "a"), 0.0, POLICY)
    add_turn(state, segmented(turn("D1:2", "short two"), "b"), 0.0, POLICY)
    add_turn(state, segmented(turn("D1:3", "short three"), "b"), 0.0, POLICY)
    flush = on_tick(state, 1.0, POLICY, force=True)
    assert flush is not None
    assert [(s.segment_id, len(s.turns)) for s in flush.segments] == [("a", 1), ("b", 2)]


def test_duplicate_turn_ids_are_dropped():
    state = StmState()
    add_turn(state, segmented(turn("D1:1", "hello there")), 0.0, POLICY)
    assert add_turn(state, segmented(turn("D1:1", "hello there")), 1.0, POLICY) == []
    assert state.pending_turns == 1
    # even after the flush that carried it
    add_turn(state, segmented(turn("D1:2", "bye", last=True)), 2.0, POLICY)
    assert on_tick(state, 2.5, POLICY, force=True) is not None
    assert add_turn(state, segmented(turn("D1:1", "hello there")), 3.0, POLICY) == []
    assert state.pending_turns == 0


def test_short_sessions_share_a_flush_and_keep_their_own_times():
    state = StmState()
    assert add_turn(state, segmented(turn("D1:1", "hello there", last=True)), 0.0, POLICY) == []
    second = turn("D2:1", "new day", session="S2", minutes=60 * 24)
    assert add_turn(state, segmented(second, "s2", True), 1.0, POLICY) == []
    assert state.pending_turns == 2  # a session end is no flush
    [flush] = add_turn(state, segmented(turn("D2:2", " ".join([TEN_TOKENS] * 3), session="S2"), "s2"), 2.0, POLICY)
    assert flush.reason == "budget"
    assert [s.segment_id for s in flush.segments] == ["seg1", "s2"]  # the session cut a topic
    times = {t.turn.turn_id: t.turn.event_time for t in flush.turns()}
    assert (times["D2:1"] - times["D1:1"]).days == 1


def test_a_buffer_saved_by_an_older_worker_still_loads():
    state = StmState(tenant_id="acme", conversation_id="c", tokens=3)
    restored = StmState.from_dict({**state.to_dict(), "session_id": "S1"})
    assert restored == state


def test_idle_buffers_flush_on_tick_and_busy_ones_do_not():
    state = StmState()
    add_turn(state, segmented(turn("D1:1", "hello there")), 100.0, POLICY)
    assert not is_idle(state, 105.0, POLICY)
    assert on_tick(state, 105.0, POLICY) is None
    assert is_idle(state, 110.0, POLICY)
    flush = on_tick(state, 110.0, POLICY)
    assert flush is not None and flush.reason == "idle"
    assert on_tick(state, 200.0, POLICY) is None


def test_forced_tick_flushes_and_state_survives_serialisation():
    state = StmState()
    add_turn(state, segmented(turn("D1:1", "hello there")), 0.0, POLICY)
    restored = StmState.from_dict(state.to_dict())
    flush = on_tick(restored, 1.0, POLICY, force=True)
    assert flush is not None and flush.reason == "forced"


def test_flush_ids_are_deterministic():
    def run():
        state = StmState()
        add_turn(state, segmented(turn("D1:1", "hello there")), 0.0, POLICY)
        return on_tick(state, 99.0, POLICY, force=True).flush_id

    assert run() == run()


def test_a_tick_after_the_segmenter_drained_an_idle_window_flushes_as_idle():
    from memstream.processors.write.stm import StmPolicy, StmState, add_turn, on_tick
    from tests.factories import segmented, turn

    state = StmState()
    add_turn(state, segmented(turn("D1:1")), 100.0, StmPolicy(idle_s=30))
    assert on_tick(state, 101.0, StmPolicy(idle_s=30)) is None  # the buffer itself just got the turn
    flush = on_tick(state, 101.0, StmPolicy(idle_s=30), conversation_idle=True)
    assert flush is not None and flush.reason == "idle"
