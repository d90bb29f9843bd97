"""The SDK's wait for a forget without a broker: every part's reply is awaited (a redelivered part
counts once), the parts are summed, and a forget whose parts do not all reply times out."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

from memstream.client import AsyncMemoryClient, QueryTimeout
from memstream.schemas import ForgetReply
from memstream.schemas.forget import RetainedCopy

EARLY, LATE = datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 2, 1, tzinfo=timezone.utc)


class ThreePartitions:
    """Stands in for the Kafka producer: every record is acknowledged at once."""

    def __init__(self) -> None:
        self.partitions: list[int | None] = []

    async def send(self, topic: str, key: bytes | None, value: bytes, partition: int | None = None, **_: object):
        self.partitions.append(partition)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def partitions_for(self, _topic: str) -> set[int]:
        return {2, 0, 1}


def client_without_broker() -> tuple[AsyncMemoryClient, ThreePartitions]:
    client = AsyncMemoryClient()
    producer = ThreePartitions()
    client.kafka._producer = producer  # type: ignore[assignment]

    async def no_reader() -> None:
        return None

    client.replies.start = no_reader  # type: ignore[method-assign]
    return client, producer


def part(forget_id: str, n: int, counts: dict[str, int], until: datetime) -> ForgetReply:
    retained = [RetainedCopy(topic="memory.turns", until=until)]  # type: ignore[arg-type]
    return ForgetReply(
        forget_id=forget_id, tenant_id="acme", part=n, parts=3, counts=counts, retained=retained, done_at=EARLY
    )  # type: ignore[arg-type]


def test_a_forget_to_every_partition_waits_for_each_part_and_sums_them():
    client, producer = client_without_broker()

    async def forget_and_reply():
        forgetting = asyncio.ensure_future(client.forget(tenant_id="acme", speaker="Ana", timeout_s=5))
        await asyncio.sleep(0.05)
        [forget_id] = client.replies.forgets
        client.replies._forget_part(part(forget_id, 1, {"store:cards": 2}, LATE))
        client.replies._forget_part(part(forget_id, 1, {"store:cards": 2}, LATE))  # redelivered
        client.replies._forget_part(part(forget_id, 0, {"store:cards": 1, "store:repaired": 5}, EARLY))
        assert not forgetting.done()
        client.replies._forget_part(part(forget_id, 2, {"table:stm": 1}, EARLY))
        return await forgetting

    outcome = asyncio.run(forget_and_reply())
    assert producer.partitions == [0, 1, 2] and outcome.parts == 3 and outcome.done
    assert [r.part for r in outcome.replies] == [0, 1, 2]
    assert outcome.counts == {"store:cards": 3, "store:repaired": 5, "table:stm": 1} and outcome.store_points == 3
    assert outcome.retained == {"memory.turns": LATE} and client.replies.forgets == {}


def test_a_forget_not_waited_for_is_only_sent_and_one_whose_parts_do_not_reply_times_out():
    client, producer = client_without_broker()
    sent = asyncio.run(client.forget(tenant_id="acme", conversation_id="c1", wait=False))
    assert (sent.parts, sent.done, producer.partitions) == (1, False, [None])  # keyed to its conversation
    with pytest.raises(QueryTimeout, match="not done within 0s"):
        asyncio.run(client.forget(tenant_id="acme", conversation_id="c1", timeout_s=0.01))
    assert client.replies.forgets == {}
