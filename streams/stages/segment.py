"""segment: the per-conversation sensory window (a changelog table) cut into topics; idle windows
drain on a tick sent through the stage's own input partition."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import Any, get_args

from memstream.processors.forgetting.forget import scrub_window
from memstream.processors.write.index import has_turn_position_from
from memstream.processors.write.seen_ids import SeenPieces
from memstream.processors.write.segment import (
    Segmenter,
    SegmenterState,
    highest_position,
    window_evictable,
    window_is_idle,
)
from memstream.schemas import CompressedTurn, Forget, SegmentedTurn, StmTick, WindowTick, decode_compressed_message
from memstream.topology import TOPOLOGY

from .api import TRACES, Out, Record, StageContext, StageResult, init_series
from .held import background_if_imported, held_turns_forget, held_turns_handler
from .seen import SeenTable

log = logging.getLogger(__name__)

STAGE = "segment"
TOPICS = TOPOLOGY[STAGE]  # its topics and table: memstream/topology.py


def register(ctx: StageContext) -> None:
    s, services = ctx.s, ctx.services
    states = ctx.table(STAGE, TOPICS.table)
    seen = SeenTable(
        ctx, STAGE, ctx.table(STAGE, TOPICS.seen_table), SeenPieces(Segmenter.remember_turn_ids, s.state_seen_piece_ids)
    )
    out_topic = s.topic(TOPICS.outputs[0])
    in_topic = s.topic(TOPICS.input)
    params = services.segment_params
    segmenter = Segmenter(
        params, services.embedder.embed, services.attention.cohesion if params.uses_attention else None
    )
    log.info(
        "segmentation: %s, window %d turns (carry %d), heads %s",
        params.method,
        params.window_turns,
        params.carry_turns,
        list(params.heads) or "upper layers",
    )

    # A conversation whose window was evicted (or never seen) continues its positions after the
    # highest the store holds. Only where this worker may open the store: an embedded store is one
    # process's, so an ingest-only worker beside the store's worker numbers from 0 as before.
    positions_from_store = s.qdrant_url is not None or bool({"index", "query", "consolidate"} & set(s.stage_list()))

    def first_position(tenant_id: str, conversation_id: str) -> int:
        highest = highest_position(lambda p: has_turn_position_from(services.store, tenant_id, conversation_id, p))
        return 0 if highest is None else highest + 1

    def evictable(state: SegmenterState) -> bool:
        return window_evictable(state, time.time(), s.state_evict_after_s)

    forget_in_windows = held_turns_forget(ctx, states, SegmenterState, scrub_window, "window:segmenter", out_topic)

    async def on_forget(record: Record, forget: Forget) -> StageResult:
        # Every window of the scope in this partition drops the covered turns; cached embeddings
        # of their text go too.
        result = await forget_in_windows(record, forget)
        services.embedder.clear_cache()
        return result

    async def handle(record: Record, message: CompressedTurn | WindowTick, data: Any) -> StageResult:
        state = SegmenterState.from_dict(data)
        traces: dict[str, str] = dict((data or {}).get(TRACES, {}))  # held turn id -> its trace context
        outs: list[Out] = []
        # The window's embedding and attention pass run in a thread: the loop keeps feeding the other
        # stages (the index embeds on the other core). The agent awaits it, so the table writes stay
        # in event order.
        if isinstance(message, WindowTick):
            if data and not message.force and evictable(state):
                await seen.drop(message.key, data)
                await ctx.delete_state(STAGE, states, message.key)
                return StageResult()
            if not message.force and not window_is_idle(state, time.time(), s.stm_idle_s):
                return StageResult()  # a turn arrived after the tick was sent
            outs = [Out(out_topic, seg.key, seg) for seg in await asyncio.to_thread(segmenter.drain, state)]
            await background_if_imported(
                ctx, record, [o.value.item for o in outs if isinstance(o.value, SegmentedTurn)]
            )
            # The STM buffered these just now; tell it the conversation is idle.
            tick = StmTick(
                tenant_id=message.tenant_id,
                conversation_id=message.conversation_id,
                sent_at=datetime.now(timezone.utc),
                conversation_idle=True,
                force=message.force,
            )
            outs.append(Out(out_topic, message.key, tick))
        else:
            turn_id = message.turn.turn_id
            if data is None and positions_from_store:
                state.next_seq = await asyncio.to_thread(first_position, message.tenant_id, message.conversation_id)
            if record.traceparent and not seen.seen(message.key, data, turn_id):
                # The window may emit this turn while handling a later message: it carries on this
                # handling's trace, not that one's.
                traces[turn_id] = ctx.services.tracing.current_traceparent() or record.traceparent
            earlier = seen.earlier(message.key, data)
            added = await asyncio.to_thread(segmenter.add, state, message, time.time(), earlier)
            outs = [Out(out_topic, seg.key, seg) for seg in added]
        for out in outs:
            if isinstance(out.value, SegmentedTurn):
                out.traceparent = traces.pop(out.value.item.turn.turn_id, None)
        for out in outs:
            if isinstance(out.value, SegmentedTurn) and out.value.boundary:
                ctx.metrics.segment_boundaries.labels(out.value.boundary_reason).inc()
        # Emitted turns are acknowledged by the broker before the window forgets them.
        await ctx.produce(STAGE, outs)
        entry = state.to_dict()
        if traces:
            entry[TRACES] = traces
        await seen.seal(message.key, entry)
        await ctx.save_state(states, message.key, entry, source=record)
        return StageResult()

    ctx.agent(STAGE, TOPICS.input, held_turns_handler(ctx, STAGE, states, decode_compressed_message, handle, on_forget))
    init_series(
        ctx.metrics.segment_boundaries,
        [r for r in get_args(SegmentedTurn.model_fields["boundary_reason"].annotation) if r != "none"],
    )
    init_series(ctx.metrics.embedded_texts, ("computed", "cached"))

    # A quiet, empty window is deleted by the same tick (then nothing is idle: it has no turn).
    ctx.evict_timer(
        STAGE,
        states,
        lambda data: evictable(SegmenterState.peek(data)),
        in_topic,
        lambda tenant, conv: WindowTick(tenant_id=tenant, conversation_id=conv, sent_at=datetime.now(timezone.utc)),
    )
    # An idle window drains through its own partition: the tick goes to the stage's input topic.
    ctx.idle_timer(
        TOPICS.table,
        states,
        lambda data: window_is_idle(SegmenterState.peek(data), time.time(), s.stm_idle_s),
        in_topic,
        lambda tenant, conv: WindowTick(tenant_id=tenant, conversation_id=conv, sent_at=datetime.now(timezone.utc)),
    )
