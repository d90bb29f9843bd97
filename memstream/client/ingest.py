"""Chat-platform events onto the broker, as ``memstream.platforms`` mapped them: turns, the forgets of
edits and deletions, and dead letters for the events that could not be mapped."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from memstream.schemas import DeadLetter, Turn
from memstream.schemas.topics import Topic

from .outcomes import IngestOutcome

if TYPE_CHECKING:
    from memstream.platforms import Mapped

    from .async_client import AsyncMemoryClient


async def put_on_broker(client: AsyncMemoryClient, mapped: Mapped, source: str, bulk: bool = False) -> IngestOutcome:
    """What ``client.ingest(mapped, source=source, bulk=bulk)`` does: the turns first (``bulk``: as a
    history import), then the forgets they carry, then the dead letters. A forget goes live either
    way: a turn it covers that is still waiting in the import is dropped when it is let in."""
    from memstream.platforms import TurnRemoval

    outcome = IngestOutcome(skipped=dict(mapped.skipped))
    turns = [item for item in mapped.items if isinstance(item, Turn)]
    outcome.turns = await (client.import_history(turns) if bulk else client.remember(turns))
    for item in mapped.items:
        if isinstance(item, TurnRemoval):
            done = await client.forget(
                tenant_id=item.tenant_id,
                conversation_id=item.conversation_id,
                turn_ids=item.turn_ids,
                before=item.before,
                wait=False,
            )
            outcome.forgets.append(done.forget_id)
    letters = [
        DeadLetter(
            stage="ingest",
            reason=f"event {r.index}: {r.reason}",
            error_type="SchemaError",
            topic=source,
            tenant_id=r.tenant_id,
            original_b64=DeadLetter.encode(r.raw),
            original_size=len(r.raw),
            failed_at=datetime.now(timezone.utc),  # type: ignore[arg-type]
        )
        for r in mapped.rejected
    ]
    dlq = client.settings.topic(Topic.DLQ)
    outcome.dead_letters = await client.kafka.publish(dlq, [(None, letter.to_bytes(), None) for letter in letters])
    return outcome
