"""A worker's changelog topics exist before it subscribes.

On a busy machine, faust created the consolidation table's changelog after the consumer had read
the topic metadata: its partitions were never assigned (41 of 45), and every card written to that
table went to the dead-letter topic ("changelog topic ... has 0 partitions")."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from memstream.streams.topics import ensure_topics
from memstream.topology import STAGES, changelog_topics

pytestmark = pytest.mark.integration


def test_ensure_topics_creates_the_compacted_changelogs_of_a_stage_set(kafka):
    settings = kafka.model_copy(update={"topic_prefix": f"t{uuid.uuid4().hex[:10]}"})
    wanted = changelog_topics(settings.topic_prefix, list(STAGES))

    async def described() -> dict[str, tuple[int, str]]:
        await ensure_topics(settings, stages=list(STAGES))
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
        await admin.start()
        try:
            topics = await admin.describe_topics(wanted)
            configs = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in wanted])
        finally:
            await admin.close()
        policy = {}
        for response in configs:
            for resource in response.resources:
                name, entries = resource[3], resource[4]
                policy[name] = next((e[1] for e in entries if e[0] == "cleanup.policy"), None)
        return {t["topic"]: (len(t["partitions"]), policy.get(t["topic"])) for t in topics}

    expected = {t: (settings.topic_partitions, "compact") for t in wanted}
    for _ in range(25):  # KRaft applies a new topic's config through its metadata log: a describe may lag
        found = asyncio.run(described())
        if found == expected:
            break
    assert found == expected


async def topic_config(settings, names: list[str]) -> dict[str, dict[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names])
    finally:
        await admin.close()
    return {r[3]: {e[0]: e[1] for e in r[4]} for response in responses for r in response.resources}


def test_topics_get_the_configured_retention_and_existing_ones_are_brought_to_it(kafka):
    """Raw text lives in the topics until retention removes it (a forget cannot delete records):
    every delete-policy topic gets MEMSTREAM_TOPIC_RETENTION_S, also when it existed before."""
    settings = kafka.model_copy(update={"topic_prefix": f"t{uuid.uuid4().hex[:10]}", "topic_retention_s": 86400.0})
    turns, audit = settings.topic("turns"), settings.topic("audit")
    changelog = changelog_topics(settings.topic_prefix, ["segment"])[0]
    day, two_days = str(86400 * 1000), str(2 * 86400 * 1000)

    async def settled(check) -> dict:
        # KRaft applies a topic's config through its metadata log: a describe right after may be stale.
        for _ in range(50):
            config = await topic_config(settings, [turns, audit, changelog])
            if check(config):
                return config
            await asyncio.sleep(0.2)
        return config

    async def go() -> tuple[dict, dict]:
        await ensure_topics(settings, stages=["segment"])
        first = await settled(lambda c: c[turns].get("retention.ms") == day)
        longer = settings.model_copy(update={"topic_retention_s": 2 * 86400.0})
        await ensure_topics(longer, stages=["segment"])  # the topics exist: their config is aligned
        return first, await settled(lambda c: c[turns].get("retention.ms") == two_days)

    first, second = asyncio.run(go())
    assert first[turns]["cleanup.policy"] == "delete" and first[turns]["retention.ms"] == day
    assert int(first[turns]["segment.ms"]) < int(day)
    assert first[audit]["cleanup.policy"] == "compact" and first[audit]["max.compaction.lag.ms"] == day
    assert first[changelog]["cleanup.policy"] == "compact" and first[changelog]["max.compaction.lag.ms"] == day
    assert second[turns]["retention.ms"] == two_days
    assert second[changelog]["max.compaction.lag.ms"] == two_days
    assert first[changelog]["delete.retention.ms"] == str(86400 * 1000 // 7)
    assert second[changelog]["delete.retention.ms"] == str(2 * 86400 * 1000 // 7)
    assert second[changelog]["cleanup.policy"] == "compact"  # the whole config was sent, not reset
    assert second[turns]["max.message.bytes"] == str(settings.max_message_bytes)
