"""When a conversation is consolidated: pending cards, sleep, runs done once."""

from datetime import datetime, timezone

from memstream.processors.consolidation.sleep import broadcast_keys, finish_run, is_asleep, mark_pending, run_needed

T = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_cards_wait_until_the_conversation_sleeps_and_a_run_clears_them():
    state = mark_pending(None, ["a", "b", "a"], now=100.0)
    state = mark_pending(state, ["b", "c"], now=110.0)
    assert state["cards"] == ["a", "b", "c"] and state["last_write"] == 110.0
    assert not is_asleep(state, now=600.0, idle_s=600) and is_asleep(state, now=710.0, idle_s=600)
    assert run_needed(state, T, "pending")
    done = finish_run(state, {"a", "b"}, now=720.0, requested_at=T)
    assert done["cards"] == ["c"] and done["last_run"] == 720.0
    assert not is_asleep(done, now=1000.0, idle_s=600)  # a card not indexed yet waits for the next sleep
    assert not run_needed(done, T, "all"), "a run as of this time is done: a redelivered command does nothing"


def test_the_pending_scope_runs_only_when_cards_wait():
    assert not run_needed(None, T, "pending") and run_needed(None, T, "all")
    assert not run_needed({"cards": [], "last_write": 0.0}, T, "pending")


def test_a_broadcast_fans_out_to_the_tenants_conversations_with_cards_waiting():
    pending = [
        ("acme/c1", {"cards": ["x"]}),
        ("acme/c2", {"cards": []}),
        ("beta/c3", {"cards": ["y"]}),
        ("acme/c4", None),
    ]
    assert broadcast_keys(pending, "acme", "pending") == ["acme/c1"]
    assert broadcast_keys(pending, "acme", "all") == ["acme/c1", "acme/c2"]
    assert broadcast_keys(pending, None, "pending") == ["acme/c1", "beta/c3"]
