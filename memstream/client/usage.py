"""A tenant's LLM spend in the current budget window, over every worker (what ``llm.usage`` holds),
with its budget when this process is configured with the budgets: what the inspector shows."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from memstream.config import Settings
from memstream.processors.operations.quotas import EVERY_TENANT, window_start
from memstream.schemas import LlmUsage, SchemaError
from memstream.schemas.topics import Topic
from memstream.streams.topic_reading import read_messages


async def tenant_llm_usage(settings: Settings, tenant_id: str, *, timeout_s: float = 10.0) -> dict[str, Any]:
    """Calls, tokens and LLM-free fallbacks (by stage) of ``tenant_id`` in the current window, and
    its budget (None: none configured here)."""
    window_s = settings.llm_budget_window_s
    current = window_start(time.time(), window_s)
    latest: dict[str, LlmUsage] = {}  # worker -> its running totals (a key's records keep their order)
    for _key, value in await read_messages(settings, settings.topic(Topic.LLM_USAGE), timeout_s=timeout_s):
        try:
            usage = LlmUsage.from_bytes(value)
        except SchemaError:
            continue
        if usage.tenant_id == tenant_id and int(usage.window_start.timestamp()) == current:
            latest[usage.worker] = usage
    fallbacks: dict[str, int] = {}
    for usage in latest.values():
        for stage, n in usage.fallbacks.items():
            fallbacks[stage] = fallbacks.get(stage, 0) + n
    budget = settings.llm_tenant_budgets.get(tenant_id) or settings.llm_tenant_budgets.get(EVERY_TENANT)
    return {
        "tenant_id": tenant_id,
        "window_start": datetime.fromtimestamp(current, timezone.utc).isoformat(),
        "window_s": window_s,
        "calls": sum(u.calls for u in latest.values()),
        "tokens": sum(u.tokens for u in latest.values()),
        "fallbacks": fallbacks,
        "workers": len(latest),
        "budget": budget.model_dump() if budget else None,
    }
