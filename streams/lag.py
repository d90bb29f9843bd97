"""Consumer-group lag of a running memstream: how far each group is behind, where it resumes, and
waiting until the pipeline has drained. (Producing turns and asking questions: ``memstream.client``.)"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator, Iterable, Mapping

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from memstream.config import Settings
from memstream.streams.kafka_options import client_options


@contextlib.asynccontextmanager
async def _offset_clients(settings: Settings) -> AsyncIterator[tuple[AIOKafkaAdminClient, AIOKafkaConsumer]]:
    admin = AIOKafkaAdminClient(**client_options(settings))
    consumer = AIOKafkaConsumer(**client_options(settings), enable_auto_commit=False)
    await admin.start()
    await consumer.start()
    try:
        yield admin, consumer
    finally:
        await consumer.stop()
        await admin.close()


async def partition_lag(settings: Settings, group: str, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """Messages not yet committed by ``group``, per partition (the broker's view)."""
    tps = list(tps)
    if not tps:
        return {}
    async with _offset_clients(settings) as (admin, consumer):
        committed = await admin.list_consumer_group_offsets(group)
        ends = await consumer.end_offsets(tps)
        lag = {}
        for tp in tps:
            meta = committed.get(tp)
            done = meta.offset if meta is not None and meta.offset >= 0 else 0
            lag[tp] = max(0, ends[tp] - done)
        return lag


async def group_positions(settings: Settings, group: str, tps: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
    """Where ``group`` resumes each partition: its committed offset, or the log start where it has
    none or retention deleted past it (workers reset to the earliest offset)."""
    tps = [TopicPartition(topic, partition) for topic, partition in tps]
    if not tps:
        return {}
    async with _offset_clients(settings) as (admin, consumer):
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        starts = await consumer.beginning_offsets(tps)
        positions = {}
        for tp in tps:
            meta = committed.get(tp)
            positions[tp] = max(meta.offset, starts[tp]) if meta is not None and meta.offset >= 0 else starts[tp]
        return positions


async def group_lag(settings: Settings, group: str, topics: Iterable[str]) -> dict[str, int]:
    """Messages not yet committed by ``group``, per topic."""
    partitions = await partitions_of(settings, *topics)
    tps = [TopicPartition(topic, p) for topic, parts in partitions.items() for p in parts]
    lag: dict[str, int] = {}
    for tp, n in (await partition_lag(settings, group, tps)).items():
        lag[tp.topic] = lag.get(tp.topic, 0) + n
    return lag


async def partitions_of(settings: Settings, *topics: str) -> dict[str, set[int]]:
    """The partitions of existing topics (waits for their metadata), over one connection."""
    producer = AIOKafkaProducer(**client_options(settings))
    await producer.start()
    try:
        return {topic: await asyncio.wait_for(producer.partitions_for(topic), 30) for topic in topics}
    finally:
        await producer.stop()


async def topics_lag(settings: Settings, reading: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Messages not yet committed per topic, summed over the consumer groups reading it
    (``reading``: group -> full topic names)."""
    lag: dict[str, int] = {}
    for group, topics in reading.items():
        for topic, n in (await group_lag(settings, group, topics)).items():
            lag[topic] = lag.get(topic, 0) + n
    return lag


async def wait_drained(
    settings: Settings,
    reading: Mapping[str, Iterable[str]],
    *,
    timeout_s: float = 300.0,
    settle_s: float = 2.0,
    progress=None,
) -> float:
    """Wait until every consumer group has committed everything on the topics it reads (``reading``:
    group -> full topic names), twice in a row ``settle_s`` apart. Returns when (``time.monotonic()``)
    the lag was first seen at zero: the work was done then."""
    reading = {group: list(topics) for group, topics in reading.items()}
    deadline = time.monotonic() + timeout_s
    zero_since: float | None = None
    lag: dict[str, int] = {}
    while time.monotonic() < deadline:
        lag = await topics_lag(settings, reading)
        if progress:
            progress(lag)
        if sum(lag.values()) == 0:
            zero_since = zero_since or time.monotonic()
            if time.monotonic() - zero_since >= settle_s:
                return zero_since
        else:
            zero_since = None
        await asyncio.sleep(0.5)
    raise TimeoutError(f"pipeline not drained after {timeout_s:.0f}s; lag per topic: {lag}")
