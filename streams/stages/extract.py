"""extract: one structured LLM call per STM flush (or the extractive mode) into a memory write."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import get_args

from memstream.processors.write.extract import ExtractiveExtractor, LlmExtractor, LlmUnavailable
from memstream.schemas import Forget, MemoryWrite, StmFlush, decode_message, imported_flush
from memstream.schemas.memory import ExtractionMode
from memstream.topology import TOPOLOGY

from .api import Out, Record, Slot, StageContext, StageResult, conversation_lane, init_series

log = logging.getLogger(__name__)

STAGE = "extract"
TOPICS = TOPOLOGY[STAGE]  # its topics and table: memstream/topology.py


def register(ctx: StageContext) -> None:
    s, services, metrics = ctx.s, ctx.services, ctx.metrics
    llm = services.llm_for("extract")
    mode = s.effective_extract_mode
    extractor = (
        LlmExtractor(
            llm,
            max_tokens=s.extract_max_tokens,
            max_cards=s.extract_max_cards,
            max_card_turns=s.extract_max_card_turns,
            stable_schema=s.llm_stable_schemas,
        )
        if mode == "llm" and llm
        else ExtractiveExtractor()
    )
    log.info("extraction mode: %s", extractor.mode)
    out_topic = s.topic(TOPICS.outputs[0])
    without_llm = ExtractiveExtractor()  # for a tenant over its LLM budget

    async def extract(flush: StmFlush) -> MemoryWrite:
        # An unreachable LLM (a restart, an outage) holds the partition for up to LLM_OUTAGE_S, then
        # the flush falls back to the extractive mode: memories from a short outage stay the LLM's.
        waited, delay = 0.0, 1.0
        while True:
            try:
                return await asyncio.to_thread(
                    partial(extractor.extract, flush, fallback_when_unavailable=waited >= s.llm_outage_s)
                )
            except LlmUnavailable as exc:
                log.warning("LLM unavailable for flush %s, trying again in %.0fs: %s", flush.flush_id, delay, exc)
                await asyncio.sleep(delay)
                waited += delay
                delay = min(delay * 2, 15.0)

    async def handler(record: Record) -> StageResult:
        if not record.background and imported_flush(record.value):  # an idle conversation's: flushed on a tick
            await ctx.in_background()
        message = decode_message(TOPICS.input, record.value)
        if isinstance(message, Forget):  # behind the flushes it follows: on to the index stage
            return StageResult([Out(out_topic, message.key, message, partition=record.partition)])
        assert isinstance(message, StmFlush)
        flush = message
        if extractor.mode == "llm" and ctx.llm_budget.over(flush.tenant_id):
            # Over its LLM budget: the tenant's memories are still made, without the LLM.
            write = await asyncio.to_thread(without_llm.write, flush, mode="extractive_fallback", costs=[])
            ctx.llm_budget.fell_back(flush.tenant_id, STAGE)
        else:
            write = await extract(flush)
            ctx.llm_budget.spend(flush.tenant_id, write.costs)
        metrics.extract_mode.labels(write.mode).inc()
        for cost in write.costs:
            metrics.count_llm(cost.stage, cost.model, cost.calls, cost.prompt_tokens, cost.completion_tokens)
        return StageResult([Out(out_topic, write.key, write)])

    def slot_of(record: Record) -> Slot:
        # A conversation's flushes (and a forget behind them) in order; conversations side by side.
        # Imported history has a slot of its own: a live flush never waits for a free one behind it.
        kind = "bulk" if imported_flush(record.value) else "llm"
        return Slot(conversation_lane(record.key, record.partition), kind)

    if extractor.mode == "llm":
        slots = {"llm": s.in_flight(STAGE), "bulk": 1}
        ctx.agent(STAGE, TOPICS.input, handler, slots=slots, slot_of=slot_of)
    else:  # bound by the CPU: one at a time
        ctx.agent(STAGE, TOPICS.input, handler)
    init_series(metrics.extract_mode, get_args(ExtractionMode))
