"""index: a memory write's cards, scenes, triggers, turns and profile items embedded and upserted; a
fresh turn's raw point written at once, where the turn has none yet; a forget that reaches it (behind
every write of the turns it covers) erases them from the store."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from memstream.processors.forgetting.forget import ForgetScope, erase
from memstream.processors.write.index import COLLECTIONS, index_fresh_turn, index_write
from memstream.schemas import Forget, FreshTurn, MemoryWrite, decode_message
from memstream.schemas.topics import Topic
from memstream.topology import TOPOLOGY

from .api import Out, Record, StageContext, StageResult, init_series
from .forgetting import onward

STAGE = "index"
TOPICS = TOPOLOGY[STAGE]  # its topics and table: memstream/topology.py


def register(ctx: StageContext) -> None:
    s, services, metrics = ctx.s, ctx.services, ctx.metrics
    control = s.topic(Topic.CONTROL)

    def index(write: MemoryWrite) -> None:
        written = index_write(write, services.embedder, services.store)
        for collection, n in written.items():
            metrics.points_written.labels(collection).inc(n)
        now = datetime.now(timezone.utc)
        for turn in write.source_turns:
            if turn.received_at is not None:
                metrics.turn_to_memory.observe(max(0.0, (now - turn.received_at).total_seconds()))

    def index_fresh(fresh: FreshTurn) -> None:
        written = index_fresh_turn(fresh, services.embedder, services.store)
        metrics.fresh_turns.labels("written" if written else "present").inc()
        if written and fresh.received_at is not None:
            age = datetime.now(timezone.utc) - fresh.received_at
            metrics.turn_to_fresh.observe(max(0.0, age.total_seconds()))

    def erase_scope(forget: Forget) -> dict[str, int]:
        with services.store_lock:
            counts = erase(services.store, ForgetScope.of(forget))
        services.embedder.clear_cache()
        for where, n in counts.items():
            metrics.forgotten.labels(where).inc(n)
        return counts

    async def handler(record: Record) -> StageResult:
        message = decode_message(TOPICS.input, record.value)
        if isinstance(message, Forget):
            counts = await asyncio.to_thread(erase_scope, message)
            erased = onward(message, counts, phase="erased")
            return StageResult([Out(control, message.key, erased, partition=record.partition)])
        if isinstance(message, FreshTurn):
            await asyncio.to_thread(index_fresh, message)
            return StageResult()
        assert isinstance(message, MemoryWrite)
        await asyncio.to_thread(index, message)
        return StageResult()

    ctx.agent(STAGE, TOPICS.input, handler)
    init_series(metrics.points_written, COLLECTIONS)
    init_series(metrics.fresh_turns, ("written", "present"))
    init_series(metrics.embedded_texts, ("computed", "cached"))
