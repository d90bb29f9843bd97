"""The worker's context answers every call of the StageContext the stages register with, through
the collaborators it composes (no Kafka: a stand-in app)."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.streams.runtime.context import WorkerContext
from memstream.streams.stages.api import StageContext
from memstream.tracing import Tracing


@pytest.fixture
def ctx() -> WorkerContext:
    tables: list[str] = []
    app = SimpleNamespace(Table=lambda name, **_: tables.append(name) or name)
    services = SimpleNamespace(metrics=Metrics(), tracing=Tracing(enabled=False))
    return WorkerContext(app, Settings(), services, commits=None, fence=None)  # type: ignore[arg-type]


def test_every_call_of_the_stage_context_is_answered_with_its_signature(ctx):
    calls = [name for name, member in vars(StageContext).items() if inspect.isfunction(member) and name[0] != "_"]
    assert {"agent", "send", "produce", "save_state", "already_applied", "table", "idle_timer"} <= set(calls)
    for name in calls:
        promised = inspect.signature(getattr(StageContext, name))
        answered = inspect.signature(getattr(ctx, name))
        assert list(answered.parameters) == list(promised.parameters)[1:], name  # all but self
    # the collaborators work with the worker's own app, settings and metrics
    assert ctx.output.app is ctx.tables.app is ctx.app and ctx.handling.s is ctx.s
    assert ctx.output.metrics is ctx.handling.metrics is ctx.tables.metrics is ctx.metrics


def test_a_table_the_topology_does_not_give_the_stage_is_refused(ctx):
    assert ctx.table("stm", "stm") == "stm"
    with pytest.raises(ValueError, match="does not give it"):
        ctx.table("query", "stm")


def test_every_agent_and_slot_has_a_thread_to_wait_in_besides_the_spare_ones():
    import asyncio

    from memstream.streams.runtime import context
    from memstream.streams.stages.api import Slot

    runs = []
    app = SimpleNamespace(Table=None, topic=lambda *a, **k: a[0], agent=lambda *a, **k: runs.append)
    commits = SimpleNamespace(subscribe=lambda *a: None)
    services = SimpleNamespace(metrics=Metrics(), tracing=Tracing(enabled=False))
    ctx = WorkerContext(app, Settings(), services, commits=commits, fence=None)  # type: ignore[arg-type]

    async def handler(record):
        return None

    ctx.agent("compress", "turns", handler)
    ctx.agent("query", "queries", handler)
    ctx.agent("extract", "stm.flush", handler, slots={"llm": 3, "bulk": 1}, slot_of=lambda r: Slot("c", "llm"))
    assert ctx.threads == 1 + 1 + 4

    async def pool_size() -> int:
        ctx._size_thread_pool()
        return asyncio.get_running_loop()._default_executor._max_workers  # type: ignore[attr-defined]

    # a question's engine never waits for a thread behind the other agents' embeddings or store writes
    assert asyncio.run(pool_size()) == 6 + context.DEFAULT_THREADS
