"""Many messages in progress at once: one lane in order, barriers alone, classes of slots apart."""

from __future__ import annotations

import asyncio

import pytest

from memstream.streams.runtime.lanes import Lanes
from memstream.streams.stages.api import BARRIER, Slot, conversation_lane


class Log:
    """Records when each piece of work starts and ends; work waits for its own release event."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.gates: dict[str, asyncio.Event] = {}

    def work(self, name: str, *, hold: bool = True):
        gate = self.gates.setdefault(name, asyncio.Event())
        if not hold:
            gate.set()

        async def run() -> None:
            self.events.append(("start", name))
            await gate.wait()
            self.events.append(("end", name))

        return run

    def started(self) -> list[str]:
        return [name for kind, name in self.events if kind == "start"]


def run_async(test):  # a test coroutine, run on its own loop
    def run() -> None:
        asyncio.run(test())

    run.__name__ = test.__name__
    return run


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_conversation_lane_keys_conversations_and_makes_broadcasts_barriers() -> None:
    assert conversation_lane(b"acme/c1", 2) == (2, b"acme/c1")
    assert conversation_lane(b"acme/c1", 2) != conversation_lane(b"acme/c2", 2)
    assert conversation_lane(b"acme/*", 0) is BARRIER
    assert conversation_lane(b"*/*", 0) is BARRIER
    assert conversation_lane(None, 0) is BARRIER


@run_async
async def test_different_lanes_run_side_by_side_up_to_the_slots() -> None:
    log, lanes = Log(), Lanes({"llm": 3})
    for name in "abcd":
        await lanes.submit(Slot(name), log.work(name))
    await settle()
    assert log.started() == ["a", "b", "c"]  # the fourth waits for a slot
    assert lanes.running == 3 and lanes.waiting == 1
    log.gates["b"].set()
    await settle()
    assert log.started() == ["a", "b", "c", "d"]
    for gate in log.gates.values():
        gate.set()
    assert await lanes.drain(timeout_s=1)
    assert len(lanes) == 0 and lanes.running == 0 and lanes.waiting == 0


@run_async
async def test_one_lane_runs_in_arrival_order_even_when_slots_are_free() -> None:
    log, lanes = Log(), Lanes({"llm": 8})
    for name in ("c1-flush1", "c1-flush2", "c1-forget"):
        await lanes.submit(Slot("c1"), log.work(name))
    await lanes.submit(Slot("c2"), log.work("c2-flush1"))
    await settle()
    assert log.started() == ["c1-flush1", "c2-flush1"]
    log.gates["c2-flush1"].set()
    log.gates["c1-flush1"].set()
    await settle()
    assert log.started()[-1] == "c1-flush2"
    log.gates["c1-flush2"].set()
    await settle()
    assert log.started()[-1] == "c1-forget"
    log.gates["c1-forget"].set()
    await lanes.drain(timeout_s=1)
    ends = [name for kind, name in log.events if kind == "end" and name.startswith("c1")]
    assert ends == ["c1-flush1", "c1-flush2", "c1-forget"]


@run_async
async def test_a_failed_handling_does_not_stop_its_lane() -> None:
    lanes, seen = Lanes({"llm": 2}), []

    async def boom() -> None:
        raise RuntimeError("handler bug")

    async def after() -> None:
        seen.append("after")

    await lanes.submit(Slot("c1"), boom)
    await lanes.submit(Slot("c1"), after)
    assert await lanes.drain(timeout_s=1)
    assert seen == ["after"]


@run_async
async def test_a_barrier_waits_for_everything_before_it_and_holds_back_what_follows() -> None:
    log, lanes = Log(), Lanes({"llm": 4})
    await lanes.submit(Slot("c1"), log.work("c1"))
    await lanes.submit(Slot("c2"), log.work("c2"))
    barrier = asyncio.create_task(lanes.submit(Slot(BARRIER), log.work("tenant-forget")))
    await settle()
    assert log.started() == ["c1", "c2"] and not barrier.done()
    log.gates["c1"].set()
    log.gates["c2"].set()
    await settle()
    assert log.started() == ["c1", "c2", "tenant-forget"] and not barrier.done()
    log.gates["tenant-forget"].set()
    await asyncio.wait_for(barrier, 1)  # submit returns only once the barrier's work finished
    await lanes.submit(Slot("c1"), log.work("c1-next", hold=False))
    await lanes.drain(timeout_s=1)
    assert log.started() == ["c1", "c2", "tenant-forget", "c1-next"]


@run_async
async def test_classes_have_their_own_slots() -> None:
    """Evidence-only questions are not held behind LLM-answered ones that fill the LLM slots."""
    log, lanes = Log(), Lanes({"llm": 2, "evidence": 2})
    for i in range(4):
        await lanes.submit(Slot(("q", i), "llm"), log.work(f"llm{i}"))
    await lanes.submit(Slot(("q", 9), "evidence"), log.work("evidence", hold=False))
    await settle()
    assert log.started() == ["llm0", "llm1", "evidence"]
    assert ("end", "evidence") in log.events
    for gate in log.gates.values():
        gate.set()
    await lanes.drain(timeout_s=1)


@run_async
async def test_admission_stops_at_the_backlog() -> None:
    log, lanes = Log(), Lanes({"llm": 1}, backlog=2)
    await lanes.submit(Slot("a"), log.work("a"))
    await lanes.submit(Slot("b"), log.work("b"))
    third = asyncio.create_task(lanes.submit(Slot("c"), log.work("c")))
    await settle()
    assert not third.done()  # the stage takes no more messages until one of the two finished
    log.gates["a"].set()
    await asyncio.wait_for(third, 1)
    for gate in log.gates.values():
        gate.set()
    await lanes.drain(timeout_s=1)
    assert log.started() == ["a", "b", "c"]


@run_async
async def test_revoked_partitions_lose_their_waiting_work_and_keep_what_runs() -> None:
    log, lanes = Log(), Lanes({"llm": 1})
    await lanes.submit(Slot("a"), log.work("p0-running"), partition=("t", 0))
    await lanes.submit(Slot("b"), log.work("p0-waiting"), partition=("t", 0))
    await lanes.submit(Slot("c"), log.work("p1-waiting", hold=False), partition=("t", 1))
    await settle()
    assert lanes.cancel_waiting([("t", 0)]) == 1
    assert not await lanes.drain([("t", 0)], timeout_s=0.05)  # the running one is still at it
    log.gates["p0-running"].set()
    assert await lanes.drain(timeout_s=1)
    assert log.started() == ["p0-running", "p1-waiting"]
    assert lanes.waiting == 0 and lanes.running == 0


def test_every_class_needs_a_slot() -> None:
    with pytest.raises(ValueError):
        Lanes({"llm": 0})


@run_async
async def test_work_cancelled_before_it_ever_ran_gives_its_place_back() -> None:
    log, lanes = Log(), Lanes({"llm": 1}, backlog=1)
    await lanes.submit(Slot("a"), log.work("a"), partition=("t", 0))
    assert lanes.cancel_waiting([("t", 0)]) == 1  # before the loop ever ran it
    await asyncio.wait_for(lanes.submit(Slot("b"), log.work("b", hold=False), partition=("t", 1)), 1)
    assert await lanes.drain(timeout_s=1)
    assert log.started() == ["b"] and lanes.waiting == 0 and lanes.running == 0 and len(lanes) == 0
