"""With tenant write secrets, the input stages (compress on turns and control, consolidate on control,
query on queries) act only on records signed by the tenant their key names; the worker signs what it
writes to an input topic itself (no Kafka: the stages' handlers with a stand-in context, and the
worker's output with a stand-in producer)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from memstream.config import Settings
from memstream.metrics import Metrics
from memstream.schemas import ConsolidateCommand, Forget, Query, ReadRequest
from memstream.schemas.signature import HEADER, SignatureRefused, sign, signature_problem
from memstream.streams.runtime.handling import record_of
from memstream.streams.runtime.output import Output
from memstream.streams.stages import compress, consolidate, query
from memstream.tracing import Tracing
from tests.factories import turn
from tests.streams.test_input_keys import StandIn

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
SECRETS = {"a": {"a-2": "tenant-a-secret-new", "a-1": "tenant-a-secret-old"}, "b": {"b-1": "tenant-b-secret-xyz"}}
A_ONLY = Settings(tenant_write_secrets={"a": SECRETS["a"]}).write_secrets  # what tenant A's producer holds


def signed_by(holder: dict[str, list[tuple[str, bytes]]], key: bytes, value: bytes) -> bytes | None:
    made = sign(holder, key, value)
    return made[1] if made else None


def as_a(key: bytes, value: bytes) -> bytes:
    """A B record signed with A's secret under A's key id."""
    return signed_by({"b": A_ONLY["a"]}, key, value) or b""


def forged(key: bytes, value: bytes) -> bytes:
    """A's signature, made with A's secret under B's key id: what someone holding only A's secret can send as B."""
    holder = {"b": [("b-1", A_ONLY["a"][0][1])]}
    return signed_by(holder, key, value) or b""


@pytest.fixture
def ingest() -> StandIn:
    ctx = StandIn(SECRETS)
    compress.register(ctx)  # type: ignore[arg-type]
    return ctx


def test_a_turn_signed_by_its_tenant_goes_on_and_one_signed_by_another_or_unsigned_is_refused(ingest):
    mine = turn(tenant="a", conversation="c1").to_bytes()
    assert len(ingest.handle("compress", b"a/c1", mine, signed_by(A_ONLY, b"a/c1", mine)).outputs) == 1
    theirs = turn(tenant="b", conversation="c1").to_bytes()
    with pytest.raises(SignatureRefused, match="does not match"):
        ingest.handle("compress", b"b/c1", theirs, forged(b"b/c1", theirs))
    with pytest.raises(SignatureRefused, match="not a write secret of tenant 'b'"):
        ingest.handle("compress", b"b/c1", theirs, as_a(b"b/c1", theirs))
    with pytest.raises(SignatureRefused, match="unsigned record for tenant 'b'"):
        ingest.handle("compress", b"b/c1", theirs)


def test_a_signature_replayed_on_a_changed_value_is_refused(ingest):
    original = turn(tenant="a", conversation="c1", text="I moved to Porto.").to_bytes()
    signature = signed_by(A_ONLY, b"a/c1", original)
    changed = turn(tenant="a", conversation="c1", text="I moved to Oslo.").to_bytes()
    with pytest.raises(SignatureRefused, match="does not match"):
        ingest.handle("compress", b"a/c1", changed, signature)


def test_a_forget_needs_its_tenants_signature_and_leaves_no_tombstone_otherwise(ingest):
    request = Forget(forget_id="f1", tenant_id="b", requested_at=NOW, reply_topic="r")
    value = request.to_bytes()
    for signature in (None, forged(b"b/*", value)):
        with pytest.raises(SignatureRefused):
            ingest.handle("compress.forget", b"b/*", value, signature)
        moving = request.model_copy(update={"phase": "pipeline"}).to_bytes()
        with pytest.raises(SignatureRefused):
            ingest.handle("compress", b"b/*", moving, signature and forged(b"b/*", moving))
    assert ingest.tables["forgets"] == {}
    b_signer = Settings(tenant_write_secrets={"b": SECRETS["b"]}).write_secrets
    assert ingest.handle("compress.forget", b"b/*", value, signed_by(b_signer, b"b/*", value)).outputs


def test_the_store_group_runs_only_signed_commands_and_ends_only_signed_forgets():
    ctx = StandIn(SECRETS)
    stage = consolidate.Consolidation(ctx)  # type: ignore[arg-type]
    command = ConsolidateCommand(tenant_id="b", conversation_id="c1", requested_at=NOW).to_bytes()
    with pytest.raises(SignatureRefused):
        ctx.agents["consolidate.run"] = stage.on_command
        ctx.handle("consolidate.run", b"b/c1", command, forged(b"b/c1", command))
    b_signer = Settings(tenant_write_secrets={"b": SECRETS["b"]}).write_secrets
    assert ctx.handle("consolidate.run", b"b/c1", command, signed_by(b_signer, b"b/c1", command)).outputs == []
    erased = Forget(forget_id="f1", tenant_id="b", requested_at=NOW, reply_topic="r", phase="erased").to_bytes()
    assert ctx.handle("consolidate.run", b"b/*", erased, forged(b"b/*", erased)).outputs == []  # skipped
    ended = ctx.handle("consolidate.run", b"b/*", erased, signed_by(b_signer, b"b/*", erased)).outputs
    assert [o.topic for o in ended] == ["r", "memory.audit"]


def test_a_question_or_read_signed_by_another_tenant_is_refused_and_its_asker_told_why():
    ctx = StandIn(SECRETS)
    query.register(ctx)  # type: ignore[arg-type]
    asked = Query(
        tenant_id="b", conversation_id="c1", correlation_id="q1", reply_topic="mine", question="Dog?", sent_at=NOW
    )
    value = asked.to_bytes()
    with pytest.raises(SignatureRefused):
        ctx.handle("query", b"b/c1", value, forged(b"b/c1", value))
    read = ReadRequest(read="conversations", tenant_id="b", correlation_id="r1", reply_topic="mine", sent_at=NOW)
    with pytest.raises(SignatureRefused):
        ctx.handle("query", b"b/*", read.to_bytes(), as_a(b"b/*", read.to_bytes()))
    replies = [orjson.loads(value) for _topic, _key, value in ctx.sent]
    assert [(r["ok"], r["error"].split(":")[0]) for r in replies] == [
        (False, "invalid query"),
        (False, "key id 'a-2' is not a write secret of tenant 'b'"),
    ]


def test_the_worker_signs_what_it_writes_to_an_input_topic_and_only_that():
    settings = Settings(tenant_write_secrets=SECRETS)
    sent: list[tuple[str, bytes, bytes, list]] = []

    class Topic:
        def __init__(self, name: str) -> None:
            self.name = name

        async def send(self, key: bytes, value: bytes, headers: list | None = None, **_: Any) -> Any:
            sent.append((self.name, key, value, headers or []))
            delivered = asyncio.get_running_loop().create_future()
            delivered.set_result(None)
            return delivered

    app = SimpleNamespace(topic=lambda name, **_: Topic(name))
    output = Output(app, settings, Tracing(enabled=False), Metrics(), None)  # type: ignore[arg-type]
    command = ConsolidateCommand(tenant_id="b", conversation_id="c1", requested_at=NOW).to_bytes()
    asyncio.run(output.send("memory.control", b"b/c1", command))
    asyncio.run(output.send("memory.segments", b"b/c1", command))
    asyncio.run(output.send("memory.control", b"zz/c1", command))  # a tenant without a secret: unsigned
    (_, key, value, control), (_, _, _, segments), (_, _, _, unknown) = sent
    signature = dict(control)[HEADER]
    assert signature_problem(settings.write_secrets, key, value, signature) is None
    assert HEADER not in dict(segments) and HEADER not in dict(unknown)
    # And the consumer side finds it among the record's headers.
    message = SimpleNamespace(topic="memory.control", partition=0, offset=1, timestamp=1.0, key=key, headers=control)
    assert record_of(SimpleNamespace(value=value, message=message)).signature == signature


def test_without_secrets_nothing_is_signed_or_checked():
    plain = StandIn()
    compress.register(plain)  # type: ignore[arg-type]
    value = turn(tenant="b", conversation="c1").to_bytes()
    assert len(plain.handle("compress", b"b/c1", value).outputs) == 1
