"""The reply topic, as one client reads it: the answers to its queries and reads (by correlation id)
and the parts of its forgets (by forget id)."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition

from memstream.schemas import Forget, ForgetReply, Query, Reply, SchemaError, decode_message
from memstream.schemas.read import ReadReply, ReadRequest
from memstream.schemas.topics import Topic
from memstream.streams.kafka_options import client_options
from memstream.tracing import Tracing

from .errors import QueryTimeout
from .kafka import KafkaLink


class Replies:
    """One consumer of ``topic``, started with the first request that waits for a reply; it reads from
    the topic's end, so it sees the replies to what is sent after it started."""

    def __init__(self, kafka: KafkaLink, topic: str):
        self.kafka = kafka
        self.topic = topic
        self.waiting: dict[str, asyncio.Future[Reply | ReadReply]] = {}
        self.forgets: dict[str, tuple[int, list[ForgetReply], asyncio.Future[list[ForgetReply]]]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Start reading the reply topic from its end (once), before the first request is sent."""
        async with self._lock:
            if self._reader is not None:
                return
            settings = self.kafka.settings
            try:
                self._consumer = AIOKafkaConsumer(
                    **client_options(settings),
                    enable_auto_commit=False,
                    fetch_max_wait_ms=20,
                    max_partition_fetch_bytes=settings.max_message_bytes,
                    fetch_max_bytes=settings.max_message_bytes,
                )
                await self._consumer.start()
                tps = [TopicPartition(self.topic, p) for p in await self.kafka.partitions(self.topic)]
                self._consumer.assign(tps)
                await self._consumer.seek_to_end(*tps)
                for tp in tps:  # resolve the end position now, before any request is sent
                    await self._consumer.position(tp)
            except BaseException as exc:
                if self._consumer is not None:
                    await self._consumer.stop()
                    self._consumer = None
                raise self.kafka.unreachable(exc) from exc
            self._reader = asyncio.create_task(self._read())

    async def close(self) -> None:
        if self._reader:
            self._reader.cancel()
            self._reader = None
        for waiting in self.waiting.values():
            waiting.cancel()
        for _, _, forgetting in self.forgets.values():
            forgetting.cancel()
        if self._consumer:
            await self._consumer.stop()
            self._consumer = None

    async def request(self, topic: str, payload: Query | ReadRequest, timeout: float, span: str) -> Reply | ReadReply:
        """Send ``payload`` (a trace starts with it, named ``span``) and wait for its reply."""
        await self.start()
        fut: asyncio.Future[Reply | ReadReply] = asyncio.get_running_loop().create_future()
        self.waiting[payload.correlation_id] = fut
        try:
            await self.kafka.publish(topic, [(payload.key.encode(), payload.to_bytes(), None)], traced=span)
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise QueryTimeout(
                f"no reply to {payload.kind} {payload.correlation_id} within {timeout:.0f}s on {self.topic}: "
                "is a worker running the 'query' stage?"
            ) from None
        finally:
            self.waiting.pop(payload.correlation_id, None)

    async def forget(
        self, topic: str, forget: Forget, partitions: list[int | None], timeout_s: float
    ) -> list[ForgetReply]:
        """Send ``forget`` to ``partitions`` and wait for the reply of every part, in part order."""
        fut: asyncio.Future[list[ForgetReply]] = asyncio.get_running_loop().create_future()
        await self.start()
        self.forgets[forget.forget_id] = (forget.parts, [], fut)
        await self.kafka.publish(topic, [(forget.key.encode(), forget.to_bytes(), p) for p in partitions])
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            self.forgets.pop(forget.forget_id, None)
            raise QueryTimeout(
                f"forget {forget.forget_id} not done within {timeout_s:.0f}s: are workers running every stage?"
            ) from None

    async def _read(self) -> None:
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
                    assert isinstance(reply, (Reply, ReadReply))
                    if isinstance(reply, Reply):
                        reply._trace_id = Tracing.trace_id_of(record.headers)  # the question's trace
                    fut = self.waiting.get(reply.correlation_id)
                    if fut and not fut.done():
                        fut.set_result(reply)

    def _forget_part(self, reply: ForgetReply) -> None:
        waiting = self.forgets.get(reply.forget_id)
        if waiting is None:
            return
        parts, got, fut = waiting
        if all(r.part != reply.part for r in got):  # a redelivered part counts once
            got.append(reply)
        if len(got) >= parts and not fut.done():
            self.forgets.pop(reply.forget_id, None)
            fut.set_result(sorted(got, key=lambda r: r.part))
