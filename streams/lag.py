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


async def partitions_of(settings: Settings, *topics: str) -> dict[str, set[int]]:
    """The partitions of existing topics (waits for their metadata), over one connection."""
    producer = AIOKafkaProducer(**client_options(settings))
    await producer.start()
    try:
        return {topic: await asyncio.wait_for(producer.partitions_for(topic), 30) for topic in topics}
    finally:
        await producer.stop()


async def _lag_snapshot(
    admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer, tps_by_group: Mapping[str, list[TopicPartition]]
) -> dict[str, int]:
    """Messages not yet committed per topic, summed over the groups. Every group's commits are read
    before any end offset: a stage produces its output (acknowledged) before it commits its input, so
    a message in flight when the commits were read shows as lag on its input or, once produced, on the
    output topic, whose end offset is read later. One snapshot at zero is a drained pipeline."""
    committed = {
        group: await admin.list_consumer_group_offsets(group, partitions=tps) for group, tps in tps_by_group.items()
    }
    ends = await consumer.end_offsets(sorted({tp for tps in tps_by_group.values() for tp in tps}))
    lag: dict[str, int] = {}
    for group, tps in tps_by_group.items():
        for tp in tps:
            meta = committed[group].get(tp)
            done = meta.offset if meta is not None and meta.offset >= 0 else 0
            lag[tp.topic] = lag.get(tp.topic, 0) + max(0, ends[tp] - done)
    return lag


async def _partitions_by_group(
    settings: Settings, reading: Mapping[str, Iterable[str]]
) -> dict[str, list[TopicPartition]]:
    reading = {group: list(topics) for group, topics in reading.items()}
    partitions = await partitions_of(settings, *{t for topics in reading.values() for t in topics})
    return {group: [TopicPartition(t, p) for t in topics for p in partitions[t]] for group, topics in reading.items()}


async def topics_lag(settings: Settings, reading: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Messages not yet committed per topic, summed over the consumer groups reading it
    (``reading``: group -> full topic names)."""
    tps_by_group = await _partitions_by_group(settings, reading)
    async with _offset_clients(settings) as (admin, consumer):
        return await _lag_snapshot(admin, consumer, tps_by_group)


async def wait_drained(
    settings: Settings,
    reading: Mapping[str, Iterable[str]],
    *,
    timeout_s: float = 300.0,
    poll_s: float = 0.2,
    progress=None,
) -> float:
    """Wait until every consumer group has committed everything on the topics it reads (``reading``:
    group -> full topic names). Returns when (``time.monotonic()``) the lag was seen at zero: the work
    was done then. (What a timer may still produce, an idle window's flush, is not lag: ``wait_written``
    flushes it by command first.)"""
    deadline = time.monotonic() + timeout_s
    tps_by_group = await _partitions_by_group(settings, reading)
    lag: dict[str, int] = {}
    async with _offset_clients(settings) as (admin, consumer):
        while time.monotonic() < deadline:
            seen = time.monotonic()
            lag = await _lag_snapshot(admin, consumer, tps_by_group)
            if progress:
                progress(lag)
            if sum(lag.values()) == 0:
                return seen
            await asyncio.sleep(poll_s)
    raise TimeoutError(f"pipeline not drained after {timeout_s:.0f}s; lag per topic: {lag}")
