"""The bulk lane's gate: an imported turn goes in only while no live turn or question waits and
little is unfinished after the turns topic (pure: the unfinished counts are given)."""

import asyncio

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.streams.runtime.bulk import LiveFirst
from memstream.streams.runtime.offsets import Partition


class Unfinished:
    def __init__(self, counts: dict[str, int]):
        self.counts = counts

    async def unfinished(self) -> dict[Partition, int]:
        return {Partition(f"m.{topic}", 0): n for topic, n in self.counts.items()}


def may_go(counts: dict[str, int], backlog: int = 4) -> bool:
    s = Settings(topic_prefix="m", bulk_backlog=backlog)
    return asyncio.run(LiveFirst(s, Unfinished(counts), Metrics()).may_go())  # type: ignore[arg-type]


def test_a_waiting_live_turn_or_question_holds_imports_back():
    assert may_go({"turns": 0, "queries": 0, "bulk.turns": 500})
    assert not may_go({"turns": 1, "bulk.turns": 500})
    assert not may_go({"queries": 1})


def test_imports_go_in_while_fewer_than_the_backlog_are_unfinished_after_the_turns_topic():
    assert may_go({"turns.compressed": 2, "segments": 1})
    assert not may_go({"turns.compressed": 2, "segments": 1, "cards": 1})
    assert may_go({"turns.compressed": 20}, backlog=21)


def test_a_waiting_import_is_given_up_once_its_partition_is_another_workers():
    import pytest

    from memstream.streams.runtime.fence import Fenced

    gate = LiveFirst(Settings(topic_prefix="m"), Unfinished({"turns": 3}), Metrics())  # type: ignore[arg-type]
    with pytest.raises(Fenced, match="another worker"):
        asyncio.run(gate.wait(lambda: False))
