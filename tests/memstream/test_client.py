"""The SDK's checks that need no broker."""

from __future__ import annotations

import asyncio

import pytest

from memstream.client import AsyncMemoryClient, MemoryClient, MemstreamError, ReplyError, as_turn
from memstream.config import Settings
from memstream.schemas import SchemaError
from tests import factories

# A turn as a mapping, as an SDK user may give it.
TURN = {
    "tenant_id": "acme",
    "conversation_id": "c1",
    "session_id": "S1",
    "turn_id": "D1:1",
    "speaker": "Ana",
    "text": "hello",
    "event_time": "2024-05-01T10:00:00Z",
}


def test_a_turn_given_as_a_mapping_is_validated_before_anything_is_sent():
    assert as_turn(TURN).key == "acme/c1"
    with pytest.raises(SchemaError, match="tenant_id"):
        as_turn({k: v for k, v in TURN.items() if k != "tenant_id"})


def test_a_client_used_before_it_is_started_says_so():
    with pytest.raises(MemstreamError, match="not started"):
        MemoryClient().remember([])
    with pytest.raises(MemstreamError, match="not started"):
        _ = AsyncMemoryClient().producer


def test_an_error_reply_carries_the_reply_and_its_reason():
    reply = factories.reply(ok=False, error="past its deadline")
    err = ReplyError(reply)
    assert err.reply is reply and "q1" in str(err) and "past its deadline" in str(err)


class RecordingProducer:
    """Stands in for the Kafka producer: keeps every record, knows three partitions."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes]] = []

    async def send(self, topic: str, key: bytes | None, value: bytes, **_: object) -> asyncio.Future[None]:
        self.records.append((topic, key, value))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def partitions_for(self, _topic: str) -> set[int]:
        return {0, 1, 2}


def test_every_record_the_sdk_sends_on_an_input_topic_carries_its_payloads_key():
    from memstream.config import Settings
    from memstream.platforms import map_events
    from memstream.schemas import decode_message
    from memstream.schemas.keys import check_key
    from memstream.schemas.topics import Topic

    settings = Settings()
    client = AsyncMemoryClient(settings)
    producer = RecordingProducer()
    client.kafka._producer = producer  # type: ignore[assignment]
    slack = {
        "type": "event_callback",
        "team_id": "T1",
        "event": {"type": "message", "subtype": "message_deleted", "channel": "C1", "deleted_ts": "1.2", "ts": "1.3"},
    }

    async def send_everything() -> None:
        await client.remember([TURN])
        await client.consolidate(tenant_id="acme", conversation_id="c1")
        await client.consolidate(tenant_id="acme")
        await client.consolidate()
        await client.forget(tenant_id="acme", conversation_id="c1", turn_ids=["D1:1"], wait=False)
        await client.forget(tenant_id="acme", speaker="Ana", wait=False)
        await client.ingest(map_events("slack", [slack]), source="slack:test")  # a deletion: a forget

        async def no_reader() -> None:
            return None

        client.replies.start = no_reader  # type: ignore[method-assign]
        asked = asyncio.ensure_future(client.ask("Dog?", tenant_id="acme", conversation_id="c1", timeout_s=5))
        await asyncio.sleep(0.05)
        [(correlation_id, waiting)] = client.replies.waiting.items()
        waiting.set_result(factories.reply(correlation_id=correlation_id))
        await asked

    asyncio.run(send_everything())
    inputs = {settings.topic(t): t for t in (Topic.TURNS, Topic.QUERIES, Topic.CONTROL)}
    checked = [(inputs[topic], key, value) for topic, key, value in producer.records if topic in inputs]
    assert {t for t, _, _ in checked} == set(inputs.values())
    assert len(checked) == 1 + 1 + 3 + 3 + 1 + 3 + 1 + 1  # the broadcasts: one copy per partition
    for topic, key, value in checked:
        check_key(key, decode_message(topic, value))  # type: ignore[arg-type]


def test_a_client_refuses_a_reply_topic_the_workers_would_never_answer_on():
    with pytest.raises(MemstreamError, match="'memory.record' is one of memstream's or Kafka's own topics"):
        AsyncMemoryClient(Settings(), reply_topic="memory.record")
    assert AsyncMemoryClient(Settings(), reply_topic="acme.replies").reply_topic == "acme.replies"
