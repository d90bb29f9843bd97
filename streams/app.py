"""The faust app: one factory builds an app running the chosen stages, each a thin agent that moves
messages between topics and a processor. Values travel as raw bytes and are validated here, so a
malformed message becomes a dead letter instead of crashing the agent."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Sequence, get_args

import faust
import orjson
from faust.types import EventT

from memstream.config import STAGE_INPUTS, Settings, group_id as app_id
from processors.compress import compress_turn
from processors.consolidate import ConsolidateParams, Decider, LlmDecider, RuleDecider, apply_update, consolidate_card
from processors.extract import ExtractiveExtractor, LlmExtractor
from processors.index import CARDS, COLLECTIONS, LEXICAL, points_for_write
from processors.versioning import CardView
from processors.query import QueryEngine, expired_reply
from processors.segment import Segmenter, SegmenterState, window_is_idle
from processors.stm import StmPolicy, StmState, add_turn, is_idle, on_tick
from schemas import (
    ConsolidateCommand,
    ConsolidationUpdate,
    DeadLetter,
    MemoryWrite,
    Payload,
    Query,
    Reply,
    SchemaError,
    SegmentedTurn,
    StmFlush,
    StmTick,
    Turn,
    WindowTick,
    decode_compressed_message,
    decode_segments_message,
)
from aiokafka import TopicPartition

from memstream.ports import StoreFilter, StoreHit, StorePoint
from schemas.memory import ConsolidationAction, ExtractionMode, FlushReason
from schemas.query import TOPIC_PATTERN

from .client import group_positions, partition_lag
from .offsets import SafeCommits
from .services import Services

log = logging.getLogger(__name__)

EXIT_STALLED = 75  # the worker exits with this code for its supervisor to restart it
RUN_CHUNK = 64  # update queues a consolidation run decides before it sends their outcomes
INGEST_STAGES = frozenset({"compress", "segment", "stm", "extract", "index"})


@dataclass
class Out:
    """A message a stage wants produced."""

    topic: str
    key: str
    value: Payload


@dataclass
class StageResult:
    outputs: list[Out] = field(default_factory=list)


@dataclass(frozen=True)
class Record:
    """A consumed message as a stage sees it."""

    value: bytes
    timestamp: float | None  # seconds since the epoch: when the record reached its topic


Handler = Callable[[Record], Awaitable[StageResult]]


class TurnRejected(SchemaError):
    """A turn that parses but is not acceptable (e.g. too long)."""


def create_app(settings: Settings, services: Services, stages: Sequence[str] | None = None) -> faust.App:
    stages = list(stages or settings.stage_list())
    s = settings
    datadir = s.data_dir / "workers" / app_id(s.topic_prefix, stages)
    datadir.parent.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        app_id(s.topic_prefix, stages),
        broker=[f"kafka://{h.strip()}" for h in s.kafka_bootstrap.split(",")],
        value_serializer="raw",
        key_serializer="raw",
        topic_partitions=s.topic_partitions,
        topic_replication_factor=1,
        topic_allow_declare=True,
        table_standby_replicas=0,
        store="memory://",
        datadir=str(datadir),
        web_enabled=False,
        producer_max_request_size=s.max_message_bytes,
        consumer_max_fetch_size=s.max_message_bytes,
        producer_acks=-1,
        broker_commit_interval=1.0,
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
        stream_wait_empty=False,
        logging_config=None,
    )
    wiring = _Wiring(app, s, services)
    wiring.commits.install()
    for stage in stages:
        getattr(wiring, f"stage_{stage}")()
    if s.stall_s > 0:
        wiring.watchdog()
    wiring.lag_gauges()
    log.info("app %s runs stages: %s", app.conf.id, ", ".join(stages))
    return app


def _topic(app: faust.App, settings: Settings, name: str, **kwargs: Any) -> faust.TopicT:
    return app.topic(settings.topic(name), key_type=bytes, value_type=bytes, key_serializer="raw",
                     value_serializer="raw", partitions=settings.topic_partitions, **kwargs)


class _Wiring:
    """Registers agents, tables and timers on the app; holds what they share."""

    def __init__(self, app: faust.App, settings: Settings, services: Services):
        self.app = app
        self.s = settings
        self.services = services
        self.metrics = services.metrics
        self._topics: dict[str, faust.TopicT] = {}
        self.in_flight = 0  # events inside a handler now
        self.handled = 0  # events handled since start
        self.ingesting = 0  # ingest-stage events inside a handler now
        self.last_ingest = 0.0  # time.monotonic() when an ingest stage last finished a message
        # What may commit (offsets every stage reading them finished), and message order per stage.
        self.commits = SafeCommits(app, lambda tps: group_positions(settings, app.conf.id, tps))

    def watchdog(self) -> None:
        """When this worker's partitions lag while every agent idles: seek them back to what is
        unfinished, and if that does not help within ``stall_s``, exit for the supervisor to restart it.

        faust-streaming 0.15 can strand messages fetched around a rebalance or table recovery: no
        agent ever gets them and their partition stops committing (``streams.offsets``). A seek or a
        restart redelivers them (at-least-once; every sink is idempotent).
        """
        state: dict[str, Any] = {"last_handled": -1, "stuck_since": None, "rewound": False}
        stall_s = self.s.stall_s
        own_prefix = self.s.topic_prefix + "."

        async def check() -> None:
            if self.in_flight or self.handled != state["last_handled"]:
                state["last_handled"], state["stuck_since"], state["rewound"] = self.handled, None, False
                return
            tps = [TopicPartition(tp.topic, tp.partition) for tp in self.app.consumer.assignment()
                   if tp.topic.startswith(own_prefix)]
            lag = await partition_lag(self.s, self.app.conf.id, tps)
            lagging = {f"{tp.topic}[{tp.partition}]": n for tp, n in lag.items() if n}
            if not lagging:
                state["stuck_since"], state["rewound"] = None, False
                return
            now = time.monotonic()
            state["stuck_since"] = state["stuck_since"] or now
            if not state["rewound"]:
                # First try in process: seek the lagging partitions back to what is unfinished.
                state["rewound"] = True
                sought = await self.commits.rewind([(tp.topic, tp.partition) for tp, n in lag.items() if n])
                self.metrics.rewinds.inc(len(sought))
                log.warning("partitions lag while every agent idles (%s): sought back %d of them", lagging, len(sought))
                return
            if now - state["stuck_since"] >= stall_s:
                log.error("partitions lag while every agent idles for %.0fs (%s): exiting for a restart "
                          "(exit code %d)", now - state["stuck_since"], lagging, EXIT_STALLED)
                logging.shutdown()
                os._exit(EXIT_STALLED)

        self.app.timer(interval=max(2.0, stall_s / 3), name="memstream.watchdog")(check)

    def lag_gauges(self, interval_s: float = 5.0) -> None:
        """``memstream_consumer_lag`` of every partition this worker owns; series of partitions it
        gave up are removed."""
        group, gauge = self.app.conf.id, self.metrics.consumer_lag
        shown: set[tuple[str, str]] = set()

        async def update() -> None:
            try:
                lag = await self.commits.lag()
            except Exception:  # noqa: BLE001 - a rebalance or a broker hiccup: the next tick retries
                log.debug("consumer lag not read this time", exc_info=True)
                return
            current = {(tp.topic, str(tp.partition)): n for tp, n in lag.items()}
            for topic, partition in shown - current.keys():
                gauge.remove(group, topic, partition)
            for (topic, partition), n in current.items():
                gauge.labels(group, topic, partition).set(n)
            shown.clear()
            shown.update(current)

        self.app.timer(interval=interval_s, name="memstream.lag")(update)

    # --- shared handling -------------------------------------------------------------------

    def agent(self, stage: str, topic_name: str, handler: Handler) -> None:
        if topic_name not in STAGE_INPUTS[stage.split(".")[0]]:  # deployments drain by STAGE_INPUTS
            raise ValueError(f"stage {stage} reads {topic_name}, which STAGE_INPUTS does not list")
        source = _topic(self.app, self.s, topic_name)
        self.commits.subscribe(stage, self.s.topic(topic_name))
        self.metrics.init_stage(stage)

        async def run(stream: faust.StreamT) -> None:
            # faust's acks do not decide commits (it acks events no handler finished): ``handle``
            # tells the commit tracker what finished.
            async for event in stream.events():
                await self.handle(stage, event, handler)

        run.__name__ = f"{stage}_agent"
        self.app.agent(source, name=f"memstream.{stage}")(run)

    async def handle(self, stage: str, event: EventT, handler: Handler) -> None:
        msg = event.message
        skip = await self.commits.skip_reason(stage, msg.topic, msg.partition, msg.offset)
        if skip:  # finished before, or handed over out of order (it comes again, in order)
            self.metrics.skipped.labels(stage, skip).inc()
            return
        ingest = stage in INGEST_STAGES
        self.in_flight += 1
        self.ingesting += ingest
        try:
            await self._handle(stage, event, handler)
            # Its effect (outputs, store writes, state) is durable or dead-lettered: it may commit.
            self.commits.finished(stage, msg.topic, msg.partition, msg.offset)
        finally:
            self.in_flight -= 1
            self.handled += 1
            if ingest:
                self.ingesting -= 1
                self.last_ingest = time.monotonic()

    def busy_ingesting(self) -> bool:
        """An ingest stage of this worker is handling a message, or finished one within the last second."""
        return self.ingesting > 0 or time.monotonic() - self.last_ingest < 1.0

    async def _handle(self, stage: str, event: EventT, handler: Handler) -> None:
        raw: bytes = event.value if isinstance(event.value, bytes) else bytes(event.value or b"")
        record = Record(raw, event.message.timestamp)
        self.metrics.messages_in.labels(stage).inc()
        started = time.perf_counter()
        for attempt in range(self.s.processing_retries + 1):
            try:
                result = await handler(record)
                await self.produce(stage, result.outputs)
                self.metrics.latency.labels(stage).observe(time.perf_counter() - started)
                return
            except SchemaError as exc:
                await self.dead_letter(stage, event, raw, str(exc), exc)
                return
            except Exception as exc:  # noqa: BLE001 - anything else: retry, then dead-letter
                self.metrics.errors.labels(stage).inc()
                log.exception("%s failed on %s[%s]@%s (attempt %d)", stage, event.message.topic,
                              event.message.partition, event.message.offset, attempt + 1)
                if attempt == self.s.processing_retries:
                    await self.dead_letter(stage, event, raw, f"processing failed: {exc}", exc)
                    return
                await asyncio.sleep(min(2.0 ** attempt * 0.2, 5.0))

    async def send(self, topic: str, key: bytes, value: bytes) -> Awaitable[Any]:
        """Publish now; returns the delivery future.

        ``force=True`` bypasses faust's attachments, which would hold the message until the source
        offset commits -- a wait on it from inside the handler would never end.
        """
        if topic not in self._topics:
            self._topics[topic] = self.app.topic(topic, key_type=bytes, value_type=bytes,
                                                 key_serializer="raw", value_serializer="raw")
        return await self._topics[topic].send(key=key, value=value, force=True)

    async def produce(self, stage: str, outputs: Sequence[Out]) -> None:
        """Send and wait for the broker's ack: the source offset commits only after this returns."""
        futures = []
        for out in outputs:
            futures.append(await self.send(out.topic, out.key.encode(), out.value.to_bytes()))
            self.metrics.messages_out.labels(stage).inc()
        for fut in futures:
            await fut

    async def dead_letter(self, stage: str, event: EventT, raw: bytes, reason: str, exc: BaseException) -> None:
        msg = event.message
        key = msg.key.decode("utf-8", "replace") if isinstance(msg.key, bytes) else (str(msg.key) if msg.key else None)
        letter = DeadLetter(
            stage=stage, reason=reason[:2000], error_type=type(exc).__name__, topic=msg.topic,
            partition=msg.partition, offset=msg.offset, key=key,
            tenant_id=key.split("/", 1)[0] if key and "/" in key else None,
            original_b64=DeadLetter.encode(raw), original_size=len(raw),
            failed_at=datetime.now(timezone.utc),
        )
        short = reason.split(":", 1)[0][:60]
        self.metrics.dead_letters.labels(stage, short).inc()
        log.warning("dead letter from %s (%s[%s]@%s): %s", stage, msg.topic, msg.partition, msg.offset, reason[:300])
        await (await self.send(self.s.topic("dlq"), (key or "").encode(), letter.to_bytes()))

    async def reply_invalid(self, raw: bytes, exc: SchemaError) -> None:
        """A malformed query that names its correlation id and reply topic gets an error reply, so its
        client fails at once instead of timing out."""
        try:
            data = orjson.loads(raw)
            reply = Reply(tenant_id=data["tenant_id"], conversation_id=data["conversation_id"],
                          correlation_id=data["correlation_id"], ok=False, error=f"invalid query: {exc}",
                          replied_at=datetime.now(timezone.utc))
            topic = data["reply_topic"]
            if not isinstance(topic, str) or not re.fullmatch(TOPIC_PATTERN, topic):
                return
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return
        await (await self.send(topic, reply.correlation_id.encode(), reply.to_bytes()))

    def idle_timer(self, name: str, table: faust.TableT, idle: Callable[[dict[str, Any]], bool], topic: str,
                   tick: Callable[[str, str], Payload]) -> None:
        """Every ``stm_tick_s``, send a tick to the partition of each conversation whose state in
        ``table`` is idle: the stage then acts on it inside stream processing, where it may write
        the table."""

        async def look() -> None:
            try:
                keys = [key for key, data in list(table.items()) if data and idle(data)]
            except Exception:  # noqa: BLE001 - a bad entry must not crash the worker; the next tick retries
                log.exception("could not scan the %s table for idle conversations", name)
                return
            for key in keys:
                tenant, conversation = key.split("/", 1)
                await self.send(topic, key.encode(), tick(tenant, conversation).to_bytes())

        self.app.timer(interval=self.s.stm_tick_s, name=f"memstream.{name}.idle")(look)

    async def save_state(self, table: faust.TableT, key: str, value: Any) -> None:
        """Set a table entry and wait until its changelog record is on the broker.

        ``table[key] = value`` only queues the record, and faust's flush before a commit gives up
        after 0.1 s without progress: the source offset could commit before the state it produced
        (a turn lost on restart). The handler finishes, and its offset may commit, after this returns."""
        table.data[key] = value  # the local copy, without faust's fire-and-forget changelog send
        await table.send_changelog(table.partition_for_key(key), key, value)

    def table(self, name: str) -> faust.TableT:
        """A changelog-backed table; faust names its compacted changelog ``<app id>-<name>-changelog``.

        Keys and values go through faust's json codec, live and on recovery from the changelog.
        """
        return self.app.Table(name, default=None, partitions=self.s.topic_partitions, key_type=str, value_type=None)

    # --- stages ----------------------------------------------------------------------------

    def stage_compress(self) -> None:
        s, services = self.s, self.services
        compressor = services.compressor  # loaded once, at start-up
        out_topic = s.topic("turns.compressed")

        async def handler(record: Record) -> StageResult:
            turn = Turn.from_bytes(record.value)
            if len(turn.text) > s.max_turn_chars:
                raise TurnRejected(f"turn text too long: {len(turn.text)} characters > {s.max_turn_chars}")
            received_at = datetime.fromtimestamp(record.timestamp, timezone.utc) if record.timestamp else None
            if compressor is None:
                item = compress_turn(turn, None, s.compress_rate, received_at)
            else:
                item = await asyncio.to_thread(compress_turn, turn, compressor, s.compress_rate, received_at)
            self.metrics.compress_tokens.labels("in").inc(item.tokens_in)
            self.metrics.compress_tokens.labels("out").inc(item.tokens_out)
            self.metrics.turn_tokens.labels("in").observe(item.tokens_in)
            self.metrics.turn_tokens.labels("out").observe(item.tokens_out)
            return StageResult([Out(out_topic, item.key, item)])

        self.agent("compress", "turns", handler)
        init_series(self.metrics.compress_tokens, ("in", "out"))

    def stage_segment(self) -> None:
        s, services = self.s, self.services
        states = self.table("segmenter")
        out_topic = s.topic("segments")
        in_topic = s.topic("turns.compressed")
        params = services.segment_params
        segmenter = Segmenter(params, services.embedder.embed,
                              services.attention.cohesion if params.uses_attention else None)
        log.info("segmentation: %s, window %d turns (carry %d), heads %s", params.method, params.window_turns,
                 params.carry_turns, list(params.heads) or "upper layers")

        async def handler(record: Record) -> StageResult:
            message = decode_compressed_message(record.value)
            state = SegmenterState.from_dict(states.get(message.key))
            outs: list[Out] = []
            # The window is segmented on the loop (embedding + one attention pass, well under a second),
            # so the table write stays in event order.
            if isinstance(message, WindowTick):
                if not window_is_idle(state, time.time(), s.stm_idle_s):
                    return StageResult()  # a turn arrived after the tick was sent
                outs = [Out(out_topic, seg.key, seg) for seg in segmenter.drain(state)]
                # The STM buffered these just now; tell it the conversation is idle.
                tick = StmTick(tenant_id=message.tenant_id, conversation_id=message.conversation_id,
                               sent_at=datetime.now(timezone.utc), conversation_idle=True)
                outs.append(Out(out_topic, message.key, tick))
            else:
                outs = [Out(out_topic, seg.key, seg) for seg in segmenter.add(state, message, time.time())]
            for out in outs:
                if isinstance(out.value, SegmentedTurn) and out.value.boundary:
                    self.metrics.segment_boundaries.labels(out.value.boundary_reason).inc()
            # Emitted turns are acknowledged by the broker before the window forgets them.
            await self.produce("segment", outs)
            await self.save_state(states, message.key, state.to_dict())
            return StageResult()

        self.agent("segment", "turns.compressed", handler)
        init_series(self.metrics.segment_boundaries,
                    [r for r in get_args(SegmentedTurn.model_fields["boundary_reason"].annotation) if r != "none"])
        init_series(self.metrics.embedded_texts, ("computed", "cached"))

        self.idle_timer("segmenter", states, lambda data: window_is_idle(SegmenterState.from_dict(data), time.time(), s.stm_idle_s),
                        in_topic, lambda tenant, conv: WindowTick(tenant_id=tenant, conversation_id=conv,
                                                                  sent_at=datetime.now(timezone.utc)))

    def stage_stm(self) -> None:
        s = self.s
        buffers = self.table("stm")
        policy = StmPolicy(budget_tokens=s.stm_tokens, idle_s=s.stm_idle_s)
        out_topic = s.topic("stm.flush")
        segments_topic = s.topic("segments")

        async def handler(record: Record) -> StageResult:
            message = decode_segments_message(record.value)
            state = StmState.from_dict(buffers.get(message.key))
            now = time.time()
            if isinstance(message, StmTick):
                flush = on_tick(state, now, policy, force=message.force, conversation_idle=message.conversation_idle)
                flushes = [flush] if flush else []
            else:
                before = state.pending_turns + len(state.seen)
                flushes = add_turn(state, message, now, policy)
                if state.pending_turns + len(state.seen) == before and not flushes:
                    self.metrics.stm_duplicates.inc()
            # Flushes are acknowledged by the broker before the buffer forgets their turns.
            await self.produce("stm", [Out(out_topic, f.key, f) for f in flushes])
            for f in flushes:
                self.metrics.stm_flushes.labels(f.reason).inc()
            await self.save_state(buffers, message.key, state.to_dict())
            return StageResult()

        self.agent("stm", "segments", handler)
        init_series(self.metrics.stm_flushes, get_args(FlushReason))

        async def buffer_gauges() -> None:
            states = [StmState.from_dict(data) for _, data in list(buffers.items()) if data]
            self.metrics.stm_buffer_turns.set(sum(st.pending_turns for st in states))
            self.metrics.stm_buffer_tokens.set(sum(st.tokens for st in states))
            self.metrics.stm_buffer_conversations.set(sum(1 for st in states if st.pending_turns))

        self.app.timer(interval=5.0, name="memstream.stm.gauges")(buffer_gauges)

        self.idle_timer("stm", buffers, lambda data: is_idle(StmState.from_dict(data), time.time(), policy),
                        segments_topic, lambda tenant, conv: StmTick(tenant_id=tenant, conversation_id=conv,
                                                                     sent_at=datetime.now(timezone.utc)))

    def stage_extract(self) -> None:
        s, services, metrics = self.s, self.services, self.metrics
        llm = services.llm_for("extract")
        mode = s.effective_extract_mode
        extractor = (LlmExtractor(llm, max_tokens=s.extract_max_tokens, max_cards=s.extract_max_cards)
                     if mode == "llm" and llm else ExtractiveExtractor())
        log.info("extraction mode: %s", extractor.mode)
        out_topic = s.topic("cards")

        async def handler(record: Record) -> StageResult:
            flush = StmFlush.from_bytes(record.value)
            write = await asyncio.to_thread(extractor.extract, flush)
            metrics.extract_mode.labels(write.mode).inc()
            for cost in write.costs:
                metrics.count_llm(cost.stage, cost.model, cost.calls, cost.prompt_tokens, cost.completion_tokens)
            return StageResult([Out(out_topic, write.key, write)])

        self.agent("extract", "stm.flush", handler)
        init_series(metrics.extract_mode, get_args(ExtractionMode))

    def stage_index(self) -> None:
        services, metrics = self.services, self.metrics
        store = services.store

        def index(write: MemoryWrite) -> None:
            specs = points_for_write(write)
            vectors = services.embedder.embed([p.text for p in specs])
            by_collection: dict[str, list[StorePoint]] = {}
            for spec, vector in zip(specs, vectors):
                lexical = spec.text if spec.collection in LEXICAL else None
                by_collection.setdefault(spec.collection, []).append(StorePoint(spec.id, vector, spec.payload, lexical))
            # Raw turns last: their presence marks the whole write as indexed.
            for collection in sorted(by_collection, key=lambda c: c == "turns"):
                store.upsert(collection, by_collection[collection])
                metrics.points_written.labels(collection).inc(len(by_collection[collection]))
            now = datetime.now(timezone.utc)
            for turn in write.source_turns:
                if turn.received_at is not None:
                    metrics.turn_to_memory.observe(max(0.0, (now - turn.received_at).total_seconds()))

        async def handler(record: Record) -> StageResult:
            write = MemoryWrite.from_bytes(record.value)
            await asyncio.to_thread(index, write)
            return StageResult()

        self.agent("index", "cards", handler)
        init_series(metrics.points_written, COLLECTIONS)
        init_series(metrics.embedded_texts, ("computed", "cached"))

    def stage_consolidate(self) -> None:
        """Sleep-time consolidation: writes mark cards pending per conversation (changelog table); an
        idle conversation, the schedule or a command on ``memory.control`` runs its update queues in
        parallel; outcomes go to ``memory.updates``, whose consumer applies them to the store."""
        s, services, metrics = self.s, self.services, self.metrics
        pending = self.table("consolidation")
        control, updates = s.topic("control"), s.topic("updates")
        params = ConsolidateParams(tau=s.consolidate_tau, top_n=s.consolidate_top_n)
        llm = services.llm_for("consolidate")
        decider: Decider = LlmDecider(llm, params) if llm is not None else RuleDecider(params)
        pool = ThreadPoolExecutor(max_workers=s.consolidate_parallel, thread_name_prefix="consolidate")
        log.info("consolidation: %s decisions, idle after %.0fs, schedule %s", type(decider).__name__,
                 s.sleep_idle_s, f"every {s.consolidate_every_s:.0f}s" if s.consolidate_every_s else "off")

        async def on_write(record: Record) -> StageResult:
            write = MemoryWrite.from_bytes(record.value)
            if write.cards:
                state = pending.get(write.key) or {"cards": [], "last_write": 0.0}
                state["cards"] += [c.card_id for c in write.cards if c.card_id not in state["cards"]]
                state["last_write"] = time.time()
                await self.save_state(pending, write.key, state)
            return StageResult()

        def indexed_cards(tenant: str, conversation: str, card_ids: list[str] | None) -> list[StoreHit]:
            """The cards to run (None: every card of the conversation), with their vectors."""
            if card_ids is None:
                scope = StoreFilter(equals={"conversation_id": conversation})
                limit = services.store.count(CARDS, tenant, where=scope) + 1
            else:
                scope = StoreFilter(equals={"conversation_id": conversation}, any_of={"card_id": card_ids})
                limit = len(card_ids) + 1
            hits = services.store.scroll(CARDS, tenant, where=scope, limit=limit, with_vectors=True)
            return sorted(hits, key=lambda h: CardView.from_payload(h.id, h.payload).order)  # oldest first

        def run_queues(tenant: str, conversation: str, hits: list[StoreHit], as_of: datetime, new_cards: bool) -> list[Out]:
            outcomes = list(pool.map(
                lambda h: consolidate_card(services.store, decider, tenant, conversation, h, params, as_of=as_of), hits))
            outs = []
            for update in outcomes:
                metrics.consolidation_queues.inc()
                if update is None:
                    metrics.consolidation_candidates.observe(0)
                    continue
                metrics.consolidation_candidates.observe(len(update.candidates))
                for d in update.decisions:
                    metrics.consolidation_decisions.labels(d.action, d.decided_by).inc()
                for cost in update.costs:
                    metrics.count_llm(cost.stage, cost.model, cost.calls, cost.prompt_tokens, cost.completion_tokens)
                if new_cards and update.written_at is not None:  # a --all run re-decides old cards: no lag
                    metrics.consolidation_lag.observe(max(0.0, time.time() - update.written_at.timestamp()))
                outs.append(Out(updates, update.key, update))
            return outs

        async def on_command(record: Record) -> StageResult:
            command = ConsolidateCommand.from_bytes(record.value)
            if command.conversation_id is None:
                # A broadcast: a keyed command per pending conversation here (scope "all": every one
                # this worker has seen), so each runs in the partition (and table changelog) that owns
                # it. Each copy of the broadcast fans out again; last_as_of below runs each once.
                prefix = f"{command.tenant_id}/" if command.tenant_id else ""
                keys = [k for k, v in list(pending.items())
                        if v and (v["cards"] or command.scope == "all") and k.startswith(prefix)]
                return StageResult([Out(control, k, ConsolidateCommand(
                    tenant_id=k.split("/", 1)[0], conversation_id=k.split("/", 1)[1], reason=command.reason,
                    requested_at=command.requested_at, scope=command.scope)) for k in keys])
            key = f"{command.tenant_id}/{command.conversation_id}"
            state = pending.get(key)
            if state and state.get("last_as_of", 0.0) >= command.requested_at.timestamp():
                # A run as of this time (or later) is done: a broadcast reaches a worker once per
                # partition it holds, and a command can come back after its run finished.
                return StageResult()
            if command.scope == "pending" and (not state or not state["cards"]):
                return StageResult()
            started = time.perf_counter()
            tenant, conversation = command.tenant_id, command.conversation_id
            hits = await asyncio.to_thread(indexed_cards, tenant, conversation,
                                           None if command.scope == "all" else state["cards"])
            log.info("consolidating %s: %d queues", key, len(hits))
            # Outcomes go out a chunk at a time (memory stays flat, the store is updated as the run goes).
            # A crash mid-run redelivers the command: the run is redone as of the same time, and the
            # updates already out are replays (idempotent).
            for i in range(0, len(hits), RUN_CHUNK):
                chunk_started = time.perf_counter()
                outs = await asyncio.to_thread(run_queues, tenant, conversation, hits[i:i + RUN_CHUNK],
                                               command.requested_at, command.scope == "pending")
                await self.produce("consolidate.run", outs)
                log.debug("consolidating %s: %d of %d queues out", key, min(i + RUN_CHUNK, len(hits)), len(hits))
                if s.consolidate_yield and self.busy_ingesting():
                    # Sleep-time work gives way while this worker ingests (they share its cores and GIL).
                    await asyncio.sleep(s.consolidate_yield * (time.perf_counter() - chunk_started))
            # The updates are acknowledged by the broker before the cards stop being pending; cards
            # not indexed yet stay pending.
            done = {h.id for h in hits}
            state = pending.get(key) or {"cards": [], "last_write": 0.0}
            state["cards"] = [c for c in state["cards"] if c not in done]
            state["last_run"] = time.time()  # a card not indexed yet is retried after the next sleep, not at once
            state["last_as_of"] = command.requested_at.timestamp()
            await self.save_state(pending, key, state)
            metrics.consolidation_runs.labels(command.reason).inc()
            metrics.consolidation_seconds.observe(time.perf_counter() - started)
            log.info("consolidated %s: %d queues in %.1fs", key, len(hits), time.perf_counter() - started)
            return StageResult()

        async def on_update(record: Record) -> StageResult:
            await asyncio.to_thread(apply_update, services.store, services.embedder, ConsolidationUpdate.from_bytes(record.value))
            return StageResult()

        self.agent("consolidate", "cards", on_write)
        self.agent("consolidate.run", "control", on_command)
        self.agent("consolidate.apply", "updates", on_update)
        init_series(metrics.consolidation_decisions, get_args(ConsolidationAction), ("llm", "rules"))
        init_series(metrics.consolidation_runs, get_args(ConsolidateCommand.model_fields["reason"].annotation))
        def asleep(data: dict[str, Any]) -> bool:
            quiet_since = max(data["last_write"], data.get("last_run", 0.0))
            return bool(data["cards"]) and time.time() - quiet_since >= s.sleep_idle_s

        self.idle_timer("consolidation", pending, asleep, control,
                        lambda tenant, conv: ConsolidateCommand(tenant_id=tenant, conversation_id=conv, reason="idle",
                                                                requested_at=datetime.now(timezone.utc)))
        if s.consolidate_every_s > 0:
            async def scheduled() -> None:
                # Each worker schedules the conversations its own partitions hold, keyed to them.
                for key, data in list(pending.items()):
                    if data and data["cards"]:
                        tenant, conv = key.split("/", 1)
                        await self.send(control, key.encode(), ConsolidateCommand(
                            tenant_id=tenant, conversation_id=conv, reason="schedule",
                            requested_at=datetime.now(timezone.utc)).to_bytes())

            self.app.timer(interval=s.consolidate_every_s, name="memstream.consolidation.schedule")(scheduled)

    def stage_query(self) -> None:
        services, metrics = self.services, self.metrics
        engine = QueryEngine(services.store, services.embedder, services.llm_for("answer"), services.query_options,
                             planner_llm=services.llm_for("plan"))

        async def handler(record: Record) -> StageResult:
            try:
                query = Query.from_bytes(record.value)
            except SchemaError as exc:
                await self.reply_invalid(record.value, exc)
                raise  # and dead-letter it
            now = datetime.now(timezone.utc)
            if query.deadline is not None and now >= query.deadline:
                reply = expired_reply(query, now)
                observe_query(metrics, reply)
                return StageResult([Out(query.reply_topic, query.correlation_id, reply)])
            try:
                reply = await asyncio.to_thread(engine.run, query)
            except Exception as exc:  # noqa: BLE001 - the asker gets a clear error, never silence
                log.exception("query %s failed", query.correlation_id)
                reply = Reply(tenant_id=query.tenant_id, conversation_id=query.conversation_id,
                              correlation_id=query.correlation_id, ok=False, error=f"{type(exc).__name__}: {exc}",
                              replied_at=datetime.now(timezone.utc))
            for cost in reply.costs:
                metrics.count_llm(cost.stage, cost.model, cost.calls, cost.prompt_tokens, cost.completion_tokens)
            observe_query(metrics, reply)
            return StageResult([Out(query.reply_topic, query.correlation_id, reply)])

        self.agent("query", "queries", handler)


def observe_query(metrics: Any, reply: Reply) -> None:  # Metrics
    """A reply's profile, outcome, latency per step, evidence and context size (bounded labels)."""
    profile = reply.access_profile or "none"
    metrics.queries.labels(profile, "ok" if reply.ok else "error").inc()
    for key, ms in reply.latency_ms.items():  # plan_ms, embed_ms, hybrid_ms, ..., total_ms
        step = key.removesuffix("_ms")
        if step == "total":
            metrics.query_latency.labels(profile).observe(ms / 1000.0)
        else:
            metrics.query_step_latency.labels(step).observe(ms / 1000.0)
    if reply.ok:
        metrics.query_evidence.labels(profile).observe(len(reply.evidence))
        metrics.query_context_tokens.labels(profile).observe(reply.context_tokens)


def init_series(metric: Any, *label_values: Sequence[str]) -> None:
    """Create a labelled metric's series at 0 for every combination of known label values: rates and
    dashboards see them before the first event."""
    for combination in itertools.product(*label_values):
        metric.labels(*combination)
