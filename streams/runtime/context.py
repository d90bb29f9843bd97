"""The runtime's side of a stage: :class:`WorkerContext` implements the ``StageContext`` the stages
register with (streams/stages/api.py): agents over faust streams, commits only of finished work, fencing, lanes
of work in flight, dead letters, tables whose writes are durable before the offset commits."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from functools import partial
from typing import Any, Awaitable, Callable, Mapping, Sequence

import faust
from faust.types import EventT, TableT

from memstream.config import Settings
from memstream.metrics import Metrics, trace_exemplar
from memstream.ports import StoreUnavailable
from memstream.schemas import DeadLetter, Payload, SchemaError
from memstream.schemas.keys import KeyMismatch
from memstream.topology import TOPOLOGY
from memstream.tracing import Span, SpanKind, Tracing

from ..services import Services
from ..stages.api import BARRIER, Handler, Out, Record, Slot
from . import faust_compat, replay
from .fence import Fenced, FreezeFence
from .lanes import Lanes
from .offsets import SafeCommits

log = logging.getLogger(__name__)

INGEST_STAGES = frozenset({"compress", "segment", "stm", "extract", "index"})
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
        self._topics: dict[str, faust.TopicT] = {}
        self.in_flight = 0  # events inside a handler now
        self.handled = 0  # events handled since start
        self.ingesting = 0  # ingest-stage events inside a handler now
        self.last_ingest = 0.0  # time.monotonic() when an ingest stage last finished a message
        self.lanes: dict[str, Lanes] = {}  # stage -> its work in progress, where it runs many at once
        self.threads = 0  # slots of the stages that run many at once: threads they may wait in
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0

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
        else:
            self.threads += sum(slots.values())

        async def run(stream: faust.StreamT) -> None:
            # faust's acks do not decide commits (it acks events no handler finished): ``handle``
            # tells the commit tracker what finished.
            if slots is None or slot_of is None:
                async for event in stream.events():
                    if await self.admit(stage, event):
                        await self.handle(stage, event, handler)
                return
            self._size_thread_pool()
            lanes = self.lanes[stage] = Lanes(slots)
            async for event in stream.events():
                if not await self.admit(stage, event):
                    continue
                record = self.record_of(event)
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
        """Handlers wait on the LLM in threads (``asyncio.to_thread``): the loop's default pool (a few
        threads on a small machine) would cap the calls in flight, so it gets one thread per slot."""
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
        self.in_flight += 1
        self.ingesting += ingest
        self.metrics.stage_in_flight.labels(stage).inc()
        self._show_queued(stage)
        finished = False
        try:
            await self._handle(stage, event, handler)
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
            self.metrics.stage_in_flight.labels(stage).dec()
            self.handled += 1
            if ingest:
                self.ingesting -= 1
                self.last_ingest = time.monotonic()

    def busy_ingesting(self) -> bool:
        """An ingest stage of this worker is handling a message, or finished one within the last second."""
        return self.ingesting > 0 or time.monotonic() - self.last_ingest < 1.0

    async def _handle(self, stage: str, event: EventT, handler: Handler) -> None:
        msg = event.message
        # One span per handling, a child of the context the message carries (its producer's, or the
        # stage's before it); a redelivery after a crash is a second span in the same trace.
        with self.services.tracing.span(
            f"memstream.{stage}",
            parent=self.services.tracing.context_of(msg.headers),
            kind=SpanKind.CONSUMER,
            attributes=handling_attributes(stage, msg),
        ) as span:
            await self._handle_in_span(stage, event, handler, span)

    @staticmethod
    def record_of(event: EventT) -> Record:
        msg = event.message
        raw: bytes = event.value if isinstance(event.value, bytes) else bytes(event.value or b"")
        return Record(raw, msg.timestamp, msg.partition, msg.offset, Tracing.traceparent(msg.headers), raw_key(msg.key))

    async def _handle_in_span(self, stage: str, event: EventT, handler: Handler, span: Span) -> None:
        record = self.record_of(event)
        raw = record.value
        self.metrics.messages_in.labels(stage).inc()
        started = time.perf_counter()
        attempt = outage = 0
        while True:
            try:
                result = await handler(record)
                await self.produce(stage, result.outputs)
                span.set_attribute("memstream.messages_out", len(result.outputs))
                self.metrics.latency.labels(stage).observe(time.perf_counter() - started, trace_exemplar())
                return
            except Fenced:
                raise
            except SchemaError as exc:
                await self.dead_letter(stage, event, raw, str(exc), exc)
                self.services.tracing.fail(span, str(exc)[:300])
                return
            except StoreUnavailable as exc:
                # An outage, not bad input: the message is held (its partition with it, nothing commits)
                # and tried again until the store answers, however long that takes.
                outage += 1
                self.metrics.store_outages.labels(stage).inc()
                if outage == 1 or outage % 20 == 0:
                    log.warning(
                        "%s: vector store unavailable, holding %s[%s]@%s and trying again (%d): %s",
                        stage,
                        event.message.topic,
                        event.message.partition,
                        event.message.offset,
                        outage,
                        exc,
                    )
                await asyncio.sleep(min(0.25 * 2**outage, 10.0))
            except Exception as exc:  # anything else: retry, then dead-letter
                self.metrics.errors.labels(stage).inc()
                log.exception(
                    "%s failed on %s[%s]@%s (attempt %d)",
                    stage,
                    event.message.topic,
                    event.message.partition,
                    event.message.offset,
                    attempt + 1,
                )
                if attempt == self.s.processing_retries:
                    await self.dead_letter(stage, event, raw, f"processing failed: {exc}", exc)
                    self.services.tracing.fail(span, f"processing failed: {exc}"[:300])
                    return
                await asyncio.sleep(min(2.0**attempt * 0.2, 5.0))
                attempt += 1

    async def send(
        self, topic: str, key: bytes, value: bytes, partition: int | None = None, *, traceparent: str | None = None
    ) -> Awaitable[Any]:
        """Publish now, carrying ``traceparent`` or else the current span's trace context; returns
        the delivery future.

        ``force=True`` bypasses faust's attachments, which would hold the message until the source
        offset commits -- a wait on it from inside the handler would never end.
        """
        if topic not in self._topics:
            self._topics[topic] = self.app.topic(
                topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
            )
        headers = [("traceparent", traceparent.encode())] if traceparent else self.services.tracing.headers()
        return await self._topics[topic].send(
            key=key, value=value, partition=partition, headers=headers or None, force=True
        )

    async def produce(self, stage: str, outputs: Sequence[Out]) -> None:
        """Send and wait for the broker's ack: the source offset commits only after this returns."""
        self.fence.check()
        futures = []
        for out in outputs:
            futures.append(
                await self.send(
                    out.topic, out.key.encode(), out.value.to_bytes(), out.partition, traceparent=out.traceparent
                )
            )
            self.metrics.messages_out.labels(stage).inc()
        for fut in futures:
            await fut

    async def dead_letter(self, stage: str, event: EventT, raw: bytes, reason: str, exc: BaseException) -> None:
        msg = event.message
        key = msg.key.decode("utf-8", "replace") if isinstance(msg.key, bytes) else (str(msg.key) if msg.key else None)
        letter = DeadLetter(
            stage=stage,
            reason=reason[:2000],
            error_type=type(exc).__name__,
            topic=msg.topic,
            partition=msg.partition,
            offset=msg.offset,
            key=key,
            tenant_id=key.split("/", 1)[0] if key and "/" in key else None,
            original_b64=DeadLetter.encode(raw),
            original_size=len(raw),
            failed_at=datetime.now(timezone.utc),
        )
        short = exc.label if isinstance(exc, KeyMismatch) else reason.split(":", 1)[0][:60]
        self.metrics.dead_letters.labels(stage, short).inc()
        with self.services.tracing.span(
            "memstream.dlq", kind=SpanKind.PRODUCER, attributes={"memstream.stage": stage}
        ) as span:
            self.services.tracing.fail(span, reason[:300])
            log.warning(
                "dead letter from %s (%s[%s]@%s): %s", stage, msg.topic, msg.partition, msg.offset, reason[:300]
            )
            await (await self.send(self.s.topic("dlq"), (key or "").encode(), letter.to_bytes()))

    def idle_timer(
        self,
        name: str,
        table: TableT,
        idle: Callable[[dict[str, Any]], bool],
        topic: str,
        tick: Callable[[str, str], Payload],
    ) -> None:
        """Every ``stm_tick_s``, send a tick to the partition of each conversation whose state in
        ``table`` is idle: the stage then acts on it inside stream processing, where it may write
        the table."""

        async def look() -> None:
            try:
                keys = [key for key, data in list(table.items()) if data and idle(data)]
            except Exception:  # a bad entry must not crash the worker; the next tick retries
                log.exception("could not scan the %s table for idle conversations", name)
                return
            for key in keys:
                tenant, conversation = key.split("/", 1)
                await self.send(topic, key.encode(), tick(tenant, conversation).to_bytes())

        self.app.timer(interval=self.s.stm_tick_s, name=f"memstream.{name}.idle")(look)

    async def save_state(self, table: TableT, key: str, value: Any, *, source: Record | None = None) -> None:
        """Set a table entry and wait until its changelog record is on the broker.

        ``table[key] = value`` only queues the record, and faust's flush before a commit gives up
        after 0.1 s without progress: the source offset could commit before the state it produced
        (a turn lost on restart). The handler finishes, and its offset may commit, after this returns.
        ``source``: the input message the entry now reflects, with those before it (``already_applied``)."""
        self.fence.check()
        if source is not None:
            value = replay.stamped(value, source.partition, source.offset)
        await faust_compat.write_table(table, key, value)

    def already_applied(self, stage: str, value: Any, record: Record) -> bool:
        """The table entry ``value`` reflects ``record`` already (saved with it as ``source``, or a
        later one): a replay after a worker died between the entry's write and the offset commit.
        Counted as skipped, reason "in_state"."""
        if not replay.reflects(value, record.partition, record.offset):
            return False
        self.metrics.skipped.labels(stage, "in_state").inc()
        return True

    def table(self, stage: str, name: str) -> TableT:
        """A changelog-backed table of ``stage`` (declared in memstream.topology, so its changelog topic is
        created before the worker subscribes); faust names it ``<app id>-<name>-changelog``.

        Keys and values go through faust's json codec, live and on recovery from the changelog.
        """
        if name != TOPOLOGY[stage].table:
            raise ValueError(f"stage {stage} keeps table {name}, which memstream.topology does not give it")
        return self.app.Table(name, default=None, partitions=self.s.topic_partitions, key_type=str, value_type=None)


def raw_key(key: Any) -> bytes | None:
    """A consumed record's key as bytes (None: the record has none)."""
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    return str(key).encode()


def handling_attributes(stage: str, msg: Any) -> dict[str, Any]:
    """What a handling span says of its message: where it came from, and whose it is (the key's
    tenant); no text, no names."""
    key = msg.key.decode("utf-8", "replace") if isinstance(msg.key, bytes) else (str(msg.key) if msg.key else "")
    attributes: dict[str, Any] = {
        "memstream.stage": stage,
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.destination.name": msg.topic,
        "messaging.destination.partition.id": str(msg.partition),
        "messaging.kafka.offset": msg.offset,
    }
    if "/" in key:
        attributes["memstream.tenant_id"] = key.split("/", 1)[0]
    return attributes
