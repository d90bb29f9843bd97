"""The runtime's side of a stage: :class:`WorkerContext` implements the ``StageContext`` the stages
register with (streams/stages/api.py): agents over faust streams, commits only of finished work, fencing, lanes
of work in flight. It composes what a message goes through (``handling.py``: spans, retries, dead letters),
what the worker publishes (``output.py``) and the stages' tables (``tables.py``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Callable, Mapping, Sequence

import faust
from faust.types import EventT

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.schemas.signature import check_signature
from memstream.schemas.topics import Topic
from memstream.topology import TOPOLOGY

from ..services import Services
from ..stages.api import BARRIER, Handler, Record, Slot
from .budget import LlmBudgets
from .bulk import ImportCounts, LiveFirst
from .fence import Fenced, FreezeFence
from .handling import Handling, record_of
from .lanes import Lanes
from .offsets import SafeCommits
from .output import Output
from .priority import QuestionsFirst
from .tables import Tables

log = logging.getLogger(__name__)

INGEST_STAGES = frozenset({"compress", "segment", "stm", "extract", "index"})
BULK_STAGE = next(stage for stage, topics in TOPOLOGY.items() if Topic.BULK_TURNS in topics.inputs)
DEFAULT_THREADS = 8  # beside the slots' threads: store reads, embedding, table scans off the loop


class WorkerContext:
    """The app, settings and services a stage registers itself with (it implements the stages'
    :class:`StageContext`); it holds what the stages of one worker share (commit tracking, how busy
    ingestion is)."""

    def __init__(
        self, app: faust.App, settings: Settings, services: Services, commits: SafeCommits, fence: FreezeFence
    ):
        self.app = app
        self.s = settings
        self.services = services
        self.metrics: Metrics = services.metrics
        self.commits = commits  # what may commit (offsets every stage reading them finished), and order
        self.fence = fence  # no writes from a worker that was frozen until its group has rebalanced
        self.in_flight = 0  # events inside a handler now
        self.handled = 0  # events handled since start
        # ... per stage (its agents together: "consolidate.run" counts as "consolidate"), for the watchdog
        self.stage_in_flight: Counter[str] = Counter()
        self.stage_handled: Counter[str] = Counter()
        self.ingesting = 0  # ingest-stage events inside a handler now
        self.last_ingest = 0.0  # time.monotonic() when an ingest stage last finished a message
        self.lanes: dict[str, Lanes] = {}  # stage -> its work in progress, where it runs many at once
        self.threads = 0  # threads the agents may wait in at once: one each, a slot each where many run
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self.write_secrets = settings.write_secrets  # empty: records are not signed (single tenant)
        self.output = Output(app, settings, services.tracing, self.metrics, fence)
        self.questions_first = QuestionsFirst(settings, commits, self.metrics)
        self.in_background = self.questions_first.wait
        self.handling = Handling(settings, services.tracing, self.metrics, self.output, self.questions_first)
        self.llm_budget = LlmBudgets(app, settings, self.output, self.metrics)
        self.tables = Tables(app, settings, self.metrics, fence, self.output)
        self.bulk_gate = LiveFirst(settings, commits, self.metrics)
        self.bulk_waiting = False  # an imported turn waits at the gate now
        self.imported = ImportCounts(settings, self.output, self.metrics).count
        # The rest of StageContext, answered by the collaborators.
        self.send = self.output.send
        self.produce = self.output.produce
        self.table = self.tables.table
        self.save_state = self.tables.save_state
        self.already_applied = self.tables.already_applied
        self.idle_timer = self.tables.idle_timer
        self.evict_timer = self.tables.evict_timer
        self.delete_state = self.tables.delete_state

    def agent(
        self,
        stage: str,
        topic_name: str,
        handler: Handler,
        *,
        slots: Mapping[str, int] | None = None,
        slot_of: Callable[[Record], Slot] | None = None,
    ) -> None:
        """``handler`` runs for each message of ``topic_name`` (a logical name) as ``stage``: one at a
        time, or with ``slots`` (class of work -> how many at once) as many at once as ``slot_of``
        each message's slot allows (``lanes``: one conversation's messages stay in order)."""
        if topic_name not in TOPOLOGY[stage.split(".")[0]].inputs:  # deployments drain by the topology
            raise ValueError(f"stage {stage} reads {topic_name}, which memstream.topology does not list")
        source = self.app.topic(
            self.s.topic(topic_name),
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=self.s.topic_partitions,
        )
        self.commits.subscribe(stage, self.s.topic(topic_name))
        self.metrics.init_stage(stage)
        if slots is None or slot_of is None or sum(slots.values()) <= 1:
            slots = slot_of = None  # one message at a time
            self.threads += 1
        else:
            self.threads += sum(slots.values())

        async def run(stream: faust.StreamT) -> None:
            # faust's acks do not decide commits (it acks events no handler finished): ``handle``
            # tells the commit tracker what finished.
            self._size_thread_pool()
            if slots is None or slot_of is None:
                async for event in stream.events():
                    if await self.admit(stage, event):
                        await self.handle(stage, event, handler)
                return
            lanes = self.lanes[stage] = Lanes(slots)
            async for event in stream.events():
                if not await self.admit(stage, event):
                    continue
                record = record_of(event)
                try:
                    slot = slot_of(record)
                except Exception:  # unreadable: it runs alone, and its handler dead-letters it
                    slot = Slot(BARRIER, next(iter(slots)))
                await lanes.submit(
                    slot, partial(self.handle, stage, event, handler), partition=(event.message.topic, record.partition)
                )
                self._show_queued(stage)

        run.__name__ = f"{stage}_agent"
        self.app.agent(source, name=f"memstream.{stage}")(run)

    def _size_thread_pool(self) -> None:
        """Handlers wait in threads (``asyncio.to_thread``: the LLM, embeddings, the store). The loop's
        default pool (6 threads on two cores) would cap the LLM calls in flight, and make a stage wait
        for a thread behind other stages' work (a question behind an import's embeddings): it gets a
        thread per agent and per slot, and ``DEFAULT_THREADS`` besides."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_size < self.threads:
            self._pool_size = self.threads + DEFAULT_THREADS
            self._pool = ThreadPoolExecutor(max_workers=self._pool_size, thread_name_prefix="memstream")
            loop.set_default_executor(self._pool)

    def _show_queued(self, stage: str) -> None:
        if stage in self.lanes:
            self.metrics.stage_queued.labels(stage).set(self.lanes[stage].waiting)

    async def admit(self, stage: str, event: EventT) -> bool:
        """Whether ``stage`` handles this message now (not a redelivery, not out of order); if so,
        it is taken: the next message the stage takes on its partition is the one after it."""
        msg = event.message
        skip = await self.commits.skip_reason(stage, msg.topic, msg.partition, msg.offset)
        if skip:  # finished or in progress before, or handed over out of order (it comes again, in order)
            self.metrics.skipped.labels(stage, skip).inc()
            return False
        self.commits.took(stage, msg.topic, msg.partition, msg.offset)
        return True

    async def settle(self, revoked: Sequence[tuple[str, int]], timeout_s: float) -> None:
        """Before partitions go to another worker: work of theirs not started is dropped (the next
        owner handles those messages), work under way is given ``timeout_s`` to finish, so that it
        commits and is not redone."""
        for lanes in self.lanes.values():
            lanes.cancel_waiting(revoked)
        for lanes in self.lanes.values():
            await lanes.drain(revoked, timeout_s)

    async def handle(self, stage: str, event: EventT, handler: Handler) -> None:
        """Handle a message ``admit`` took."""
        msg = event.message
        while self.fence.suspect():  # frozen lately: wait for the rebalance that tells who owns what
            await asyncio.sleep(0.5)
        ingest = stage in INGEST_STAGES
        base = stage.split(".", 1)[0]
        self.in_flight += 1
        self.stage_in_flight[base] += 1
        self.ingesting += ingest
        self.metrics.stage_in_flight.labels(stage).inc()
        self._show_queued(stage)
        finished = False
        try:
            await self.handling.run(stage, event, handler)
            # Its effect (outputs, store writes, state) is durable or dead-lettered: it may commit.
            self.commits.finished(stage, msg.topic, msg.partition, msg.offset)
            finished = True
        except Fenced as exc:
            # Not finished: the message comes again, to whoever owns the partition after the rebalance.
            self.metrics.skipped.labels(stage, "fenced").inc()
            log.warning("%s left %s[%s]@%s unfinished: %s", stage, msg.topic, msg.partition, msg.offset, exc)
        finally:
            if not finished:
                self.commits.left_unfinished(stage, msg.topic, msg.partition, msg.offset)
            self.in_flight -= 1
            self.stage_in_flight[base] -= 1
            self.metrics.stage_in_flight.labels(stage).dec()
            self.handled += 1
            self.stage_handled[base] += 1
            if ingest:
                self.ingesting -= 1
                self.last_ingest = time.monotonic()

    def check_signature(self, record: Record) -> None:
        """Raises ``SignatureRefused`` unless ``record`` is signed by its key's tenant (when secrets are set)."""
        if self.write_secrets:
            check_signature(self.write_secrets, record.key, record.value, record.signature)

    async def live_first(self, record: Record) -> None:
        """Return once the imported turn ``record`` may enter the pipeline (``bulk.py``). While it
        waits it does not make its stage busy: the watchdog still looks after the stage's live
        partitions (a stranded live turn would otherwise hold the import, and the import it)."""
        topic = self.s.topic(Topic.BULK_TURNS)

        def still_mine() -> bool:
            return any(tp.topic == topic and tp.partition == record.partition for tp in self.app.consumer.assignment())

        self.stage_in_flight[BULK_STAGE] -= 1
        self.bulk_waiting = True  # its lag is the gate's doing, not a stranded partition
        try:
            await self.bulk_gate.wait(still_mine)
        finally:
            self.stage_in_flight[BULK_STAGE] += 1
            self.bulk_waiting = False

    def busy_ingesting(self) -> bool:
        """An ingest stage of this worker is handling a message, or finished one within the last second."""
        return self.ingesting > 0 or time.monotonic() - self.last_ingest < 1.0
