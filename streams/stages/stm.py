"""stm: the short-term buffer of pending topics per conversation (a changelog table), flushed on its
token budget and on idle (a session end only cuts a topic)."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, get_args

from memstream.processors.forgetting.forget import scrub_buffer
from memstream.processors.write.seen_ids import SeenPieces
from memstream.processors.write.stm import StmPolicy, StmState, buffer_evictable, buffer_step, is_idle
from memstream.schemas import SegmentedTurn, StmTick, decode_segments_message
from memstream.schemas.memory import FlushReason
from memstream.topology import TOPOLOGY

from .api import TRACES, Out, Record, StageContext, StageResult, init_series
from .held import background_if_imported, held_turns_forget, held_turns_handler
from .seen import SeenTable

STAGE = "stm"
TOPICS = TOPOLOGY[STAGE]  # its topics and table: memstream/topology.py


def register(ctx: StageContext) -> None:
    s = ctx.s
    buffers = ctx.table(STAGE, TOPICS.table)
    policy = StmPolicy(budget_tokens=s.stm_tokens, idle_s=s.stm_idle_s)
    seen = SeenTable(
        ctx, STAGE, ctx.table(STAGE, TOPICS.seen_table), SeenPieces(policy.remember_turn_ids, s.state_seen_piece_ids)
    )
    out_topic = s.topic(TOPICS.outputs[0])
    in_topic = s.topic(TOPICS.input)

    on_forget = held_turns_forget(ctx, buffers, StmState, scrub_buffer, "buffer:stm", out_topic)

    def evictable(data: Any) -> bool:
        return buffer_evictable(StmState.peek(data), time.time(), s.state_evict_after_s)

    async def handle(record: Record, message: SegmentedTurn | StmTick, data: Any) -> StageResult:
        if isinstance(message, StmTick) and not message.force and not message.conversation_idle:
            if data and evictable(data):
                await seen.drop(message.key, data)
                await ctx.delete_state(STAGE, buffers, message.key)
                return StageResult()
        state, flushes, duplicate = buffer_step(data, message, time.time(), policy, seen.earlier(message.key, data))
        if duplicate:
            ctx.metrics.stm_duplicates.inc()
        if isinstance(message, StmTick):
            await background_if_imported(ctx, record, [t for f in flushes for t in f.turns()])
        # Each buffered turn's trace context, so that its flush links back to it.
        traces: dict[str, str] = dict((data or {}).get(TRACES, {}))
        if isinstance(message, SegmentedTurn) and record.traceparent and not duplicate:
            traces[message.item.turn.turn_id] = record.traceparent
        for f in flushes:
            joined = [traces.pop(t.turn.turn_id) for t in f.turns() if t.turn.turn_id in traces]
            # A flush joins many turns: it starts a trace of its own, linked to each turn's.
            with ctx.services.tracing.joining(
                "memstream.stm.flush",
                joined,
                attributes={"memstream.turns": len(f.turns()), "memstream.reason": f.reason},
            ):
                # Acknowledged by the broker before the buffer forgets its turns.
                await ctx.produce(STAGE, [Out(out_topic, f.key, f)])
            ctx.metrics.stm_flushes.labels(f.reason).inc()
        if traces:
            state[TRACES] = traces
        await seen.seal(message.key, state)
        await ctx.save_state(buffers, message.key, state, source=record)
        return StageResult()

    ctx.agent(STAGE, TOPICS.input, held_turns_handler(ctx, STAGE, buffers, decode_segments_message, handle, on_forget))
    init_series(ctx.metrics.stm_flushes, get_args(FlushReason))

    async def buffer_gauges() -> None:
        states = [StmState.peek(data) for _, data in list(buffers.items()) if data]
        ctx.metrics.stm_buffer_turns.set(sum(st.pending_turns for st in states))
        ctx.metrics.stm_buffer_tokens.set(sum(st.tokens for st in states))
        ctx.metrics.stm_buffer_conversations.set(sum(1 for st in states if st.pending_turns))

    ctx.app.timer(interval=5.0, name="memstream.stm.gauges")(buffer_gauges)

    ctx.evict_timer(
        STAGE,
        buffers,
        evictable,
        in_topic,
        lambda tenant, conv: StmTick(tenant_id=tenant, conversation_id=conv, sent_at=datetime.now(timezone.utc)),
    )
    ctx.idle_timer(
        TOPICS.table,
        buffers,
        lambda data: is_idle(StmState.peek(data), time.time(), policy),
        in_topic,
        lambda tenant, conv: StmTick(tenant_id=tenant, conversation_id=conv, sent_at=datetime.now(timezone.utc)),
    )
