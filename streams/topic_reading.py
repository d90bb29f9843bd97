"""Reading a topic from the beginning, outside any consumer group: what the inspector shows of a
small compacted topic (``llm.usage``), and what the benchmarks and integration tests check after a run
(memory writes, dead letters, keys)."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition

from memstream.config import Settings
from memstream.streams.kafka_options import client_options
from memstream.streams.lag import partitions_of


async def read_messages(settings: Settings, name: str, *, timeout_s: float) -> list[tuple[bytes | None, bytes]]:
    """Every message (key, value) on the topic ``name`` (its full name), up to the end offsets it had
    when reading began, or what came within ``timeout_s``."""
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        enable_auto_commit=False,
        max_partition_fetch_bytes=settings.max_message_bytes,
        fetch_max_bytes=settings.max_message_bytes,
    )
    await consumer.start()
    try:
        partitions = (await partitions_of(settings, name))[name]
        tps = [TopicPartition(name, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[tuple[bytes | None, bytes]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            positions = [await consumer.position(tp) for tp in tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, tps)):
                break
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                out += [(r.key, r.value) for r in records]
        return out
    finally:
        await consumer.stop()


async def message_count(settings: Settings, name: str) -> int:
    """Messages on the topic ``name`` (its full name) so far: the sum of its partitions' end offsets."""
    consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(name, p) for p in (await partitions_of(settings, name))[name]]
        return sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()
