"""History imports from the client side: the turns onto ``bulk.turns`` in the order and with the
positions ``processors.write.history`` gives them, what each import sent onto ``import.progress``,
and a tenant's progress read back from there (what workers let in against what imports sent)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Sequence

from memstream.config import Settings
from memstream.processors.ids import stable_id
from memstream.processors.write.history import number_history
from memstream.schemas import ImportProgress, SchemaError, Turn
from memstream.schemas.topics import Topic
from memstream.streams.topic_reading import read_messages

from .errors import MemstreamError

if TYPE_CHECKING:
    from .async_client import AsyncMemoryClient


def turn_place(turn: Turn) -> str:
    """What ``after`` names: ``<conversation_id>/<turn_id>``."""
    return f"{turn.conversation_id}/{turn.turn_id}"


async def send_history(
    client: AsyncMemoryClient, turns: Sequence[Turn], after: str | None, on_sent: Callable[[Turn], None] | None
) -> int:
    """Number the import, publish what it holds per tenant (an import sent again, whole or from
    ``after``, publishes the same: its id is its turns'), then send the turns after ``after``."""
    numbered = number_history(turns)
    places = [turn_place(t) for t in numbered]
    if after is not None:
        if after not in places:
            raise MemstreamError(f"after={after!r} names no turn of this import (<conversation_id>/<turn_id>)")
        numbered = numbered[places.index(after) + 1 :]
    per_tenant: dict[str, list[str]] = defaultdict(list)
    for turn in turns:
        per_tenant[turn.tenant_id].append(turn_place(turn))
    now = datetime.now(timezone.utc)
    progress = [
        ImportProgress(
            tenant_id=tenant,
            counter="import-" + stable_id(tenant, *sorted(held)),  # the same turns, the same import
            role="sent",
            turns=len(held),
            updated_at=now,  # type: ignore[arg-type]
        )
        for tenant, held in per_tenant.items()
    ]
    settings = client.settings
    await client.kafka.publish(
        settings.topic(Topic.IMPORT_PROGRESS), [(p.key.encode(), p.to_bytes(), None) for p in progress]
    )
    topic = settings.topic(Topic.BULK_TURNS)
    return await client.kafka.send_turns(topic, numbered, client.batch_size, on_sent, "memstream.import_history")


async def import_progress(settings: Settings, tenant_id: str, *, timeout_s: float = 10.0) -> dict[str, Any]:
    """``tenant_id``'s history imports so far: turns sent, let into the pipeline (by every worker,
    at most what was sent: a worker that died mid-turn counts that turn again) and remaining."""
    latest: dict[str, ImportProgress] = {}
    for _key, value in await read_messages(settings, settings.topic(Topic.IMPORT_PROGRESS), timeout_s=timeout_s):
        try:
            record = ImportProgress.from_bytes(value)
        except SchemaError:
            continue
        if record.tenant_id == tenant_id:
            latest[record.counter] = record
    sent = sum(r.turns for r in latest.values() if r.role == "sent")
    let_in = min(sent, sum(r.turns for r in latest.values() if r.role == "let_in"))
    return {"tenant_id": tenant_id, "sent": sent, "let_in": let_in, "remaining": sent - let_in}
