"""The tenants' LLM budgets as this worker sees them (``MEMSTREAM_LLM_TENANT_BUDGETS``): its own spend,
published every second on ``llm.usage``, plus every other worker's, read back from there. A stage asks
``over`` before an LLM call and tells ``spend`` after; a tenant over budget gets the LLM-free path."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import time
import uuid
from datetime import datetime, timezone
from typing import Iterable

import faust
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.processors.operations.quotas import LlmBudget, Usage, UsageLedger
from memstream.schemas import LlmUsage, SchemaError, StageCost
from memstream.schemas.topics import Topic

from ..kafka_options import client_options
from .output import Output

log = logging.getLogger(__name__)

PUBLISH_S = 1.0  # how stale another worker's spend may be, at most (plus the broker's round trip)


def worker_name() -> str:
    """This worker process's name in ``llm.usage`` keys: host, pid and a random part (a restarted
    worker's spend so far in the window stays counted under its old name)."""
    host = re.sub(r"[^A-Za-z0-9_.\-]", "-", socket.gethostname())[:64] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class LlmBudgets:
    def __init__(self, app: faust.App, s: Settings, output: Output, metrics: Metrics):
        self.s, self.output, self.metrics = s, output, metrics
        budgets = {tenant: LlmBudget(b.calls, b.tokens) for tenant, b in s.llm_tenant_budgets.items()}
        self.enabled = bool(budgets)
        self.ledger = UsageLedger(budgets, s.llm_budget_window_s, worker_name())
        self.topic = s.topic(Topic.LLM_USAGE)
        if self.enabled:
            app.timer(interval=PUBLISH_S, name="memstream.llm_budget.publish")(self.publish)
            app.task(self.follow)

    def over(self, tenant: str) -> bool:
        """Whether ``tenant`` has spent its budget of the current window (over every worker)."""
        return self.enabled and self.ledger.over_budget(tenant, time.time())

    def spend(self, tenant: str, costs: Iterable[StageCost]) -> None:
        if self.enabled:
            calls = tokens = 0
            for cost in costs:
                calls += cost.calls
                tokens += cost.prompt_tokens + cost.completion_tokens
            self.ledger.spend(tenant, time.time(), calls, tokens)

    def fell_back(self, tenant: str, stage: str) -> None:
        """A piece of ``stage``'s work for ``tenant`` was done without the LLM: over budget."""
        self.metrics.llm_budget_fallbacks.labels(stage).inc()
        if self.enabled:
            self.ledger.fell_back(tenant, time.time(), stage)

    async def publish(self) -> None:
        """This worker's changed totals onto ``llm.usage``; windows gone by are dropped."""
        now = time.time()
        sent = []
        for (tenant, window, worker), usage in self.ledger.unpublished():
            record = LlmUsage(
                tenant_id=tenant,
                window_start=datetime.fromtimestamp(window, timezone.utc),  # type: ignore[arg-type]
                window_s=self.ledger.window_s,
                worker=worker,
                calls=usage.calls,
                tokens=usage.tokens,
                fallbacks=dict(usage.fallbacks),
                updated_at=datetime.now(timezone.utc),  # type: ignore[arg-type]
            )
            sent.append(await self.output.send(self.topic, record.key.encode(), record.to_bytes()))
        for delivery in sent:
            try:
                await delivery
            except KafkaError as exc:  # the totals are sent again with the next change
                log.warning("LLM usage not published: %s", exc)
        self.ledger.forget_before(now)

    async def follow(self) -> None:
        """Every worker's published totals, from the start of the topic (compacted; old windows
        expire), for as long as the worker runs; a broker away is waited for."""
        while True:
            consumer = AIOKafkaConsumer(
                self.topic,
                **client_options(self.s),
                group_id=None,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            try:
                await consumer.start()
                while True:
                    batches = await consumer.getmany(timeout_ms=1000)
                    for records in batches.values():
                        for record in records:
                            self.take(record.value)
            except KafkaError as exc:
                log.warning("reading llm.usage: %s; again in 5 s", exc)
            finally:
                await consumer.stop()
            await asyncio.sleep(5.0)

    def take(self, raw: bytes | None) -> None:
        if not raw:
            return
        try:
            usage = LlmUsage.from_bytes(raw)
        except SchemaError as exc:
            log.warning("skipping an unreadable llm.usage record: %s", exc)
            return
        window = int(usage.window_start.timestamp())
        spent = Usage(usage.calls, usage.tokens, dict(usage.fallbacks))
        self.ledger.merge(usage.tenant_id, window, usage.worker, spent)
