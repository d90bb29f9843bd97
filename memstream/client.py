"""memstream's Python SDK: remember turns, ask questions, forget, consolidate and export, over the
same Kafka topics the workers read.

``AsyncMemoryClient`` is the asyncio client; ``MemoryClient`` is the same API for synchronous code
(it runs the async client on a private event loop thread). Both take their broker address and
security options from ``Settings`` (``MEMSTREAM_*``), like the workers::

    from memstream.client import MemoryClient

    with MemoryClient() as memory:
        memory.remember(turns)
        reply = memory.ask("Where did Caroline move from?", tenant_id="acme", conversation_id="c1")

Errors are typed: ``BrokerUnavailable`` (Kafka cannot be reached), ``QueryTimeout`` (no reply in
time: no worker runs that stage, or it is behind), ``ReplyError`` (the worker answered with an
error), ``MemstreamError`` for the rest; bad payloads raise ``SchemaError`` before anything is sent.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Concatenate,
    Coroutine,
    Iterable,
    Literal,
    Mapping,
    ParamSpec,
    TypeVar,
)

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from memstream.config import Settings
from memstream.schemas import (
    ConsolidateCommand,
    DeadLetter,
    Forget,
    ForgetReply,
    Query,
    Reply,
    SchemaError,
    Turn,
    WindowTick,
    decode_message,
)
from memstream.schemas.read import ReadKind, ReadReply, ReadRequest
from memstream.schemas.topics import Topic
from memstream.streams.kafka_options import client_options
from memstream.streams.lag import wait_drained
from memstream.tracing import SpanKind, Tracing

if TYPE_CHECKING:
    from memstream.platforms import Mapped

T = TypeVar("T")
P = ParamSpec("P")
Profile = Literal["auto", "lookup", "compose", "replay"]
ConsolidationScope = Literal["pending", "all"]


class MemstreamError(Exception):
    """Base of the errors the SDK raises."""


class BrokerUnavailable(MemstreamError, ConnectionError):
    """Kafka cannot be reached (not started, wrong address or credentials, or it went away)."""


class QueryTimeout(MemstreamError, TimeoutError):
    """No reply arrived within the timeout."""


class ReplyError(MemstreamError):
    """The worker replied, with an error (an invalid query, one past its deadline, a store failure)."""

    def __init__(self, reply: Reply):
        self.reply = reply
        super().__init__(f"query {reply.correlation_id} failed: {reply.error}")


class ReadError(MemstreamError):
    """The worker could not read what was asked (the store failed): the reply says why."""

    def __init__(self, reply: ReadReply):
        self.reply = reply
        super().__init__(f"{reply.read} read {reply.correlation_id} failed: {reply.error}")


@dataclass
class ForgetOutcome:
    """What a forget removed, summed over its parts, and where raw text waits for retention.
    ``done`` is False when the caller did not wait (then only ``forget_id`` and ``parts`` are known)."""

    forget_id: str
    parts: int
    counts: dict[str, int] = field(default_factory=dict)
    retained: dict[str, datetime] = field(default_factory=dict)  # topic -> until
    replies: list[ForgetReply] = field(default_factory=list)
    done: bool = True

    @property
    def store_points(self) -> int:
        return sum(n for k, n in self.counts.items() if k.startswith("store:") and k != "store:repaired")


@dataclass
class IngestOutcome:
    """What ``ingest`` put on the broker from a batch of platform events."""

    turns: int = 0
    forgets: list[str] = field(default_factory=list)  # forget ids (edits and deletions)
    dead_letters: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # event type -> count


def as_turn(turn: Turn | Mapping[str, Any]) -> Turn:
    """A ``Turn``, or a mapping validated as one (``SchemaError`` with the reason if it is not)."""
    if isinstance(turn, Turn):
        return turn
    try:
        return Turn.model_validate(turn)
    except ValueError as exc:
        raise SchemaError(f"invalid Turn: {exc}") from exc


class AsyncMemoryClient:
    """One producer (idempotent, acks=all) for turns, queries and commands, and one consumer of the
    reply topic: a query carries a correlation id and the topic to answer on."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        reply_topic: str | None = None,
        create_topics: bool = False,
        batch_size: int = 1000,
    ):
        self.settings = settings or Settings()
        self.reply_topic = reply_topic or self.settings.topic(Topic.REPLIES)
        self.create_topics = create_topics
        self.batch_size = batch_size
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._waiting: dict[str, asyncio.Future[Reply | ReadReply]] = {}
        self._forgets: dict[str, tuple[int, list[ForgetReply], asyncio.Future[list[ForgetReply]]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._replies_lock = asyncio.Lock()
        self.tracing = Tracing("memstream-client")  # off unless OTEL_EXPORTER_OTLP_ENDPOINT is set

    # --- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncMemoryClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect the producer: raises ``BrokerUnavailable`` when Kafka cannot be reached. The reply
        consumer starts with the first request that waits for a reply."""
        try:
            if self.create_topics:
                from memstream.streams.topics import ensure_topics

                await ensure_topics(self.settings)
            self._producer = AIOKafkaProducer(
                **client_options(self.settings),
                acks="all",
                enable_idempotence=True,
                max_request_size=self.settings.max_message_bytes,
                linger_ms=5,
            )
            await self._producer.start()
        except BaseException as exc:
            await self.close()
            raise self._unreachable(exc) from exc

    def _unreachable(self, exc: BaseException) -> BaseException:
        if isinstance(exc, (KafkaConnectionError, OSError)):
            where = self.settings.kafka_bootstrap
            return BrokerUnavailable(f"cannot reach Kafka at {where}: {exc} (is it running? `memstream up`)")
        return exc

    async def _replies(self) -> None:
        """Start reading the reply topic from its end (once), before the first request is sent."""
        async with self._replies_lock:
            if self._reader is not None:
                return
            try:
                self._consumer = AIOKafkaConsumer(
                    **client_options(self.settings),
                    enable_auto_commit=False,
                    fetch_max_wait_ms=20,
                    max_partition_fetch_bytes=self.settings.max_message_bytes,
                    fetch_max_bytes=self.settings.max_message_bytes,
                )
                await self._consumer.start()
                tps = [TopicPartition(self.reply_topic, p) for p in await self._partitions(self.reply_topic)]
                self._consumer.assign(tps)
                await self._consumer.seek_to_end(*tps)
                for tp in tps:  # resolve the end position now, before any request is sent
                    await self._consumer.position(tp)
            except BaseException as exc:
                if self._consumer is not None:
                    await self._consumer.stop()
                    self._consumer = None
                raise self._unreachable(exc) from exc
            self._reader = asyncio.create_task(self._read_replies())

    async def close(self) -> None:
        self.tracing.flush()  # the spans of what this client produced
        if self._reader:
            self._reader.cancel()
            self._reader = None
        for waiting in self._waiting.values():
            waiting.cancel()
        for _, _, forgetting in self._forgets.values():
            forgetting.cancel()
        if self._consumer:
            await self._consumer.stop()
            self._consumer = None
        if self._producer:
            await self._producer.stop()
            self._producer = None

    @property
    def producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise MemstreamError("the client is not started: use `async with AsyncMemoryClient(...)` or start()")
        return self._producer

    async def _partitions(self, topic: str) -> set[int]:
        try:
            return await asyncio.wait_for(self.producer.partitions_for(topic), 30)
        except asyncio.TimeoutError:
            raise MemstreamError(
                f"topic {topic} does not exist: is memstream up (`memstream up`, or create_topics=True)?"
            ) from None

    async def _send(
        self, topic: str, key: bytes | None, value: bytes, partition: int | None = None, *, traced: str | None = None
    ) -> Awaitable:
        """Enqueue one record; the returned future resolves once the broker has it (acks=all).
        ``traced``: the record starts a trace (a span of that name, whose context its headers carry)."""
        headers = None
        if traced and self.tracing.enabled:
            attributes = {"messaging.system": "kafka", "messaging.destination.name": topic}
            if key and b"/" in key:
                attributes["memstream.tenant_id"] = key.split(b"/", 1)[0].decode("utf-8", "replace")
            with self.tracing.span(traced, kind=SpanKind.PRODUCER, attributes=attributes) as span:
                headers = self.tracing.headers(span)
        try:
            return await self.producer.send(topic, key=key, value=value, partition=partition, headers=headers)
        except KafkaError as exc:
            raise BrokerUnavailable(f"cannot send to {topic}: {exc}") from exc

    @staticmethod
    async def _acked(futures: list[Awaitable]) -> None:
        try:
            await asyncio.gather(*futures)
        except KafkaError as exc:
            raise BrokerUnavailable(f"the broker did not acknowledge: {exc}") from exc

    # --- writing -------------------------------------------------------------------------------

    async def remember(
        self, turns: Iterable[Turn | Mapping[str, Any]], *, on_sent: Callable[[Turn], None] | None = None
    ) -> int:
        """Produce turns onto ``memory.turns``, keyed ``tenant/conversation`` (a conversation stays on
        one partition, in order), and return once the broker has acknowledged all of them. Sent in
        batches of ``batch_size``; a redelivered turn (same ids) is stored once."""
        topic = self.settings.topic(Topic.TURNS)
        sent = 0
        pending: list[Awaitable] = []
        for raw in turns:
            turn = as_turn(raw)
            pending.append(await self._send(topic, turn.key.encode(), turn.to_bytes(), traced="memstream.remember"))
            if on_sent:
                on_sent(turn)
            if len(pending) >= self.batch_size:
                await self._acked(pending)
                sent += len(pending)
                pending = []
        await self._acked(pending)
        return sent + len(pending)

    async def ingest(self, mapped: Mapped, *, source: str) -> IngestOutcome:
        """Put chat-platform events, as ``memstream.platforms`` mapped them, on the broker: turns onto
        ``memory.turns``, an edit's old version and a deletion as forgets (not waited for: they
        travel behind the turns they name), malformed events onto the dead-letter topic with their
        reason (``source`` says where they came from, e.g. ``slack:webhook``)."""
        from memstream.platforms import TurnRemoval

        outcome = IngestOutcome(skipped=dict(mapped.skipped))
        turns = [item for item in mapped.items if isinstance(item, Turn)]
        outcome.turns = await self.remember(turns)
        for item in mapped.items:
            if isinstance(item, TurnRemoval):
                done = await self.forget(
                    tenant_id=item.tenant_id,
                    conversation_id=item.conversation_id,
                    turn_ids=item.turn_ids,
                    before=item.before,
                    wait=False,
                )
                outcome.forgets.append(done.forget_id)
        dlq = self.settings.topic(Topic.DLQ)
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
        await self._acked([await self._send(dlq, None, letter.to_bytes()) for letter in letters])
        outcome.dead_letters = len(letters)
        return outcome

    async def send_raw(self, topic: str, key: bytes | None, value: bytes) -> None:
        """One record as it is (tests and benches that feed malformed input)."""
        await self._acked([await self._send(topic, key, value, traced="memstream.send_raw")])

    async def flush(self, conversations: Iterable[tuple[str, str]]) -> int:
        """Write what the given ``(tenant_id, conversation_id)`` conversations hold in their sensory
        window and short-term buffer now, instead of when they next idle or fill (a session end does
        not flush: short sessions share an extraction call). Send it once the workers have consumed
        the conversation's turns (the tick travels on ``memory.turns.compressed``, behind the turns
        the compress stage has passed on). Returns the ticks sent."""
        topic = self.settings.topic(Topic.TURNS_COMPRESSED)
        now = datetime.now(timezone.utc)
        ticks = [
            WindowTick(tenant_id=tenant, conversation_id=conversation, sent_at=now, force=True)  # type: ignore[arg-type]
            for tenant, conversation in sorted(set(conversations))
        ]
        await self._acked([await self._send(topic, t.key.encode(), t.to_bytes()) for t in ticks])
        return len(ticks)

    async def consolidate(
        self, *, tenant_id: str | None = None, conversation_id: str | None = None, scope: ConsolidationScope = "pending"
    ) -> int:
        """Ask the consolidate stage to run now (sleep time on demand): keyed to the conversation's
        partition, or, without one, a copy on every partition. Returns the messages sent."""
        command = ConsolidateCommand(
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            reason="command",
            requested_at=datetime.now(timezone.utc),  # type: ignore[arg-type]
            scope=scope,
        )
        topic = self.settings.topic(Topic.CONTROL)
        partitions: list[int | None] = [None] if conversation_id else [p for p in sorted(await self._partitions(topic))]
        futures = [await self._send(topic, command.key.encode(), command.to_bytes(), p) for p in partitions]
        await self._acked(futures)
        return len(futures)

    async def forget(
        self,
        *,
        tenant_id: str,
        conversation_id: str | None = None,
        speaker: str | None = None,
        turn_ids: Iterable[str] = (),
        before: datetime | None = None,
        wait: bool = True,
        timeout_s: float = 300.0,
    ) -> ForgetOutcome:
        """Forget every turn of the scope with an event time up to ``before`` (default: now) and
        everything derived from it. With ``wait`` it returns once every stage has (the store, the
        windows, the buffers, the tables) with what each removed; without, once the request is on
        the broker. A forget without a conversation goes to every partition, and each copy replies."""
        forget = Forget(
            forget_id=uuid.uuid4().hex,
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            speaker=speaker,
            turn_ids=list(turn_ids),
            requested_at=before or datetime.now(timezone.utc),  # type: ignore[arg-type]
            reply_topic=self.reply_topic,
        )
        control = self.settings.topic(Topic.CONTROL)
        partitions: list[int | None] = (
            [None] if conversation_id else [p for p in sorted(await self._partitions(control))]
        )
        forget.parts = len(partitions)
        fut: asyncio.Future[list[ForgetReply]] = asyncio.get_running_loop().create_future()
        if wait:
            await self._replies()
            self._forgets[forget.forget_id] = (forget.parts, [], fut)
        await self._acked([await self._send(control, forget.key.encode(), forget.to_bytes(), p) for p in partitions])
        if not wait:
            return ForgetOutcome(forget.forget_id, forget.parts, done=False)
        try:
            replies = await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            self._forgets.pop(forget.forget_id, None)
            raise QueryTimeout(
                f"forget {forget.forget_id} not done within {timeout_s:.0f}s: are workers running every stage?"
            ) from None
        counts: dict[str, int] = {}
        retained: dict[str, datetime] = {}
        for r in replies:
            for k, n in r.counts.items():
                counts[k] = counts.get(k, 0) + n
            for copy in r.retained:
                retained[copy.topic] = max(retained.get(copy.topic, copy.until), copy.until)
        return ForgetOutcome(forget.forget_id, forget.parts, counts, retained, replies)

    # --- reading -------------------------------------------------------------------------------

    async def ask(
        self,
        question: str,
        *,
        tenant_id: str,
        conversation_id: str,
        profile: Profile | str = "auto",
        k: int | None = None,
        max_tokens: int | None = None,
        answer: bool = True,
        question_time: datetime | None = None,
        timeout_s: float | None = None,
        raise_on_error: bool = True,
    ) -> Reply:
        """Send a query and wait for its reply. The query carries the deadline (now + the timeout):
        the worker cuts its LLM calls to fit, so a slow model costs the answer, not the reply. An
        error reply raises ``ReplyError`` (or comes back as it is with ``raise_on_error=False``)."""
        timeout = timeout_s or self.settings.query_timeout_s
        sent_at = datetime.now(timezone.utc)
        query = Query(
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            correlation_id=uuid.uuid4().hex,
            reply_topic=self.reply_topic,
            question=question,
            question_time=question_time,
            profile=profile,  # type: ignore[arg-type]
            k=k,
            max_tokens=max_tokens,
            answer=answer,
            sent_at=sent_at,  # type: ignore[arg-type]
            deadline=sent_at + timedelta(seconds=timeout),  # type: ignore[arg-type]
        )
        reply = await self._request(self.settings.topic(Topic.QUERIES), query.key, query, timeout, "memstream.ask")
        assert isinstance(reply, Reply)
        if raise_on_error and not reply.ok:
            raise ReplyError(reply)
        return reply

    async def read(
        self,
        read: ReadKind,
        *,
        tenant_id: str,
        conversation_id: str | None = None,
        point_id: str | None = None,
        cursor: int = 0,
        limit: int = 500,
        timeout_s: float | None = None,
    ) -> ReadReply:
        """What memory holds, read by the query stage over request/reply (workers keep running; the
        store is theirs): ``conversations`` of the tenant, a ``timeline`` page of a conversation, the
        ``lineage`` of one memory, an ``export`` page. An error reply raises ``ReadError``."""
        request = ReadRequest(
            read=read,
            tenant_id=tenant_id,
            conversation_id=conversation_id,
            point_id=point_id,
            cursor=cursor,
            limit=limit,
            correlation_id=uuid.uuid4().hex,
            reply_topic=self.reply_topic,
            sent_at=datetime.now(timezone.utc),  # type: ignore[arg-type]
        )
        timeout = timeout_s or self.settings.query_timeout_s
        reply = await self._request(self.settings.topic(Topic.QUERIES), request.key, request, timeout, "memstream.read")
        assert isinstance(reply, ReadReply)
        if not reply.ok:
            raise ReadError(reply)
        return reply

    async def export_remote(
        self, *, tenant_id: str, conversation_id: str | None = None, page: int = 2000
    ) -> AsyncIterator[dict[str, Any]]:
        """Every memory of the scope, page by page over request/reply (beside running workers)."""
        cursor: int | None = 0
        while cursor is not None:
            reply = await self.read(
                "export", tenant_id=tenant_id, conversation_id=conversation_id, cursor=cursor, limit=page
            )
            for record in reply.records:
                yield record
            cursor = reply.next_cursor

    async def _request(
        self, topic: str, key: str, payload: Query | ReadRequest, timeout: float, span: str
    ) -> Reply | ReadReply:
        await self._replies()
        fut: asyncio.Future[Reply | ReadReply] = asyncio.get_running_loop().create_future()
        self._waiting[payload.correlation_id] = fut
        try:
            await self._acked([await self._send(topic, key.encode(), payload.to_bytes(), traced=span)])
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise QueryTimeout(
                f"no reply to {payload.kind} {payload.correlation_id} within {timeout:.0f}s on {self.reply_topic}: "
                "is a worker running the 'query' stage?"
            ) from None
        finally:
            self._waiting.pop(payload.correlation_id, None)

    async def _read_replies(self) -> None:
        assert self._consumer is not None
        while True:
            batch = await self._consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    try:
                        reply = decode_message(Topic.REPLIES, record.value)
                    except SchemaError:
                        continue
                    if isinstance(reply, ForgetReply):
                        self._forget_part(reply)
                        continue
                    assert isinstance(reply, (Reply, ReadReply))
                    if isinstance(reply, Reply):
                        reply._trace_id = Tracing.trace_id_of(record.headers)  # the question's trace
                    fut = self._waiting.get(reply.correlation_id)
                    if fut and not fut.done():
                        fut.set_result(reply)

    def _forget_part(self, reply: ForgetReply) -> None:
        waiting = self._forgets.get(reply.forget_id)
        if waiting is None:
            return
        parts, got, fut = waiting
        if all(r.part != reply.part for r in got):  # a redelivered part counts once
            got.append(reply)
        if len(got) >= parts and not fut.done():
            self._forgets.pop(reply.forget_id, None)
            fut.set_result(sorted(got, key=lambda r: r.part))


async def wait_written(
    settings: Settings,
    reading: Mapping[str, Iterable[str]],
    conversations: Iterable[tuple[str, str]],
    *,
    timeout_s: float = 300.0,
    progress=None,
) -> float:
    """Wait until drained, flush what ``conversations`` still hold in their windows and buffers (a
    session end does not), and wait again: then every turn of theirs is in memory. Returns when
    (``time.monotonic()``) the last wait saw the work done."""
    drained = await wait_drained(settings, reading, timeout_s=timeout_s, progress=progress)
    conversations = set(conversations)
    if not conversations:
        return drained
    async with AsyncMemoryClient(settings) as client:
        await client.flush(conversations)
    return await wait_drained(settings, reading, timeout_s=timeout_s, progress=progress)


def _blocking(
    method: Callable[Concatenate[AsyncMemoryClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[MemoryClient, P], T]:
    """``MemoryClient``'s version of an ``AsyncMemoryClient`` method: the same call, blocking."""

    @functools.wraps(method)
    def call(self: MemoryClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._client, *args, **kwargs))

    return call


class MemoryClient:
    """The SDK for synchronous code: ``AsyncMemoryClient``'s methods, blocking, on a private event
    loop thread (safe to call from several threads; calls run one at a time on that loop)."""

    def __init__(self, settings: Settings | None = None, **options: Any):
        self._client = AsyncMemoryClient(settings, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def settings(self) -> Settings:
        return self._client.settings

    def __enter__(self) -> MemoryClient:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memstream-client", daemon=True)
        self._thread.start()
        try:
            self._run(self._client.start())
        except BaseException:
            self._stop_loop()
            raise

    def close(self) -> None:
        if self._loop is None:
            return
        try:
            self._run(self._client.close())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
        self._loop = self._thread = None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            coro.close()
            raise MemstreamError("the client is not started: use `with MemoryClient(...)` or start()")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # AsyncMemoryClient's calls, blocking: each runs on the client's loop thread and its result (or
    # error) comes back here; signatures and docs are the async ones.
    remember = _blocking(AsyncMemoryClient.remember)
    ingest = _blocking(AsyncMemoryClient.ingest)
    ask = _blocking(AsyncMemoryClient.ask)
    forget = _blocking(AsyncMemoryClient.forget)
    read = _blocking(AsyncMemoryClient.read)
    flush = _blocking(AsyncMemoryClient.flush)
    consolidate = _blocking(AsyncMemoryClient.consolidate)


__all__ = [
    "AsyncMemoryClient",
    "BrokerUnavailable",
    "ForgetOutcome",
    "IngestOutcome",
    "MemoryClient",
    "MemstreamError",
    "QueryTimeout",
    "ReplyError",
    "Reply",
    "Turn",
]
