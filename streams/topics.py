"""Creating the topics on the broker (their names: ``schemas.topics``)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Sequence

from aiokafka import AIOKafkaClient
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError

from memstream.config import Settings, changelog_topics
from memstream.schemas.topics import ALL_TOPICS

log = logging.getLogger(__name__)


async def broker_reachable(settings: Settings) -> bool:
    """The broker answers a metadata request now."""
    client = AIOKafkaClient(bootstrap_servers=settings.kafka_bootstrap)
    try:
        await client.bootstrap()
        return True
    except KafkaConnectionError:
        return False
    finally:
        await client.close()


async def wait_for_broker(settings: Settings, timeout_s: float | None = None, poll_s: float = 1.0) -> None:
    """Return once the broker answers; raise ``KafkaConnectionError`` after ``timeout_s``
    (``settings.broker_wait_s`` by default). A broker restart takes seconds: a worker starting
    meanwhile waits instead of crashing."""
    timeout_s = settings.broker_wait_s if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    warned = False
    while not await broker_reachable(settings):
        if time.monotonic() >= deadline:
            raise KafkaConnectionError(f"broker {settings.kafka_bootstrap} unreachable for {timeout_s:.0f}s")
        if not warned:
            log.warning("broker %s unreachable: waiting up to %.0fs for it", settings.kafka_bootstrap, timeout_s)
            warned = True
        await asyncio.sleep(poll_s)
    if warned:
        log.info("broker %s reachable again", settings.kafka_bootstrap)


async def ensure_topics(settings: Settings, *, stages: Sequence[str] = ()) -> None:
    """Create every memstream topic with the configured partitions (idempotent), and the compacted
    changelog topics of the tables that workers of ``stages`` keep.

    A worker creates its changelogs before it subscribes: a topic created after the consumer read
    its metadata stays unassigned until the next metadata refresh (5 minutes), and meanwhile faust
    fails every write to that table ("changelog topic ... has 0 partitions")."""
    deadline = time.monotonic() + settings.broker_wait_s
    while True:
        await wait_for_broker(settings, max(0.0, deadline - time.monotonic()))
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
            # Gone again between the wait and the admin request (a restart in progress).
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(1.0)
        finally:
            await admin.close()
