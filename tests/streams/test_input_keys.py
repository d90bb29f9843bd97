"""The input stages (compress on turns and control, consolidate on control, query on queries) refuse
a record whose key is not its payload's, before anything of it is kept; a bad control message is
refused by one consumer group only (no Kafka: the stages' handlers with a stand-in context)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.schemas import ConsolidateCommand, DeadLetter, Forget, Query, ReadRequest
from memstream.schemas.keys import KeyMismatch, check_key
from memstream.schemas.signature import check_signature
from memstream.schemas.topics import ReplyTopicRefused, reply_topic_problem
from memstream.streams.runtime.handling import Handling, raw_key
from memstream.streams.runtime.output import Output
from memstream.streams.stages import compress, consolidate, query
from memstream.streams.stages.api import Handler, Record, StageResult
from memstream.tracing import Tracing
from tests.factories import turn

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


class StandIn:
    """What a stage's ``register`` uses of a StageContext: its agents are kept to be called."""

    def __init__(self, secrets: dict[str, dict[str, str]] | None = None) -> None:
        # The key rule, not the fresh path (which needs an embedder); ``secrets``: tenant write secrets.
        self.s = Settings(fresh_turns=False, tenant_write_secrets=secrets or {})
        self.metrics = Metrics()
        self.services = SimpleNamespace(
            compressor=None,
            store=None,
            embedder=None,
            llm_for=lambda _stage: None,
            query_options=SimpleNamespace(retrieval=None, planner="rules"),
            tracing=Tracing(enabled=False),
        )
        self.agents: dict[str, Handler] = {}
        self.tables: dict[str, dict[str, Any]] = {}
        self.sent: list[tuple[str, bytes, bytes]] = []

    def agent(self, stage: str, _topic: str, handler: Handler) -> None:
        self.agents[stage] = handler

    def table(self, _stage: str, name: str) -> dict[str, Any]:
        return self.tables.setdefault(name, {})

    async def save_state(self, table: dict[str, Any], key: str, value: Any, **_: Any) -> None:
        table[key] = value

    async def send(self, topic: str, key: bytes, value: bytes, *_: Any, **__: Any) -> Any:
        self.sent.append((topic, key, value))
        return asyncio.sleep(0)

    def check_signature(self, record: Record) -> None:  # as the worker's (streams/runtime/context.py)
        if self.s.write_secrets:
            check_signature(self.s.write_secrets, record.key, record.value, record.signature)

    def handle(self, stage: str, key: bytes | None, value: bytes, signature: bytes | None = None) -> StageResult:
        return asyncio.run(self.agents[stage](Record(value, NOW.timestamp(), 0, 1, None, key, signature)))


@pytest.fixture
def ingest() -> StandIn:
    ctx = StandIn()
    compress.register(ctx)  # type: ignore[arg-type]
    return ctx


def forget(**scope: Any) -> Forget:
    return Forget(forget_id="f1", tenant_id="t1", requested_at=NOW, reply_topic="r", **scope)


def test_a_turn_keyed_by_its_conversation_goes_on_and_one_keyed_otherwise_is_refused(ingest):
    good = turn(tenant="t1", conversation="c1")
    assert len(ingest.handle("compress", b"t1/c1", good.to_bytes()).outputs) == 1
    for key, reason in [
        (b"t1/c2", "key 't1/c2' does not match the payload's 't1/c1'"),
        (None, "no key (expected 't1/c1')"),
        (b"t1/\xff", "key is not UTF-8 (expected 't1/c1')"),
    ]:
        with pytest.raises(KeyMismatch, match=reason.replace("(", r"\(").replace(")", r"\)")):
            ingest.handle("compress", key, good.to_bytes())


def test_a_wrongly_keyed_forget_leaves_no_tombstone(ingest):
    with pytest.raises(KeyMismatch):
        ingest.handle(
            "compress", b"t1/*", forget(conversation_id="c1").model_copy(update={"phase": "pipeline"}).to_bytes()
        )
    assert ingest.tables["forgets"] == {}
    ingest.handle("compress", b"t1/*", forget().model_copy(update={"phase": "pipeline"}).to_bytes())  # a broadcast copy
    assert list(ingest.tables["forgets"]) == ["0/t1"]


def test_on_control_the_ingest_group_refuses_wrongly_keyed_forgets_and_leaves_commands_alone(ingest):
    moved = ingest.handle("compress.forget", b"t1/c1", forget(conversation_id="c1").to_bytes()).outputs
    assert [o.key for o in moved] == ["t1/c1"]
    assert ingest.handle("compress.forget", b"t1/*", forget().to_bytes()).outputs[0].key == "t1/*"
    with pytest.raises(KeyMismatch, match="does not match the payload's 't1/c1'"):
        ingest.handle("compress.forget", b"t1/c2", forget(conversation_id="c1").to_bytes())
    command = ConsolidateCommand(tenant_id="t1", conversation_id="c1", requested_at=NOW)
    assert ingest.handle("compress.forget", b"x/y", command.to_bytes()).outputs == []  # the store group's


@pytest.fixture
def store_group() -> StandIn:
    ctx = StandIn()
    stage = consolidate.Consolidation(ctx)  # type: ignore[arg-type]
    ctx.agents["consolidate.run"] = stage.on_command
    return ctx


def test_on_control_the_store_group_refuses_wrongly_keyed_commands_and_skips_forgets(store_group):
    command = ConsolidateCommand(tenant_id="t1", conversation_id="c1", requested_at=NOW)
    assert store_group.handle("consolidate.run", b"t1/c1", command.to_bytes()).outputs == []  # nothing pending
    for key in (b"t1/c2", None, b"\xff"):
        with pytest.raises(KeyMismatch):
            store_group.handle("consolidate.run", key, command.to_bytes())
    broadcast = ConsolidateCommand(requested_at=NOW)
    store_group.handle("consolidate.run", b"*/*", broadcast.to_bytes())
    with pytest.raises(KeyMismatch, match="key 't1/\\*' does not match the payload's '\\*/\\*'"):
        store_group.handle("consolidate.run", b"t1/*", broadcast.to_bytes())
    # A wrongly keyed forget is the ingest group's to dead-letter: here it is skipped, never obeyed.
    erased = forget(conversation_id="c1").model_copy(update={"phase": "erased"})
    assert store_group.handle("consolidate.run", b"t1/c2", erased.to_bytes()).outputs == []


def test_a_wrongly_keyed_query_is_refused_and_its_asker_told_why():
    ctx = StandIn()
    query.register(ctx)  # type: ignore[arg-type]
    asked = Query(
        tenant_id="t1", conversation_id="c1", correlation_id="q1", reply_topic="mine", question="Dog?", sent_at=NOW
    )
    with pytest.raises(KeyMismatch):
        ctx.handle("query", b"t1/c9", asked.to_bytes())
    [(topic, key, value)] = ctx.sent
    reply = orjson.loads(value)
    assert (topic, key, reply["ok"]) == ("mine", b"q1", False)
    assert reply["error"] == "invalid query: key 't1/c9' does not match the payload's 't1/c1'"


def test_a_consumed_key_reaches_the_handler_and_a_mismatch_is_dead_lettered_once_not_retried():
    assert raw_key(None) is None and raw_key(b"t1/c1") == b"t1/c1"
    assert raw_key(bytearray(b"t1/c1")) == b"t1/c1" and raw_key("t1/c1") == b"t1/c1"
    settings, tracing, metrics = Settings(), Tracing(enabled=False), Metrics()
    output = Output(None, settings, tracing, metrics, None)  # type: ignore[arg-type]
    sent: list[tuple[str, bytes, bytes]] = []

    async def send(topic: str, key: bytes, value: bytes, *_: Any, **__: Any) -> Any:
        sent.append((topic, key, value))
        return asyncio.sleep(0)

    output.send = send  # type: ignore[method-assign]
    seen: list[bytes | None] = []

    async def handler(record: Record) -> StageResult:
        seen.append(record.key)
        check_key(record.key, turn(tenant="t1", conversation="c1"))
        return StageResult()

    message = SimpleNamespace(topic="memory.turns", partition=0, offset=3, timestamp=1.0, key=b"t1/c2", headers=[])
    handling = Handling(settings, tracing, metrics, output)
    asyncio.run(handling.run("compress", SimpleNamespace(value=b"{}", message=message), handler))
    assert seen == [b"t1/c2"]  # once: a wrong key is no failure to try again
    [(topic, key, value)] = sent
    letter = DeadLetter.from_bytes(value)
    assert (topic, key, letter.key, letter.tenant_id) == ("memory.dlq", b"t1/c2", "t1/c2", "t1")
    assert (letter.reason, letter.error_type) == ("key 't1/c2' does not match the payload's 't1/c1'", "KeyMismatch")
    assert metrics.dead_letters.labels("compress", "wrong key")._value.get() == 1  # no key in the label


def test_a_wrongly_keyed_read_is_refused_and_its_asker_told_why():
    ctx = StandIn()
    query.register(ctx)  # type: ignore[arg-type]
    asked = ReadRequest(read="conversations", tenant_id="t1", correlation_id="r1", reply_topic="mine", sent_at=NOW)
    assert asked.key == "t1/*"
    with pytest.raises(KeyMismatch):
        ctx.handle("query", b"t2/*", asked.to_bytes())
    [(topic, key, value)] = ctx.sent
    reply = orjson.loads(value)
    assert (topic, key, reply["kind"], reply["ok"]) == ("mine", b"r1", "read_reply", False)
    assert reply["error"] == "key 't2/*' does not match the payload's 't1/*'"


@pytest.mark.parametrize(
    "topic", ["memory.record", "memory.turns", "memory-memstream-segmenter-changelog", "__consumer_offsets"]
)
def test_a_question_read_or_forget_naming_memstreams_own_topic_to_answer_on_is_refused_and_answered_nowhere(topic):
    ctx = StandIn()
    query.register(ctx)  # type: ignore[arg-type]
    compress.register(ctx)  # type: ignore[arg-type]
    asked = Query(
        tenant_id="t1", conversation_id="c1", correlation_id="q1", reply_topic=topic, question="?", sent_at=NOW
    )
    read = ReadRequest(read="conversations", tenant_id="t1", correlation_id="r1", reply_topic=topic, sent_at=NOW)
    request = Forget(forget_id="f1", tenant_id="t1", requested_at=NOW, reply_topic=topic)
    for stage, key, payload in [
        ("query", b"t1/c1", asked),
        ("query", b"t1/*", read),
        ("compress.forget", b"t1/*", request),
    ]:
        with pytest.raises(ReplyTopicRefused, match="one of memstream's or Kafka's own topics"):
            ctx.handle(stage, key, payload.to_bytes())
    moving = request.model_copy(update={"phase": "pipeline"})
    with pytest.raises(ReplyTopicRefused):
        ctx.handle("compress", b"t1/*", moving.to_bytes())
    assert ctx.sent == [] and ctx.tables["forgets"] == {}  # nothing written there, no tombstone
    ok = Query(
        tenant_id="t1",
        conversation_id="c1",
        correlation_id="q2",
        reply_topic="memory-replies",
        question="?",
        sent_at=NOW,
    )
    assert (
        reply_topic_problem("memory", ok.reply_topic) is None
        and reply_topic_problem("memory", "memory.replies") is None
    )
