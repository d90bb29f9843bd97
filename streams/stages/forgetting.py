"""What the stages share to honour a forget: scrubbing the entries of a table that live in the
forget's partition, and passing the forget on with what this stage removed added to its counts."""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable

from faust.types import TableT

from memstream.processors.forgetting.forget import ForgetScope
from memstream.schemas import Forget

from .api import Record, StageContext, keys_in_partition


async def scrub_table(
    ctx: StageContext,
    table: TableT,
    partition: int,
    scope: ForgetScope,
    scrub: Callable[[Any], tuple[Any, int] | Awaitable[tuple[Any, int]]],
    *,
    source: Record | None = None,
) -> int:
    """``scrub(value) -> (new value, items removed)`` (or an awaitable of it) on every entry of ``table`` in
    ``partition`` whose conversation the scope covers; a changed entry is written back (its
    changelog record rewritten, so a restart recovers the scrubbed state). Returns items removed.
    ``source``: the forget, where the table's entries are stamped with their input (replay.py): every
    message of the key before the forget is reflected in the scrubbed entry."""
    removed = 0
    for key in keys_in_partition(table, partition, ctx.s.topic_partitions):
        tenant, conversation = key.split("/", 1)
        value = table.get(key)
        if not value or not scope.covers_conversation(tenant, conversation):
            continue
        result = scrub(value)
        new, n = await result if inspect.isawaitable(result) else result
        if n:
            removed += n
            await ctx.save_state(table, key, new, source=source)
    return removed


def onward(forget: Forget, counts: dict[str, int], **update: Any) -> Forget:
    """The forget to pass on, with ``counts`` added to what the stages before removed."""
    merged = dict(forget.counts)
    for where, n in counts.items():
        merged[where] = merged.get(where, 0) + n
    return forget.model_copy(update={"counts": merged, **update})
