"""Creating the topics on the broker (their names: ``schemas.topics``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Sequence

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError

from memstream.config import Settings, changelog_topics
from memstream.schemas.topics import ALL_TOPICS

log = logging.getLogger(__name__)


async def ensure_topics(settings: Settings, *, stages: Sequence[str] = (), attempts: int = 30) -> None:
    """Create every memstream topic with the configured partitions (idempotent), and the compacted
    changelog topics of the tables that workers of ``stages`` keep.

    A worker creates its changelogs before it subscribes: a topic created after the consumer read
    its metadata stays unassigned until the next metadata refresh (5 minutes), and meanwhile faust
    fails every write to that table ("changelog topic ... has 0 partitions")."""
    for attempt in range(attempts):
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            wanted = []
            for name in ALL_TOPICS:
                full = settings.topic(name)
                if full in existing:
                    continue
                config = {"max.message.bytes": str(settings.max_message_bytes)}
                wanted.append(
                    NewTopic(full, num_partitions=settings.topic_partitions, replication_factor=1, topic_configs=config)
                )
            for full in changelog_topics(settings.topic_prefix, stages):
                if full not in existing:
                    wanted.append(
                        NewTopic(
                            full,
                            num_partitions=settings.topic_partitions,
                            replication_factor=1,
                            topic_configs={
                                "cleanup.policy": "compact",
                                "max.message.bytes": str(settings.max_message_bytes),
                            },
                        )
                    )
            if wanted:
                try:
                    await admin.create_topics(wanted)
                except TopicAlreadyExistsError:
                    pass
                log.info("created topics: %s", ", ".join(t.name for t in wanted))
            return
        except KafkaConnectionError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(1.0)
        finally:
            await admin.close()
