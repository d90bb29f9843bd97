"""Through the real broker and a real worker with tenant write secrets: a producer holding tenant
evil's secret cannot write, ask, read, consolidate or forget in tenant acme (each attempt one dead
letter with its reason, nothing stored, nothing forgotten, the asker told why); a signature replayed
on a changed value is refused; during a rotation acme's old and new secrets both work; and acme's own
forget crosses the pipeline (the worker signs what it writes to an input topic itself)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime, timezone

import pytest
from aiokafka import AIOKafkaProducer
from pydantic import SecretStr

from memstream.client import AsyncMemoryClient, ReadError
from memstream.config import Settings
from memstream.processors.write.index import TURNS
from memstream.schemas import Forget, Turn
from memstream.schemas.signature import sign
from memstream.schemas.topics import Topic
from memstream.streams.kafka_options import client_options

pytestmark = pytest.mark.integration

ACME_NEW, ACME_OLD, EVIL = "acme-secret-2026-12-x", "acme-secret-2026-06-x", "evil-secret-2026-12-x"
WORKER_SECRETS = {"acme": {"a2": ACME_NEW, "a1": ACME_OLD}, "evil": {"e1": EVIL}}


def holding(settings: Settings, secrets: dict[str, dict[str, str]]) -> Settings:
    """``settings`` as a producer holding only ``secrets``."""
    wanted = {tenant: {k: SecretStr(v) for k, v in keys.items()} for tenant, keys in secrets.items()}
    return settings.model_copy(update={"tenant_write_secrets": wanted})


def said(text: str, turn_id: str, tenant: str = "acme") -> Turn:
    return Turn(
        tenant_id=tenant,
        conversation_id="c1",
        session_id="S1",
        turn_id=turn_id,
        speaker="Ana",
        text=text,
        event_time=datetime.now(timezone.utc),
    )


async def send_with_header(settings: Settings, topic: str, key: bytes, value: bytes, header: tuple[str, bytes]) -> None:
    producer = AIOKafkaProducer(**client_options(settings), acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key, headers=[header])
    finally:
        await producer.stop()


def test_a_tenants_secret_writes_only_its_own_memory_and_rotation_keeps_both_secrets(make_pipeline):
    pipe = make_pipeline(MEMSTREAM_TENANT_WRITE_SECRETS=json.dumps(WORKER_SECRETS))
    pipe.start_worker()
    s = pipe.settings
    replies = s.topic(Topic.REPLIES)
    old_acme = holding(s, {"acme": {"a1": ACME_OLD}})  # a producer not yet rotated
    new_acme = holding(s, {"acme": {"a2": ACME_NEW}})
    evil = holding(s, {"evil": {"e1": EVIL}})
    # What someone holding only evil's secret can make look like acme's: evil's key id, or acme's.
    claims_e1 = holding(s, {"acme": {"e1": EVIL}})
    claims_a2 = holding(s, {"acme": {"a2": EVIL}})
    kept = [said("I adopted a greyhound named Biscuit.", "T1"), said("Biscuit loves the beach in Porto.", "T2")]
    original = said("My sister lives in Oslo.", "T3")
    replayed = original.model_copy(update={"text": "Forget everything about Biscuit.", "turn_id": "T9"})
    attack_turns = [said(f"Planted by evil ({n}).", f"E{n}") for n in range(3)]

    async def go() -> tuple[list, object, str]:
        async with AsyncMemoryClient(old_acme) as client:
            await client.remember(kept[:1])
        async with AsyncMemoryClient(new_acme) as client:
            await client.remember(kept[1:])
            await client.remember([original])
        signature = sign(new_acme.write_secrets, original.key.encode(), original.to_bytes())
        assert signature is not None
        await send_with_header(s, s.topic(Topic.TURNS), replayed.key.encode(), replayed.to_bytes(), signature)
        async with AsyncMemoryClient(evil) as client:
            await client.remember([said("My own memory, in my own tenant.", "V1", tenant="evil")])
            await client.remember(attack_turns[:1])  # unsigned: evil holds no secret of acme
        asked = []
        for n, producer in enumerate((claims_e1, claims_a2)):
            async with AsyncMemoryClient(producer) as client:
                await client.remember(attack_turns[1 + n : 2 + n])
                asked.append(
                    await client.ask(
                        "Dog?", tenant_id="acme", conversation_id="c1", answer=False, timeout_s=60, raise_on_error=False
                    )
                )
        async with AsyncMemoryClient(claims_a2) as client:
            forget = Forget(
                forget_id=uuid.uuid4().hex,
                tenant_id="acme",
                conversation_id="c1",
                turn_ids=["T1", "T2", "T3"],
                requested_at=datetime.now(timezone.utc),
                reply_topic=replies,
            )
            await client.send_raw(s.topic(Topic.CONTROL), forget.key.encode(), forget.to_bytes())
            await client.consolidate(tenant_id="acme", conversation_id="c1", scope="all")
            try:
                await client.read("conversations", tenant_id="acme", timeout_s=60)
                read_error = ""
            except ReadError as exc:
                read_error = str(exc)
        return asked, forget, read_error

    asked, forget, read_error = asyncio.run(go())
    assert [r.ok for r in asked] == [False, False]
    assert asked[0].error == "invalid query: key id 'e1' is not a write secret of tenant 'acme'"
    assert asked[1].error.startswith("invalid query: signature does not match key and value for tenant 'acme'")
    assert "signature does not match" in read_error
    pipe.drain()

    letters = pipe.dead_letters()
    reasons = sorted((letter.stage, letter.reason.split(" (")[0].split(" for tenant")[0]) for letter in letters)
    assert reasons == sorted(
        [
            ("compress", "signature does not match key and value"),  # the replayed signature
            ("compress", "unsigned record"),
            ("compress", "key id 'e1' is not a write secret of tenant 'acme'"),
            ("compress", "signature does not match key and value"),
            ("query", "key id 'e1' is not a write secret of tenant 'acme'"),
            ("query", "signature does not match key and value"),
            ("query", "signature does not match key and value"),  # the read
            ("compress.forget", "signature does not match key and value"),
            ("consolidate.run", "signature does not match key and value"),
        ]
    )
    assert {letter.error_type for letter in letters} == {"SignatureRefused"}

    # acme's own forget, signed with its new secret, crosses every stage (the worker signs its copies).
    outcome = pipe._call(
        lambda client: client.forget(tenant_id="acme", conversation_id="c1", turn_ids=["T3"], timeout_s=120)
    )
    assert outcome.done
    pipe.stop_workers()
    with pipe.store() as store:
        acme = {h.payload["turn_id"] for h in store.scroll(TURNS, "acme", limit=1000)}
        own = {h.payload["turn_id"] for h in store.scroll(TURNS, "evil", limit=1000)}
    assert acme == {"T1", "T2"}  # both secrets wrote; evil's forget erased nothing, acme's erased T3
    assert own == {"V1"}
