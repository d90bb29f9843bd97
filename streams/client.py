"""Clients of a running memstream: produce turns, ask questions over request/reply topics, and
wait for the pipeline to drain (consumer-group lag)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import AsyncIterator, Iterable, Mapping

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from memstream.config import Settings
from memstream.schemas import (
    ConsolidateCommand,
    Forget,
    ForgetReply,
    Query,
    Reply,
    SchemaError,
    Turn,
    conversation_key,
    decode_message,
)
from memstream.schemas.topics import Topic
from memstream.streams.kafka_options import client_options


class QueryTimeout(TimeoutError):
    """No reply arrived within the client's timeout."""


@dataclass
class ForgetOutcome:
    """What a forget removed, summed over its parts, and where raw text waits for retention."""

    forget_id: str
    parts: int
    counts: dict[str, int]
    retained: dict[str, datetime]  # topic -> until
    replies: list[ForgetReply]

    @property
    def store_points(self) -> int:
        return sum(n for k, n in self.counts.items() if k.startswith("store:") and k != "store:repaired")


class TurnProducer:
    """Produces turns keyed ``tenant/conversation`` (one conversation stays on one partition)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._producer = AIOKafkaProducer(
            **client_options(settings),
            acks="all",
            enable_idempotence=True,
            max_request_size=settings.max_message_bytes,
            linger_ms=5,
        )

    async def __aenter__(self) -> TurnProducer:
        await self._producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._producer.stop()

    async def send_turns(self, turns: Iterable[Turn], on_sent=None) -> int:  # noqa: ANN001
        topic = self.settings.topic("turns")
        futures = []
        for turn in turns:
            futures.append(await self._producer.send(topic, key=turn.key.encode(), value=turn.to_bytes()))
            if on_sent:
                on_sent(turn)
        await asyncio.gather(*futures)
        return len(futures)

    async def send_raw(self, topic: str, key: bytes | None, value: bytes) -> None:
        await (await self._producer.send(topic, key=key, value=value))


async def request_consolidation(settings: Settings, command: ConsolidateCommand) -> int:
    """Put a consolidate command on ``memory.control``: keyed to its conversation's partition, or,
    without a conversation, onto every partition (each worker then consolidates what it holds).
    Returns how many messages were sent."""
    topic = settings.topic("control")
    producer = AIOKafkaProducer(**client_options(settings), acks="all")
    await producer.start()
    try:
        if command.conversation_id is not None:
            await (await producer.send(topic, key=command_key(command), value=command.to_bytes()))
            return 1
        partitions = await asyncio.wait_for(producer.partitions_for(topic), 30)
        futures = [
            await producer.send(topic, key=command_key(command), value=command.to_bytes(), partition=p)
            for p in sorted(partitions)
        ]
        await asyncio.gather(*futures)
        return len(futures)
    finally:
        await producer.stop()


def command_key(command: ConsolidateCommand) -> bytes:
    if command.conversation_id is not None:
        return conversation_key(command.tenant_id or "", command.conversation_id).encode()
    return f"{command.tenant_id or '*'}/*".encode()


class MemoryClient:
    """Request/reply over Kafka: a query carries a correlation id and the topic to answer on."""

    def __init__(self, settings: Settings, reply_topic: str | None = None):
        self.settings = settings
        self.reply_topic = reply_topic or settings.topic("replies")
        self._producer = AIOKafkaProducer(**client_options(settings), acks="all", linger_ms=0)
        self._consumer: AIOKafkaConsumer | None = None
        self._waiting: dict[str, asyncio.Future[Reply]] = {}
        self._forgets: dict[str, tuple[int, list[ForgetReply], asyncio.Future[list[ForgetReply]]]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> MemoryClient:
        await self._producer.start()
        self._consumer = AIOKafkaConsumer(
            **client_options(self.settings),
            enable_auto_commit=False,
            fetch_max_wait_ms=20,
            max_partition_fetch_bytes=self.settings.max_message_bytes,
            fetch_max_bytes=self.settings.max_message_bytes,
        )
        await self._consumer.start()
        partitions = await self._wait_partitions(self.reply_topic)
        tps = [TopicPartition(self.reply_topic, p) for p in partitions]
        self._consumer.assign(tps)
        await self._consumer.seek_to_end(*tps)
        for tp in tps:  # resolve the end position now, before any request is sent
            await self._consumer.position(tp)
        self._reader = asyncio.create_task(self._read_replies())
        return self

    async def _wait_partitions(self, topic: str) -> set[int]:
        try:
            return await asyncio.wait_for(self._producer.partitions_for(topic), 30)
        except asyncio.TimeoutError:
            raise RuntimeError(f"reply topic {topic} does not exist (is memstream up?)") from None

    async def __aexit__(self, *exc: object) -> None:
        if self._reader:
            self._reader.cancel()
        if self._consumer:
            await self._consumer.stop()
        await self._producer.stop()

    async def _read_replies(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    try:
                        reply = decode_message(Topic.REPLIES, record.value)
                    except SchemaError:
                        continue
                    if isinstance(reply, ForgetReply):
                        self._forget_part(reply)
                        continue
                    assert isinstance(reply, Reply)
                    fut = self._waiting.pop(reply.correlation_id, None)
                    if fut and not fut.done():
                        fut.set_result(reply)

    def _forget_part(self, reply: ForgetReply) -> None:
        waiting = self._forgets.get(reply.forget_id)
        if waiting is None:
            return
        parts, got, fut = waiting
        if all(r.part != reply.part for r in got):  # a redelivered part counts once
            got.append(reply)
        if len(got) >= parts and not fut.done():
            self._forgets.pop(reply.forget_id, None)
            fut.set_result(sorted(got, key=lambda r: r.part))

    async def forget(
        self,
        *,
        tenant_id: str,
        conversation_id: str | None = None,
        speaker: str | None = None,
        turn_ids: Iterable[str] = (),
        timeout_s: float = 300.0,
    ) -> ForgetOutcome:
        """Forget every turn of the scope said up to now and everything derived from it; returns
        once every stage has (the store, the windows, the buffers, the tables). Without a
        conversation the request goes to every partition, and each copy replies."""
        requested_at = datetime.now(timezone.utc)
        control = self.settings.topic(Topic.CONTROL)
        forget = Forget(
            forget_id=uuid.uuid4().hex,
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            speaker=speaker,
            turn_ids=list(turn_ids),
            requested_at=requested_at,  # type: ignore[arg-type]
            reply_topic=self.reply_topic,
        )
        partitions = [None] if conversation_id else sorted(await self._wait_partitions(control))
        forget.parts = len(partitions)
        fut: asyncio.Future[list[ForgetReply]] = asyncio.get_running_loop().create_future()
        self._forgets[forget.forget_id] = (forget.parts, [], fut)
        sends = [
            await self._producer.send(control, key=forget.key.encode(), value=forget.to_bytes(), partition=p)
            for p in partitions
        ]
        await asyncio.gather(*sends)
        try:
            replies = await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            self._forgets.pop(forget.forget_id, None)
            raise QueryTimeout(
                f"forget {forget.forget_id} not done within {timeout_s:.0f}s: are workers running every stage?"
            ) from None
        counts: dict[str, int] = {}
        retained: dict[str, datetime] = {}
        for r in replies:
            for k, n in r.counts.items():
                counts[k] = counts.get(k, 0) + n
            for copy in r.retained:
                retained[copy.topic] = max(retained.get(copy.topic, copy.until), copy.until)
        return ForgetOutcome(forget.forget_id, forget.parts, counts, retained, replies)

    async def ask(
        self,
        question: str,
        *,
        tenant_id: str,
        conversation_id: str,
        profile: str = "auto",
        k: int | None = None,
        answer: bool = True,
        question_time: datetime | None = None,
        timeout_s: float | None = None,
    ) -> Reply:
        """Send a query and wait for its reply. The query carries the deadline (now + the timeout):
        the worker cuts its LLM calls to fit, so a slow model costs the answer, not the reply."""
        timeout = timeout_s or self.settings.query_timeout_s
        sent_at = datetime.now(timezone.utc)
        query = Query(
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            correlation_id=uuid.uuid4().hex,
            reply_topic=self.reply_topic,
            question=question,
            question_time=question_time,
            profile=profile,
            k=k,
            answer=answer,
            sent_at=sent_at,  # type: ignore[arg-type]
            deadline=sent_at + timedelta(seconds=timeout),
        )
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._waiting[query.correlation_id] = fut
        await (
            await self._producer.send(self.settings.topic("queries"), key=query.key.encode(), value=query.to_bytes())
        )
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            self._waiting.pop(query.correlation_id, None)
            raise QueryTimeout(
                f"no reply to query {query.correlation_id} within {timeout:.0f}s on {self.reply_topic}: "
                "is a worker running the 'query' stage?"
            ) from None


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
) -> float:  # noqa: ANN001
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
