"""``AsyncMemoryClient``: the SDK's calls over the topics the workers read (writes, commands, reads),
on its producer (``kafka.py``) and its reader of the reply topic (``replies.py``)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterable, Literal, Mapping

from aiokafka import AIOKafkaProducer

from memstream.config import Settings
from memstream.schemas import ConsolidateCommand, Forget, Query, Reply, SchemaError, Turn, WindowTick
from memstream.schemas.read import ReadKind, ReadReply, ReadRequest
from memstream.schemas.topics import Topic, reply_topic_problem
from memstream.streams.lag import wait_drained
from memstream.tracing import Tracing

from .errors import MemstreamError, ReadError, ReplyError
from .history import send_history
from .ingest import put_on_broker
from .kafka import KafkaLink
from .outcomes import ForgetOutcome, IngestOutcome
from .replies import Replies

if TYPE_CHECKING:
    from memstream.platforms import Mapped

Profile = Literal["auto", "lookup", "compose", "replay"]
ConsolidationScope = Literal["pending", "all"]


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
        problem = reply_topic_problem(self.settings.topic_prefix, self.reply_topic)
        if problem:  # the workers would dead-letter every question and forget of this client
            raise MemstreamError(f"{problem}: choose another reply_topic")
        self.create_topics = create_topics
        self.batch_size = batch_size
        self.tracing = Tracing("memstream-client")  # off unless OTEL_EXPORTER_OTLP_ENDPOINT is set
        self.kafka = KafkaLink(self.settings, self.tracing)
        self.replies = Replies(self.kafka, self.reply_topic)

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
            await self.kafka.start()
        except BaseException as exc:
            await self.close()
            raise self.kafka.unreachable(exc) from exc

    async def close(self) -> None:
        self.tracing.flush()  # the spans of what this client produced
        await self.replies.close()
        await self.kafka.close()

    @property
    def producer(self) -> AIOKafkaProducer:
        return self.kafka.producer

    # --- writing -------------------------------------------------------------------------------

    async def remember(
        self, turns: Iterable[Turn | Mapping[str, Any]], *, on_sent: Callable[[Turn], None] | None = None
    ) -> int:
        """Produce turns onto ``memory.turns``, keyed ``tenant/conversation`` (a conversation stays on
        one partition, in order), and return once the broker has acknowledged all of them. Sent in
        batches of ``batch_size``; a redelivered turn (same ids) is stored once."""
        valid = (as_turn(raw) for raw in turns)
        topic = self.settings.topic(Topic.TURNS)
        return await self.kafka.send_turns(topic, valid, self.batch_size, on_sent, "memstream.remember")

    async def import_history(
        self,
        turns: Iterable[Turn | Mapping[str, Any]],
        *,
        after: str | None = None,
        on_sent: Callable[[Turn], None] | None = None,
    ) -> int:
        """Produce a history import (a chat export, an old conversation) onto ``memory.bulk.turns``: the
        workers let it into the pipeline only while no live turn or question waits, so live traffic of
        every tenant stays fast while it runs. Each conversation's turns are put in event-time order
        and numbered before its live turns (-N..-1, ``processors.write.history``); a turn its producer
        numbered keeps its position. Sending the same import again stores nothing twice; ``after``
        (``<conversation_id>/<turn_id>``, in that order) resumes one after its turns up to there were
        acknowledged. Progress: ``memstream.client.history.import_progress``. Returns, with the turns
        sent, once the broker has acknowledged every one."""
        return await send_history(self, [as_turn(raw) for raw in turns], after, on_sent)

    async def ingest(self, mapped: Mapped, *, source: str, bulk: bool = False) -> IngestOutcome:
        """Put chat-platform events, as ``memstream.platforms`` mapped them, on the broker: turns onto
        ``memory.turns``, an edit's old version and a deletion as forgets (not waited for: they
        travel behind the turns they name), malformed events onto the dead-letter topic with their
        reason (``source`` says where they came from, e.g. ``slack:webhook``). ``bulk``: the turns are
        a history import (``import_history``)."""
        return await put_on_broker(self, mapped, source, bulk)

    async def send_raw(self, topic: str, key: bytes | None, value: bytes) -> None:
        """One record as it is (tests and benches that feed malformed input)."""
        await self.kafka.publish(topic, [(key, value, None)], traced="memstream.send_raw")

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
        return await self.kafka.publish(topic, [(t.key.encode(), t.to_bytes(), None) for t in ticks])

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
        partitions = await self.kafka.targets(topic, keyed=bool(conversation_id))
        return await self.kafka.publish(topic, [(command.key.encode(), command.to_bytes(), p) for p in partitions])

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
        partitions = await self.kafka.targets(control, keyed=bool(conversation_id))
        forget.parts = len(partitions)
        if not wait:
            await self.kafka.publish(control, [(forget.key.encode(), forget.to_bytes(), p) for p in partitions])
            return ForgetOutcome(forget.forget_id, forget.parts, done=False)
        replies = await self.replies.forget(control, forget, partitions, timeout_s)
        return ForgetOutcome.of(forget.forget_id, forget.parts, replies)

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
        reply = await self.replies.request(self.settings.topic(Topic.QUERIES), query, timeout, "memstream.ask")
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
        cursor: int | None = None,
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
        reply = await self.replies.request(self.settings.topic(Topic.QUERIES), request, timeout, "memstream.read")
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
