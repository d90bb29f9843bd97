"""compress: each turn through LLMLingua (or passed through), raw text kept for Replay."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from memstream.processors.compress import compress_turn
from memstream.schemas import SchemaError, Turn
from memstream.schemas.topics import Topic

from ..runtime.context import Out, Record, StageContext, StageResult, init_series

STAGE = "compress"
INPUT = Topic.TURNS
OUTPUTS = (Topic.TURNS_COMPRESSED,)


class TurnRejected(SchemaError):
    """A turn that parses but is not acceptable (e.g. too long): a dead letter with its reason."""


def register(ctx: StageContext) -> None:
    s, services = ctx.s, ctx.services
    compressor = services.compressor  # loaded once, at start-up
    out_topic = s.topic(OUTPUTS[0])

    async def handler(record: Record) -> StageResult:
        turn = Turn.from_bytes(record.value)
        if len(turn.text) > s.max_turn_chars:
            raise TurnRejected(f"turn text too long: {len(turn.text)} characters > {s.max_turn_chars}")
        received_at = datetime.fromtimestamp(record.timestamp, timezone.utc) if record.timestamp else None
        if compressor is None:
            item = compress_turn(turn, None, s.compress_rate, received_at)
        else:
            item = await asyncio.to_thread(compress_turn, turn, compressor, s.compress_rate, received_at)
        ctx.metrics.compress_tokens.labels("in").inc(item.tokens_in)
        ctx.metrics.compress_tokens.labels("out").inc(item.tokens_out)
        ctx.metrics.turn_tokens.labels("in").observe(item.tokens_in)
        ctx.metrics.turn_tokens.labels("out").observe(item.tokens_out)
        return StageResult([Out(out_topic, item.key, item)])

    ctx.agent(STAGE, INPUT, handler)
    init_series(ctx.metrics.compress_tokens, ("in", "out"))
