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

from memstream.config import STAGES, changelog_topics
from memstream.streams.topics import ensure_topics

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
                policy[name] = next(e[1] for e in entries if e[0] == "cleanup.policy")
        return {t["topic"]: (len(t["partitions"]), policy[t["topic"]]) for t in topics}

    assert asyncio.run(described()) == {t: (settings.topic_partitions, "compact") for t in wanted}
