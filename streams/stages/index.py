"""index: a memory write's cards, scenes, triggers, turns and profile items embedded and upserted."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from memstream.processors.index import COLLECTIONS, index_write
from memstream.schemas import MemoryWrite
from memstream.schemas.topics import Topic

from ..runtime.context import Record, StageContext, StageResult, init_series

STAGE = "index"
INPUT = Topic.CARDS
OUTPUTS: tuple[str, ...] = ()  # writes to the vector store


def register(ctx: StageContext) -> None:
    services, metrics = ctx.services, ctx.metrics

    def index(write: MemoryWrite) -> None:
        written = index_write(write, services.embedder, services.store)
        for collection, n in written.items():
            metrics.points_written.labels(collection).inc(n)
        now = datetime.now(timezone.utc)
        for turn in write.source_turns:
            if turn.received_at is not None:
                metrics.turn_to_memory.observe(max(0.0, (now - turn.received_at).total_seconds()))

    async def handler(record: Record) -> StageResult:
        write = MemoryWrite.from_bytes(record.value)
        await asyncio.to_thread(index, write)
        return StageResult()

    ctx.agent(STAGE, INPUT, handler)
    init_series(metrics.points_written, COLLECTIONS)
    init_series(metrics.embedded_texts, ("computed", "cached"))
