"""query: plan, retrieve and answer each query, and answer each read of what memory holds; the reply
goes to the topic the request names."""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import datetime, timezone
from typing import Any

import orjson

from memstream.metrics import trace_exemplar
from memstream.processors.operations.read import ReadEngine, answer_read, failed_read
from memstream.processors.query.engine import QueryEngine, expired_reply
from memstream.schemas import Query, ReadRequest, Reply, SchemaError
from memstream.schemas.keys import KeyMismatch, check_key
from memstream.schemas.query import TOPIC_PATTERN
from memstream.schemas.signature import SignatureRefused
from memstream.schemas.topics import check_reply_topic, message_kind, reply_topic_problem
from memstream.topology import TOPOLOGY
from memstream.tracing import SpanKind

from .api import Out, Record, Slot, StageContext, StageResult

log = logging.getLogger(__name__)

STAGE = "query"
TOPICS = TOPOLOGY[STAGE]  # its topics and table: memstream/topology.py


def register(ctx: StageContext) -> None:
    services, metrics = ctx.services, ctx.metrics
    engine = QueryEngine(
        services.store,
        services.embedder,
        services.llm_for("answer"),
        services.query_options,
        planner_llm=services.llm_for("plan"),
        research_llm=services.llm_for("research"),
        steps=services.tracing.steps("memstream.query"),
    )

    reader = ReadEngine(services.store)

    async def on_read(record: Record) -> StageResult:
        request = ReadRequest.from_bytes(record.value)  # a malformed one is dead-lettered
        check_reply_topic(ctx.s.topic_prefix, request.reply_topic)  # dead-lettered, answered nowhere
        try:
            check_key(record.key, request)
            ctx.check_signature(record)
        except (KeyMismatch, SignatureRefused) as exc:  # dead-lettered too, and the asker hears why at once
            failed = failed_read(request, str(exc))
            await (await ctx.send(request.reply_topic, request.correlation_id.encode(), failed.to_bytes()))
            raise
        try:
            reply = await asyncio.to_thread(answer_read, reader, request)
        except Exception as exc:  # the asker gets a clear error, never silence
            log.exception("read %s failed", request.correlation_id)
            reply = failed_read(request, f"{type(exc).__name__}: {exc}")
        metrics.reads.labels(request.read, "ok" if reply.ok else "error").inc()
        return StageResult([Out(request.reply_topic, request.correlation_id, reply)])

    async def handler(record: Record) -> StageResult:
        if message_kind(record.value) == "read":
            return await on_read(record)
        try:
            query = Query.from_bytes(record.value)
            check_reply_topic(ctx.s.topic_prefix, query.reply_topic)
            check_key(record.key, query)
            ctx.check_signature(record)
        except SchemaError as exc:
            await reply_invalid(ctx, record.value, exc)
            raise  # and dead-letter it
        now = datetime.now(timezone.utc)
        if query.deadline is not None and now >= query.deadline:
            reply = expired_reply(query, now)
            observe_query(metrics, reply)
            return StageResult([Out(query.reply_topic, query.correlation_id, reply)])
        try:
            reply = await asyncio.to_thread(engine.run, query)
        except Exception as exc:  # the asker gets a clear error, never silence
            log.exception("query %s failed", query.correlation_id)
            reply = Reply(
                tenant_id=query.tenant_id,
                conversation_id=query.conversation_id,
                correlation_id=query.correlation_id,
                ok=False,
                error=f"{type(exc).__name__}: {exc}",
                replied_at=datetime.now(timezone.utc),
            )
        for cost in reply.costs:
            metrics.count_llm(cost.stage, cost.model, cost.calls, cost.prompt_tokens, cost.completion_tokens)
        observe_query(metrics, reply)
        with services.tracing.span(
            "memstream.reply",
            kind=SpanKind.PRODUCER,
            attributes={"memstream.ok": reply.ok, "memstream.evidence": len(reply.evidence)},
        ):  # the reply carries this span's context: the asker's trace ends here
            await ctx.produce(STAGE, [Out(query.reply_topic, query.correlation_id, reply)])
        return StageResult()

    if engine.llm is None:  # no LLM answers: bound by the CPU, one at a time
        ctx.agent(STAGE, TOPICS.input, handler)
    else:
        in_flight = ctx.s.in_flight(STAGE)
        ctx.agent(STAGE, TOPICS.input, handler, slots={"llm": in_flight, "evidence": in_flight}, slot_of=query_slot)


def query_slot(record: Record) -> Slot:
    """Questions need no order among themselves (each reply names its question); an LLM-answered
    one waits for an LLM slot, an evidence-only one (or a read) for one of its own, so it is never
    held behind LLM answers."""
    lane = (record.partition, record.offset)
    if message_kind(record.value) == "read":
        return Slot(lane, "evidence")
    try:
        answer = orjson.loads(record.value).get("answer", True)
    except (orjson.JSONDecodeError, AttributeError):
        answer = False  # dead-lettered at once by the handler
    return Slot(lane, "llm" if answer is not False else "evidence")


async def reply_invalid(ctx: StageContext, raw: bytes, exc: SchemaError) -> None:
    """A malformed query that names its correlation id and reply topic gets an error reply, so its
    client fails at once instead of timing out."""
    try:
        data = orjson.loads(raw)
        reply = Reply(
            tenant_id=data["tenant_id"],
            conversation_id=data["conversation_id"],
            correlation_id=data["correlation_id"],
            ok=False,
            error=f"invalid query: {exc}",
            replied_at=datetime.now(timezone.utc),
        )
        topic = data["reply_topic"]
        if not isinstance(topic, str) or not re.fullmatch(TOPIC_PATTERN, topic):
            return
        if reply_topic_problem(ctx.s.topic_prefix, topic):
            return
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return
    await (await ctx.send(topic, reply.correlation_id.encode(), reply.to_bytes()))


def observe_query(metrics: Any, reply: Reply) -> None:  # Metrics
    """A reply's profile, outcome, latency per step, evidence and context size (bounded labels)."""
    profile = reply.access_profile or "none"
    metrics.queries.labels(profile, "ok" if reply.ok else "error").inc()
    for key, ms in reply.latency_ms.items():  # plan_ms, embed_ms, hybrid_ms, ..., total_ms
        step = key.removesuffix("_ms")
        if step == "total":
            metrics.query_latency.labels(profile).observe(ms / 1000.0, trace_exemplar())
        else:
            metrics.query_step_latency.labels(step).observe(ms / 1000.0)
    if reply.ok:
        metrics.query_evidence.labels(profile).observe(len(reply.evidence))
        metrics.query_context_tokens.labels(profile).observe(reply.context_tokens)
