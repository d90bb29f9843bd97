"""memstream on a 3-broker Kafka cluster: the topics it creates are replicated as configured (3
replicas, 2 in sync), and with one broker killed (kill -9) the SDK's producer (acks=all) still
writes and a consumer group still reads; the broker then restarts on its storage and every
partition is back to 3 in-sync replicas."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timezone

import orjson
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from memstream.client import AsyncMemoryClient
from memstream.config import Settings
from memstream.schemas.topics import ALL_TOPICS
from memstream.streams.kafka_options import client_options
from memstream.streams.topics import ensure_topics
from memstream.topology import changelog_topics

from .conftest import KafkaCluster

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

TURNS = 24
REJOIN_TIMEOUT_S = 60.0


async def describe(settings: Settings, names: list[str]) -> dict[str, list[dict]]:
    """Each topic's partitions as the cluster's metadata has them (leader, replicas, isr)."""
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        return {t["topic"]: t["partitions"] for t in await admin.describe_topics(names)}
    finally:
        await admin.close()


async def min_insync(settings: Settings, names: list[str]) -> dict[str, str]:
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        resources = [ConfigResource(ConfigResourceType.TOPIC, n, configs={"min.insync.replicas": None}) for n in names]
        out: dict[str, str] = {}
        for response in await admin.describe_configs(resources):
            for _code, _message, _type, name, entries, *_ in response.resources:
                out[name] = {e[0]: e[1] for e in entries}.get("min.insync.replicas", "")
        return out
    finally:
        await admin.close()


async def consume_all(settings: Settings, topic: str, wanted: set[str], timeout_s: float = 60.0) -> set[str]:
    """Read ``topic`` from the start in a fresh consumer group (the group coordinator must work while
    a broker is down) until every turn id of ``wanted`` was seen, and commit."""
    consumer = AIOKafkaConsumer(
        topic,
        **client_options(settings),
        group_id=f"{settings.topic_prefix}-reader",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + timeout_s
        while not wanted <= seen and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                seen.update(orjson.loads(r.value)["turn_id"] for r in records if r.value)
        await consumer.commit()
    finally:
        await consumer.stop()
    return seen


def test_replicated_topics_survive_a_broker_killed_and_rejoin(
    kafka_cluster: Settings, kafka_cluster_nodes: KafkaCluster
) -> None:
    t0 = time.monotonic()
    settings = kafka_cluster.model_copy(update={"topic_prefix": f"rc{uuid.uuid4().hex[:8]}"})
    names = [settings.topic(t) for t in ALL_TOPICS] + changelog_topics(settings.topic_prefix, ["segment", "stm"])
    turns_topic = settings.topic("turns")

    async def created() -> tuple[dict[str, list[dict]], dict[str, str]]:
        await ensure_topics(settings, stages=["segment", "stm"])  # memstream's own topic creation
        for _ in range(50):  # KRaft applies new topics through its metadata log: a describe may lag
            partitions, insync = await describe(settings, names), await min_insync(settings, names)
            # A topic may be described before its partitions are: wait for all of them too.
            complete = all(len(parts) == settings.topic_partitions for parts in partitions.values())
            if set(partitions) == set(names) and complete and set(insync.values()) == {"2"}:
                break
            await asyncio.sleep(0.2)
        return partitions, insync

    partitions, insync = asyncio.run(created())
    assert set(partitions) == set(names)
    for name, parts in partitions.items():
        assert len(parts) == settings.topic_partitions, name
        assert all(len(p["replicas"]) == 3 for p in parts), (name, parts)
    assert insync == {name: "2" for name in names}

    # Kill the broker that leads partition 0 of the turns topic (its writes must move to another).
    victim = next(p["leader"] for p in partitions[turns_topic] if p["partition"] == 0)
    kafka_cluster_nodes.kill(victim)
    assert kafka_cluster_nodes.run("node-pid", str(victim), check=False).returncode == 3
    try:
        ids = [f"t{i}" for i in range(TURNS)]
        now = datetime.now(timezone.utc)
        turns = [
            {
                "tenant_id": "acme",
                "conversation_id": f"c{i % 8}",  # eight keys: spread over the partitions
                "session_id": "s1",
                "turn_id": turn_id,
                "speaker": "Ann",
                "text": f"turn {turn_id} written while broker {victim} is down",
                "event_time": now.isoformat(),
            }
            for i, turn_id in enumerate(ids)
        ]

        async def write_and_read() -> set[str]:
            async with AsyncMemoryClient(settings) as client:  # acks=all, idempotent
                assert await client.remember(turns) == TURNS
            return await consume_all(settings, turns_topic, set(ids))

        assert asyncio.run(write_and_read()) == set(ids)
        after_kill = asyncio.run(describe(settings, [turns_topic]))[turns_topic]
        assert all(victim not in p["isr"] for p in after_kill), after_kill  # written with 2 in sync
        assert all(p["leader"] != victim for p in after_kill)
    finally:
        kafka_cluster_nodes.start(victim)

    async def rejoined() -> dict[str, list[dict]]:
        deadline = time.monotonic() + REJOIN_TIMEOUT_S
        while True:
            partitions = await describe(settings, names)
            if all(len(p["isr"]) == 3 for parts in partitions.values() for p in parts):
                return partitions
            if time.monotonic() > deadline:
                return partitions
            await asyncio.sleep(0.5)

    partitions = asyncio.run(rejoined())
    short = {n: [p["partition"] for p in parts if len(p["isr"]) < 3] for n, parts in partitions.items()}
    assert not any(short.values()), f"not back to 3 in-sync replicas after {REJOIN_TIMEOUT_S:.0f}s: {short}"
    status = kafka_cluster_nodes.run("status")
    assert "3 of 3 brokers running" in status.stdout
    assert time.monotonic() - t0 < 120


def test_topics_are_ensured_while_a_broker_is_down(kafka_cluster: Settings, kafka_cluster_nodes: KafkaCluster) -> None:
    """A worker starting while one broker of three is down (killed, not yet fenced out of the
    metadata) gets its topics: every admin request goes to a random broker, and one sent to the
    dead one is tried again elsewhere instead of crashing the worker at start-up (the 20-minute
    chaos --cluster run had 9 such exits)."""
    prefixes = [f"bd{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for prefix in prefixes:  # topics that exist: the path of every restart (list, describe, configs)
        asyncio.run(ensure_topics(kafka_cluster.model_copy(update={"topic_prefix": prefix}), stages=["segment"]))
    kafka_cluster_nodes.kill(2)
    try:

        async def ensure_many() -> None:
            for _ in range(4):  # about 24 requests, each to a random broker: the dead one is drawn
                for prefix in prefixes:
                    settings = kafka_cluster.model_copy(update={"topic_prefix": prefix})
                    await ensure_topics(settings, stages=["segment"])

        asyncio.run(ensure_many())
    finally:
        kafka_cluster_nodes.start(2)
