"""The bulk lane: history imports (``bulk.turns``) enter the pipeline only while live work allows.

An import of a million old turns through ``turns`` would sit on the same partitions as every
tenant's live conversation: each live turn and question would wait behind it. Imports go to
``bulk.turns`` instead, read by the compress stage's bulk agent, which takes its next turn only when
this worker has no live turn or question waiting or in progress (``turns``, ``queries``) and fewer
than ``MEMSTREAM_BULK_BACKLOG`` messages unfinished on the topics after it (the imported turns it
let in, and live ones). A live turn or question that arrives finds at most that many ahead of it on
each stage; the extract stage gives imported flushes one LLM slot of their own, never a live slot.
Once admitted, an imported turn is an ordinary turn: segmented, buffered, extracted, indexed and
consolidated like the rest, in its conversation's order (its position comes with it, numbered by the
importer before the conversation's live turns: ``memstream.client.history``).

The priority is per worker: a deployment whose compress stage runs apart from the later stages
admits imports whenever its own ``turns`` and ``queries`` are quiet (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from aiokafka.errors import KafkaError

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.schemas import ImportProgress
from memstream.schemas.topics import Topic

from .budget import worker_name
from .fence import Fenced
from .offsets import SafeCommits
from .output import Output

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often a waiting import looks again: well under a live turn's handling


@dataclass
class LiveFirst:
    """Waits until bulk work may go on (module docstring)."""

    s: Settings
    commits: SafeCommits
    metrics: Metrics
    front: frozenset[str] = field(init=False)  # full names: anything waiting here holds imports back
    bulk: str = field(init=False)

    def __post_init__(self) -> None:
        self.front = frozenset({self.s.topic(Topic.TURNS), self.s.topic(Topic.QUERIES)})
        self.bulk = self.s.topic(Topic.BULK_TURNS)

    async def may_go(self) -> bool:
        unfinished = await self.commits.unfinished()
        if any(n for tp, n in unfinished.items() if tp.topic in self.front):
            return False
        behind = sum(n for tp, n in unfinished.items() if tp.topic != self.bulk and tp.topic not in self.front)
        return behind < self.s.bulk_backlog

    async def wait(self, still_mine: Callable[[], bool]) -> None:
        """Return once an imported turn may enter the pipeline; raises ``Fenced`` (the turn is left
        unfinished, and comes again to the partition's next owner) once ``still_mine()`` says its
        partition went to another worker meanwhile: a rebalance does not wait for a live stream to end."""
        started = asyncio.get_running_loop().time()
        while not await self.may_go():
            if not still_mine():
                raise Fenced("the imported turn's partition went to another worker while it waited")
            await asyncio.sleep(POLL_S)
        self.metrics.bulk_wait_seconds.observe(asyncio.get_running_loop().time() - started)


class ImportCounts:
    """The imported turns this worker let in, per tenant, published on ``import.progress`` (key
    ``<tenant>/worker-<name>``) a second after they changed: with what importers published there, a
    tenant's progress."""

    PUBLISH_S = 1.0

    def __init__(self, s: Settings, output: Output, metrics: Metrics):
        self.output, self.metrics = output, metrics
        self.topic = s.topic(Topic.IMPORT_PROGRESS)
        self.counter = f"worker-{worker_name()}"
        self.let_in: Counter[str] = Counter()
        self.changed: set[str] = set()
        self.publishing: asyncio.Task[None] | None = None

    def count(self, tenant: str) -> None:
        """One imported turn of ``tenant`` went into the pipeline."""
        self.metrics.imported_turns.inc()
        self.let_in[tenant] += 1
        self.changed.add(tenant)
        if self.publishing is None or self.publishing.done():
            self.publishing = asyncio.ensure_future(self._publish_soon())

    async def _publish_soon(self) -> None:
        await asyncio.sleep(self.PUBLISH_S)  # the counts of a second's turns in one record per tenant
        await self.publish()

    async def publish(self) -> None:
        changed, self.changed = self.changed, set()
        sent = []
        for tenant in changed:
            record = ImportProgress(
                tenant_id=tenant,
                counter=self.counter,
                role="let_in",
                turns=self.let_in[tenant],
                updated_at=datetime.now(timezone.utc),  # type: ignore[arg-type]
            )
            sent.append((tenant, await self.output.send(self.topic, record.key.encode(), record.to_bytes())))
        for tenant, delivery in sent:
            try:
                await delivery
            except KafkaError as exc:  # sent with the next change
                self.changed.add(tenant)
                log.warning("import progress not published: %s", exc)
