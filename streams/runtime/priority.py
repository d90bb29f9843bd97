"""Questions first, in every stage: background work (a history import: the bulk lane's turns and
everything the stages make of them, marked on the wire by ``schemas/background.py``) starts its next
handling only once no question of this worker is fetched and unanswered.

The bulk lane's gate (``bulk.py``) lets imported turns in only while live work is quiet, but a
question that arrives later finds the few let in still going through segment, stm, extract and
index on the same event loop and the same two cores: each takes its turn on the loop before the
question does. Holding them back costs the import the time the questions take (docs/benchmarks.md,
"Many tenants"). Work already under way is not interrupted; a stream of questions delays background work
by at most ``MAX_WAIT_S`` per handling, it never starves it (a live message behind it on its
partition waits too). The priority is per worker, like the gate's: it sees the questions of the
``queries`` partitions this worker owns."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from dataclasses import dataclass, field

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.schemas.topics import Topic

from .offsets import SafeCommits

POLL_S = 0.005  # a question takes tens of milliseconds: waiters look again well within one
MAX_WAIT_S = 1.0

# Whether the handling under way is background work: its outputs then carry the header
# (``Output.send``), so the next stage knows too. Set per handling (``Handling.run``).
BACKGROUND: ContextVar[bool] = ContextVar("memstream_background", default=False)


@dataclass
class QuestionsFirst:
    """Waits, before a background handling, while a question is in this worker (module docstring)."""

    s: Settings
    commits: SafeCommits
    metrics: Metrics
    questions: frozenset[str] = field(init=False)  # full topic names

    def __post_init__(self) -> None:
        self.questions = frozenset({self.s.topic(Topic.QUERIES)})

    async def wait(self) -> None:
        """Mark the handling under way as background work, and return once no question waits or is in
        progress here (or after ``MAX_WAIT_S``)."""
        BACKGROUND.set(True)
        if not self.commits.waiting(self.questions):
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        while self.commits.waiting(self.questions) and loop.time() - started < MAX_WAIT_S:
            await asyncio.sleep(POLL_S)
        self.metrics.background_yield_seconds.observe(loop.time() - started)
