"""The store's durable record (:class:`memstream.ports.MemoryRecord`) on its compacted Kafka topic.

The stages write the store from worker threads, synchronously: the record's producer runs on an
event loop of its own (a daemon thread) and ``write`` blocks until the broker has acknowledged every
entry (acks=all, idempotent). A broker that does not answer in time is reported as the store being
unavailable: the stage holds its message and tries again, as for a Qdrant outage."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine, Sequence, TypeVar

from aiokafka import AIOKafkaProducer

from memstream.config import Settings
from memstream.ports import StoreUnavailable
from memstream.schemas.topics import Topic
from memstream.streams.kafka_options import client_options

T = TypeVar("T")


class KafkaRecord:
    def __init__(self, settings: Settings):
        self.topic = settings.topic(Topic.RECORD)
        self._settings = settings
        self._timeout_s = settings.record_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memory-record", daemon=True)
        self._thread.start()
        self._producer: AIOKafkaProducer | None = None
        try:
            self._producer = self._run(self._start())
        except BaseException:
            self._stop_loop()
            raise

    async def _start(self) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            **client_options(self._settings),
            acks="all",
            enable_idempotence=True,
            max_request_size=self._settings.max_message_bytes,
            linger_ms=2,
        )
        await producer.start()
        return producer

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(self._timeout_s)
        except TimeoutError as exc:
            future.cancel()
            raise StoreUnavailable(f"the record {self.topic} was not acknowledged in {self._timeout_s:.0f}s") from exc

    def write(self, entries: Sequence[tuple[str, bytes | None]]) -> None:
        if not entries:
            return
        producer = self._producer
        assert producer is not None

        async def send() -> None:
            sent = [await producer.send(self.topic, key=key.encode(), value=value) for key, value in entries]
            await asyncio.gather(*sent)

        try:
            self._run(send())
        except StoreUnavailable:
            raise
        except Exception as exc:  # the broker refused or could not be reached: an outage, held and retried
            raise StoreUnavailable(f"the record {self.topic} could not be written: {exc}") from exc

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def close(self) -> None:
        if self._producer is not None:
            try:
                self._run(self._producer.stop())
            finally:
                self._producer = None
                self._stop_loop()
