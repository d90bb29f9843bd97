"""The SDK's producer: one per client (idempotent, acks=all), for turns, queries and commands."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Iterable

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError

from memstream.config import Settings
from memstream.schemas import Turn
from memstream.schemas.signature import sign
from memstream.streams.kafka_options import client_options
from memstream.tracing import SpanKind, Tracing

from .errors import BrokerUnavailable, MemstreamError

# What is sent: (key, value, partition); partition None: the producer picks it by key.
Record = tuple[bytes | None, bytes, int | None]


class KafkaLink:
    """Sends records (a trace started where asked) and waits for the broker's acks; Kafka errors come
    out as ``BrokerUnavailable``."""

    def __init__(self, settings: Settings, tracing: Tracing):
        self.settings = settings
        self.tracing = tracing
        # The tenants' write secrets this client holds: it signs each record with its key's tenant's.
        self._secrets = settings.write_secrets
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(
            **client_options(self.settings),
            acks="all",
            enable_idempotence=True,
            max_request_size=self.settings.max_message_bytes,
            linger_ms=5,
        )
        await self._producer.start()

    async def close(self) -> None:
        if self._producer:
            await self._producer.stop()
            self._producer = None

    @property
    def producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise MemstreamError("the client is not started: use `async with AsyncMemoryClient(...)` or start()")
        return self._producer

    def unreachable(self, exc: BaseException) -> BaseException:
        """``exc`` as the client raises it: a connection failure says where it looked for Kafka."""
        if isinstance(exc, (KafkaConnectionError, OSError)):
            where = self.settings.kafka_bootstrap
            return BrokerUnavailable(f"cannot reach Kafka at {where}: {exc} (is it running? `memstream up`)")
        return exc

    async def partitions(self, topic: str) -> set[int]:
        try:
            return await asyncio.wait_for(self.producer.partitions_for(topic), 30)
        except asyncio.TimeoutError:
            raise MemstreamError(
                f"topic {topic} does not exist: is memstream up (`memstream up`, or create_topics=True)?"
            ) from None

    async def targets(self, topic: str, *, keyed: bool) -> list[int | None]:
        """Where a message goes: its key's partition when it is ``keyed`` (to one conversation), else
        a copy on every partition of ``topic``."""
        return [None] if keyed else [p for p in sorted(await self.partitions(topic))]

    async def send(
        self, topic: str, key: bytes | None, value: bytes, partition: int | None = None, *, traced: str | None = None
    ) -> Awaitable:
        """Enqueue one record; the returned future resolves once the broker has it (acks=all).
        ``traced``: the record starts a trace (a span of that name, whose context its headers carry)."""
        headers = None
        if traced and self.tracing.enabled:
            attributes = {"messaging.system": "kafka", "messaging.destination.name": topic}
            if key and b"/" in key:
                attributes["memstream.tenant_id"] = key.split(b"/", 1)[0].decode("utf-8", "replace")
            with self.tracing.span(traced, kind=SpanKind.PRODUCER, attributes=attributes) as span:
                headers = self.tracing.headers(span)
        signature = sign(self._secrets, key, value) if self._secrets else None
        if signature:
            headers = [*(headers or []), signature]
        try:
            return await self.producer.send(topic, key=key, value=value, partition=partition, headers=headers)
        except KafkaError as exc:
            raise BrokerUnavailable(f"cannot send to {topic}: {exc}") from exc

    @staticmethod
    async def acked(futures: list[Awaitable]) -> None:
        try:
            await asyncio.gather(*futures)
        except KafkaError as exc:
            raise BrokerUnavailable(f"the broker did not acknowledge: {exc}") from exc

    async def publish(self, topic: str, records: Iterable[Record], *, traced: str | None = None) -> int:
        """Send ``records`` and return, with how many, once the broker has every one of them."""
        futures = [await self.send(topic, key, value, partition, traced=traced) for key, value, partition in records]
        await self.acked(futures)
        return len(futures)

    async def send_turns(
        self, topic: str, turns: Iterable[Turn], batch_size: int, on_sent: Callable[[Turn], None] | None, traced: str
    ) -> int:
        """Send turns keyed by their conversation, waiting for the broker's acks every ``batch_size``
        (and at the end); returns how many."""
        sent = 0
        pending: list[Awaitable] = []
        for turn in turns:
            pending.append(await self.send(topic, turn.key.encode(), turn.to_bytes(), traced=traced))
            if on_sent:
                on_sent(turn)
            if len(pending) >= batch_size:
                await self.acked(pending)
                sent += len(pending)
                pending = []
        await self.acked(pending)
        return sent + len(pending)
