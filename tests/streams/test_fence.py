"""A worker frozen past half its session timeout writes nothing until its group has rebalanced."""

import pytest

from memstream.streams.runtime.fence import Fenced, FreezeFence
from tests.fakes import Clock


def test_a_freeze_fences_writes_until_a_rebalance():
    clock = Clock(100.0)
    fence = FreezeFence(10.0, clock=clock)
    for _ in range(8):  # a busy but live process: the ticker runs every quarter second
        clock.now += 0.25
        fence.tick()
    fence.check()
    clock.now += 15.0  # SIGSTOP for 15 s
    assert fence.suspect(), "before the ticker runs again, the silence itself is suspect"
    fence.tick()
    clock.now += 0.25
    fence.tick()
    with pytest.raises(Fenced):
        fence.check()
    assert fence.freezes == 1
    fence.rejoined()
    fence.check()


def test_a_short_freeze_without_a_rebalance_is_forgiven_after_three_session_timeouts():
    clock = Clock(100.0)
    fence = FreezeFence(10.0, clock=clock)
    clock.now += 6.0  # longer than half the session timeout: maybe expelled, maybe not
    fence.tick()
    assert fence.suspect()
    for _ in range(4 * 30):  # 30 s of normal ticks, and no rebalance came
        clock.now += 0.25
        fence.tick()
    assert not fence.suspect()


def test_a_gap_under_half_the_session_timeout_is_not_a_freeze():
    clock = Clock(100.0)
    fence = FreezeFence(10.0, clock=clock)
    clock.now += 4.0
    fence.tick()
    assert not fence.suspect() and fence.freezes == 0


def test_a_noticed_freeze_calls_on_freeze_once_with_its_gap_and_live_ticks_never():
    clock = Clock(100.0)
    gaps: list[float] = []
    fence = FreezeFence(10.0, clock=clock, on_freeze=gaps.append)
    for _ in range(40):  # ten seconds of a live process
        clock.now += 0.25
        fence.tick()
    assert gaps == []
    clock.now += 15.0  # SIGSTOP for 15 s: the group may have moved this worker's partitions meanwhile
    fence.tick()
    clock.now += 0.25
    fence.tick()
    assert gaps == [15.0]
