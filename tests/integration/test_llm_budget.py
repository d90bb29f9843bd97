"""A tenant's LLM budget (issue 47), through the real broker and the real local LLM server: once a
tenant has spent its calls, its flushes are extracted without the LLM (every flush still written,
counted), another tenant's are not touched, and a worker started later knows what the earlier one
spent (the spend travels on llm.usage)."""

from __future__ import annotations

import json
import time
from collections import defaultdict

import pytest

from memstream.schemas import LlmUsage, MemoryWrite, StmFlush
from memstream.schemas.topics import Topic, decode_cards_message

from .conftest import first_sessions, metric_total

pytestmark = pytest.mark.integration

BUDGET_ENV = {
    "MEMSTREAM_LLM_TENANT_BUDGETS": json.dumps({"poor": {"calls": 1}}),
    # One window for the whole test, whenever it runs (windows are aligned to the epoch).
    "MEMSTREAM_LLM_BUDGET_WINDOW_S": str(10**9),
    "MEMSTREAM_EXTRACT_IN_FLIGHT": "1",  # one flush at a time: the budget is seen before each call
    "MEMSTREAM_STM_TOKENS": "96",
    "MEMSTREAM_SEGMENT_WINDOW_TURNS": "4",
    "MEMSTREAM_SEGMENT_CARRY_TURNS": "1",
    "MEMSTREAM_EXTRACT_MAX_CARDS": "1",  # short calls: a few seconds each on the local model
    "MEMSTREAM_EXTRACT_MAX_TOKENS": "192",
    "MEMSTREAM_STM_IDLE_S": "600",
    "MEMSTREAM_SLEEP_IDLE_S": "3600",
}


def writes_by_tenant(pipe) -> dict[str, list[MemoryWrite]]:  # Pipeline
    out: dict[str, list[MemoryWrite]] = defaultdict(list)
    for _key, value in pipe.read_topic(Topic.CARDS):
        message = decode_cards_message(value)
        if isinstance(message, MemoryWrite):
            out[message.tenant_id].append(message)
    return out


def flushes_by_tenant(pipe) -> dict[str, set[str]]:  # Pipeline
    out: dict[str, set[str]] = defaultdict(set)
    for _key, value in pipe.read_topic(Topic.STM_FLUSH):
        if b'"stm_flush"' in value:
            flush = StmFlush.from_bytes(value)
            out[flush.tenant_id].add(flush.flush_id)
    return out


def latest_usage(pipe, tenant: str, *, until, timeout_s: float = 30.0) -> LlmUsage:  # Pipeline
    """``tenant``'s newest record on llm.usage once ``until`` holds for it (or the newest at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while True:
        spent = [u for _, v in pipe.read_topic(Topic.LLM_USAGE) if (u := LlmUsage.from_bytes(v)).tenant_id == tenant]
        if spent and (until(spent[-1]) or time.monotonic() > deadline):
            return spent[-1]
        assert time.monotonic() < deadline, f"nothing of {tenant} on llm.usage"
        time.sleep(0.5)


def test_over_its_budget_a_tenant_gets_llm_free_memories_and_a_later_worker_knows_it(make_pipeline, local_llm):
    _, poor_turns, _ = first_sessions(1, tenant="poor")
    _, rich_turns, _ = first_sessions(1, tenant="rich")
    _, later_turns, _ = first_sessions(2, tenant="poor")
    pipe = make_pipeline(**(local_llm | BUDGET_ENV))
    worker = pipe.start_worker("first")
    pipe.produce(poor_turns[:12])
    pipe.produce(rich_turns[:6])
    pipe.drain(timeout_s=900)
    fallbacks = metric_total(worker.metrics_port, "memstream_llm_budget_fallbacks_total", stage="extract")
    # The worker publishes its totals on a 1 s timer, not with each flush: wait for the drained work's.
    poor = latest_usage(pipe, "poor", until=lambda u: u.fallbacks == {"extract": fallbacks})
    pipe.stop_workers()

    writes, flushes = writes_by_tenant(pipe), flushes_by_tenant(pipe)
    for tenant in ("poor", "rich"):  # every flush written, whatever its tenant's budget
        assert {w.flush_id for w in writes[tenant]} == flushes[tenant], tenant
    # A write with costs is one the LLM was asked for (answered, or failed and fell back); one without
    # costs in the fallback mode was made without asking: the budget was spent.
    asked = [w for w in writes["poor"] if w.costs]
    without = [w for w in writes["poor"] if not w.costs and w.mode == "extractive_fallback"]
    assert len(asked) == 1 and len(without) >= 2 and len(asked) + len(without) == len(writes["poor"])
    assert all(w.cards or w.scenes for w in without)  # memories made, without the LLM
    assert all(w.costs for w in writes["rich"])  # the poor tenant's budget is not the rich one's
    assert fallbacks == len(without)
    assert poor.calls >= 1 and poor.fallbacks == {"extract": fallbacks}

    # A new worker (another name in llm.usage) reads what the first spent: no LLM for poor at all.
    pipe.start_worker("second")
    before = len(writes["poor"])
    pipe.produce(later_turns[12:20])
    pipe.drain(timeout_s=900)
    pipe.stop_workers()
    later = writes_by_tenant(pipe)["poor"][before:]
    assert later and all(not w.costs and w.mode == "extractive_fallback" for w in later)
