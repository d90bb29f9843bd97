"""compress: each turn through LLMLingua (or passed through), raw text kept for Replay. Each turn it
lets in also goes straight to the index stage as a fresh turn (on ``cards``, keyed like the
conversation's writes and forgets), so it is retrievable long before the STM flushes it into cards.
Forgets enter the pipeline here: a request on ``control`` goes onto its partition of ``turns`` (behind
the turns it must catch), and leaves a tombstone that drops covered turns arriving later."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

from memstream.processors.forgetting.forget import ForgetScope, add_tombstone, tombstoned
from memstream.processors.write.compress import compress_turn, fresh_turn, split_turn
from memstream.schemas import Forget, SchemaError, Turn, decode_message
from memstream.schemas.keys import check_key
from memstream.schemas.topics import Topic, check_reply_topic, message_kind
from memstream.topology import TOPOLOGY

from .api import Out, Record, StageContext, StageResult, init_series

STAGE = "compress"
TOPICS = TOPOLOGY[STAGE]  # its topics and table: memstream/topology.py


class TurnRejected(SchemaError):
    """A turn that parses but is not acceptable (e.g. too long): a dead letter with its reason."""


def register(ctx: StageContext) -> None:
    s, services = ctx.s, ctx.services
    compressor = services.compressor  # loaded once, at start-up
    out_topic = s.topic(TOPICS.outputs[0])
    # A forget reaches cards only after passing this stage, so it always lands behind the fresh
    # turns it covers (same key, same partition).
    fresh_topic = s.topic(Topic.CARDS)
    turns_topic = s.topic(TOPICS.input)
    tombstones = ctx.table(STAGE, TOPICS.table)
    # The segmenter and the index stage of this worker embed each turn's text (the fresh point, the
    # window); embedded here, off their paths, both find it in the shared cache.
    warm = s.fresh_turns and bool({"segment", "index"} & set(s.stage_list()))

    async def on_forget(record: Record, forget: Forget) -> StageResult:
        key = f"{record.partition}/{forget.tenant_id}"
        entries = add_tombstone(tombstones.get(key), ForgetScope.of(forget), time.time(), s.topic_retention_s)
        await ctx.save_state(tombstones, key, entries)
        return StageResult([Out(out_topic, forget.key, forget, partition=record.partition)])

    async def handler(record: Record) -> StageResult:
        message = decode_message(TOPICS.input, record.value)
        assert isinstance(message, (Turn, Forget))
        check_key(record.key, message)  # before anything of it is kept
        ctx.check_signature(record)
        if isinstance(message, Forget):
            check_reply_topic(s.topic_prefix, message.reply_topic)
            return await on_forget(record, message)
        return await take_turn(record, message)

    async def bulk_handler(record: Record) -> StageResult:
        turn = decode_message(Topic.BULK_TURNS, record.value)
        assert isinstance(turn, Turn)  # the topic carries nothing else
        check_key(record.key, turn)
        ctx.check_signature(record)  # a refused record does not wait for its turn
        await ctx.live_first(record)
        await ctx.in_background()  # what it makes of the turn is background work too, in every stage
        result = await take_turn(record, turn, imported=True)
        ctx.imported(turn.tenant_id)
        return result

    async def take_turn(record: Record, turn: Turn, imported: bool = False) -> StageResult:
        if len(turn.text) > s.max_turn_chars_hard:
            raise TurnRejected(f"turn text too long: {len(turn.text)} characters > {s.max_turn_chars_hard}")
        if tombstoned(tombstones.get(f"{record.partition}/{turn.tenant_id}"), turn, time.time()):
            ctx.metrics.forgotten.labels("dropped").inc()
            return StageResult()
        try:
            chunks = split_turn(turn, s.max_turn_chars)  # a long turn goes on as chunks of its id
        except ValueError as exc:
            raise TurnRejected(f"turn cannot be split into chunks: {exc}") from exc
        # Imported turns are not live: turn-to-memory latency (which starts here) leaves them out.
        received_at = (
            datetime.fromtimestamp(record.timestamp, timezone.utc) if record.timestamp and not imported else None
        )
        if warm:
            await asyncio.to_thread(services.embedder.embed, [chunk.text for chunk in chunks])
        outs = []
        for chunk in chunks:
            if compressor is None:
                item = compress_turn(chunk, None, s.compress_rate, received_at)
            else:
                item = await asyncio.to_thread(compress_turn, chunk, compressor, s.compress_rate, received_at)
            if imported:
                item = item.model_copy(update={"imported": True})
            ctx.metrics.compress_tokens.labels("in").inc(item.tokens_in)
            ctx.metrics.compress_tokens.labels("out").inc(item.tokens_out)
            ctx.metrics.turn_tokens.labels("in").observe(item.tokens_in)
            ctx.metrics.turn_tokens.labels("out").observe(item.tokens_out)
            if s.fresh_turns and not imported:  # history need not be searchable ahead of its flush
                outs.append(Out(fresh_topic, item.key, fresh_turn(item)))
            outs.append(Out(out_topic, item.key, item))
        if len(chunks) > 1:
            ctx.metrics.turn_chunks.inc(len(chunks))
        return StageResult(outs)

    async def on_control(record: Record) -> StageResult:
        # Consolidate commands are the store group's; a forget request is this stage's.
        if message_kind(record.value) != "forget":
            return StageResult()
        forget = Forget.from_bytes(record.value)
        check_key(record.key, forget)  # this group dead-letters forgets (the consolidate group skips them)
        ctx.check_signature(record)
        check_reply_topic(s.topic_prefix, forget.reply_topic)
        if forget.phase != "request":
            return StageResult()
        moving = forget.model_copy(update={"phase": "pipeline", "part": record.partition})
        return StageResult([Out(turns_topic, moving.key, moving, partition=record.partition)])

    ctx.agent(STAGE, TOPICS.input, handler)
    ctx.agent(f"{STAGE}.forget", Topic.CONTROL, on_control)
    ctx.agent(f"{STAGE}.bulk", Topic.BULK_TURNS, bulk_handler)
    init_series(ctx.metrics.compress_tokens, ("in", "out"))
    init_series(ctx.metrics.forgotten, ("dropped",))
