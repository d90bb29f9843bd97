"""Reading the store's durable record (``<prefix>.record``) back from Kafka: every entry from the
start, or from saved positions, up to end positions taken before reading (a reader never chases a
record that keeps growing; it asks for the new end again when it wants more)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from memstream.config import Settings
from memstream.schemas.record import StoredPoint
from memstream.schemas.topics import Topic
from memstream.streams.kafka_options import client_options

Offsets = dict[int, int]  # partition -> the next offset to read


@dataclass(frozen=True)
class RecordEntry:
    partition: int
    offset: int
    key: str
    point: StoredPoint | None  # None: a tombstone (the point was deleted or forgotten)


class RecordLog:
    """A reader of the record, outside any consumer group (it commits nothing: a rebuild keeps its
    own positions with what it built)."""

    def __init__(self, settings: Settings):
        self.topic = settings.topic(Topic.RECORD)
        self._options = client_options(settings)
        self._consumer = AIOKafkaConsumer(
            **self._options,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=settings.max_message_bytes,
            fetch_max_bytes=max(settings.max_message_bytes, 52_428_800),
        )
        self._partitions: list[TopicPartition] = []

    async def __aenter__(self) -> RecordLog:
        await self._consumer.start()
        ids = await self._partition_ids()
        if not ids:
            await self._consumer.stop()
            raise LookupError(f"no record topic {self.topic}: no worker has written this store's record")
        self._partitions = [TopicPartition(self.topic, p) for p in sorted(ids)]
        self._consumer.assign(self._partitions)
        return self

    async def _partition_ids(self) -> list[int]:
        admin = AIOKafkaAdminClient(**self._options)
        await admin.start()
        try:
            [described] = await admin.describe_topics([self.topic])
        finally:
            await admin.close()
        if described.get("error_code"):  # UNKNOWN_TOPIC_OR_PARTITION: not made yet
            return []
        return [p["partition"] for p in described.get("partitions", [])]

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def end_offsets(self) -> Offsets:
        ends = await self._consumer.end_offsets(self._partitions)
        return {tp.partition: int(offset) for tp, offset in ends.items()}

    async def start_offsets(self) -> Offsets:
        starts = await self._consumer.beginning_offsets(self._partitions)
        return {tp.partition: int(offset) for tp, offset in starts.items()}

    async def read(
        self, start: Mapping[int, int] | None, end: Mapping[int, int], *, batch: int = 500
    ) -> AsyncIterator[list[RecordEntry]]:
        """Entries from ``start`` (None: the beginning) up to ``end``, in batches, each partition in
        order. A value that is not a stored point raises SchemaError: a rebuild must not skip one."""
        first = start or await self.start_offsets()
        todo = {
            tp: first.get(tp.partition, 0)
            for tp in self._partitions
            if first.get(tp.partition, 0) < end.get(tp.partition, 0)
        }
        for tp, begin in todo.items():
            self._consumer.seek(tp, begin)
        remaining = set(todo)
        while remaining:
            fetched = await self._consumer.getmany(*remaining, timeout_ms=1000, max_records=batch)
            # A partition read to its end is paused by leaving it out of getmany; its position stays.
            out: list[RecordEntry] = []
            for tp, messages in fetched.items():
                stop = end[tp.partition]
                for m in messages:
                    if m.offset >= stop:
                        break
                    point = None if m.value is None else StoredPoint.from_bytes(m.value)
                    out.append(RecordEntry(tp.partition, m.offset, (m.key or b"").decode(), point))
            for tp in list(remaining):
                if await self._consumer.position(tp) >= end[tp.partition]:
                    remaining.discard(tp)
            if out:
                yield out


async def live_points(settings: Settings) -> dict[str, StoredPoint]:
    """The record's current view: the latest entry of every key that is not a tombstone."""
    out: dict[str, StoredPoint | None] = {}
    async with RecordLog(settings) as log:
        async for entries in log.read(None, await log.end_offsets()):
            for entry in entries:
                out[entry.key] = entry.point
    return {key: point for key, point in out.items() if point is not None}
