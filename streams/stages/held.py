"""What the stages that hold turns in a per-conversation table share (segment's windows, stm's
buffers): how a message reaches the stage's own handling, and how a forget scrubs the table."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterable, TypeVar

from faust.types import TableT

from memstream.processors.forgetting.forget import ForgetScope
from memstream.processors.write.table_entry import TableEntry
from memstream.schemas import CompressedTurn, Forget, TenantScoped

from .api import Handler, Out, Record, StageContext, StageResult
from .forgetting import onward, scrub_table

Held = TypeVar("Held", bound=TableEntry)


def held_turns_handler(
    ctx: StageContext,
    stage: str,
    table: TableT,
    decode: Callable[[bytes], TenantScoped | Forget],
    handle: Callable[[Record, Any, Any], Awaitable[StageResult]],
    on_forget: Callable[[Record, Forget], Awaitable[StageResult]],
) -> Handler:
    """The stage's handler: a forget goes to ``on_forget``; any other message (of those ``decode``
    gives) to ``handle`` with its conversation's entry, unless that entry already reflects it (a
    replay: a tick handled again would let go of other turns)."""

    async def handler(record: Record) -> StageResult:
        message = decode(record.value)
        if isinstance(message, Forget):
            return await on_forget(record, message)
        data = table.get(message.key)
        if ctx.already_applied(stage, data, record):
            return StageResult()
        return await handle(record, message, data)

    return handler


def held_turns_forget(
    ctx: StageContext,
    table: TableT,
    state: type[Held],
    scrub: Callable[[Held, ForgetScope], int],
    counted_as: str,
    out_topic: str,
) -> Callable[[Record, Forget], Awaitable[StageResult]]:
    """The forget handler of a stage that holds turns in ``table``: each entry of the forget's
    partition that its scope covers is read as ``state``, ``scrub``-bed of the covered turns and
    written back. The turns removed are counted in the metrics by where they were and on the forget
    passed on (in its own partition) under ``counted_as``, "<where>:<name>"."""
    where = counted_as.split(":", 1)[0]

    async def on_forget(record: Record, forget: Forget) -> StageResult:
        scope = ForgetScope.of(forget)

        def scrub_entry(data: Any) -> tuple[Any, int]:
            held = state.from_dict(data)
            removed = scrub(held, scope)
            return held.to_dict(), removed

        removed = await scrub_table(ctx, table, record.partition, scope, scrub_entry, source=record)
        ctx.metrics.forgotten.labels(where).inc(removed)
        passed = onward(forget, {counted_as: removed})
        return StageResult([Out(out_topic, forget.key, passed, partition=record.partition)])

    return on_forget


async def background_if_imported(ctx: StageContext, record: Record, turns: Iterable[CompressedTurn]) -> None:
    """A tick lets go of held turns on a timer, outside any imported record's handling: when all it
    lets go of are imported, what it writes is background work too (``StageContext.in_background``)."""
    let_go = list(turns)
    if not record.background and let_go and all(t.imported for t in let_go):
        await ctx.in_background()
