"""Creating the topics on the broker (their names: ``schemas.topics``)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Sequence

from aiokafka import AIOKafkaClient
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAlreadyExistsError

from memstream.config import Settings
from memstream.schemas.topics import ALL_TOPICS, COMPACTED_TOPICS, Topic
from memstream.streams.kafka_options import client_options
from memstream.topology import changelog_topics

log = logging.getLogger(__name__)


async def broker_reachable(settings: Settings) -> bool:
    """The broker answers a metadata request now."""
    client = AIOKafkaClient(**client_options(settings))
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
            log.warning(
                "broker %s unreachable (down, or refusing these credentials): waiting up to %.0fs for it",
                settings.kafka_bootstrap,
                timeout_s,
            )
            warned = True
        await asyncio.sleep(poll_s)
    if warned:
        log.info("broker %s reachable again", settings.kafka_bootstrap)


def new_topics(settings: Settings, names: Sequence[str], configs: dict[str, dict[str, str]]) -> list[NewTopic]:
    """The create requests of ``names``: the configured partitions and replication factor."""
    return [
        NewTopic(
            name,
            num_partitions=settings.topic_partitions,
            replication_factor=settings.topic_replication_factor,
            topic_configs=configs[name],
        )
        for name in names
    ]


def topic_configs(settings: Settings, stages: Sequence[str] = ()) -> dict[str, dict[str, str]]:
    """The broker config of every memstream topic and of the changelogs that workers of ``stages``
    keep (full names).

    Deleted by age: the topics that carry raw text (nothing else removes it after a forget).
    Compacted: the audit topic and the changelogs, which must not lose a conversation's latest
    state however old; ``max.compaction.lag.ms`` bounds how long a replaced record (a window before
    a forget scrubbed it) stays readable. A changelog keeps a tombstone (an evicted conversation's
    entry) ``topic_segment_s`` after compaction, not Kafka's day: evictions would otherwise grow it
    for a day before the first goes; a worker restoring a table reads it within that. The record's and
    the audit's tombstones keep Kafka's day (a rebuild reads the whole record). Every one:
    ``min.insync.replicas`` from the settings (an acks=all write, which every memstream producer
    makes, needs that many replicas to have it)."""
    retention_ms = str(int(settings.topic_retention_s * 1000))
    segment_ms = str(int(settings.topic_segment_s * 1000))
    size = str(settings.max_message_bytes)
    insync = str(settings.topic_min_insync_replicas)
    compacted = {
        "cleanup.policy": "compact",
        "max.compaction.lag.ms": retention_ms,
        "max.message.bytes": size,
        "min.insync.replicas": insync,
    }
    deleted = {
        "cleanup.policy": "delete",
        "retention.ms": retention_ms,
        "segment.ms": segment_ms,
        "max.message.bytes": size,
        "min.insync.replicas": insync,
    }
    configs = {
        settings.topic(name): dict(compacted) if name in COMPACTED_TOPICS else dict(deleted) for name in ALL_TOPICS
    }
    # Keyed per budget window: the windows before the last two decide nothing, so they expire.
    window_ms = str(int(settings.llm_budget_window_s * 1000))
    configs[settings.topic(Topic.LLM_USAGE)].update(
        {"cleanup.policy": "compact,delete", "retention.ms": str(2 * int(window_ms)), "segment.ms": window_ms}
    )
    for full in changelog_topics(settings.topic_prefix, stages):
        configs[full] = {**compacted, "delete.retention.ms": segment_ms}
    return configs


async def ensure_topics(settings: Settings, *, stages: Sequence[str] = ()) -> None:
    """Create every memstream topic with the configured partitions, replication and retention
    (idempotent), and the compacted changelog topics of the tables that workers of ``stages`` keep;
    topics that exist with another retention get the configured one. An existing topic keeps its
    replicas (adding some is a partition reassignment): it is logged, and its min.insync.replicas is
    kept within them, so that it stays writable.

    A worker creates its changelogs before it subscribes: a topic created after the consumer read
    its metadata stays unassigned until the next metadata refresh (5 minutes), and meanwhile faust
    fails every write to that table ("changelog topic ... has 0 partitions")."""
    configs = topic_configs(settings, stages)
    mine = [settings.topic(name) for name in ALL_TOPICS] + changelog_topics(settings.topic_prefix, stages)
    deadline = time.monotonic() + settings.broker_wait_s
    while True:
        await wait_for_broker(settings, max(0.0, deadline - time.monotonic()))
        admin = AIOKafkaAdminClient(**client_options(settings))
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            wanted = new_topics(settings, [full for full in mine if full not in existing], configs)
            if wanted:
                try:
                    await admin.create_topics(wanted)
                except TopicAlreadyExistsError:
                    pass
                log.info("created topics: %s", ", ".join(t.name for t in wanted))
                await _wait_listed(admin, {t.name: t.num_partitions for t in wanted}, deadline)
            present = [full for full in mine if full in existing]
            if present:
                replicas = _replicas(await admin.describe_topics(present))
                _cap_insync(settings, configs, replicas)
            await _align_retention(admin, present, configs)
            return
        except (KafkaError, asyncio.TimeoutError) as e:
            # Gone again between the wait and the admin request (a restart in progress), or, in a
            # cluster, the request drew a broker that is down (each goes to a random one; a create
            # sent to a controller killed and not yet fenced times out instead): again.
            retriable = isinstance(e, asyncio.TimeoutError) or e.retriable
            if not retriable or time.monotonic() >= deadline:
                raise
            log.info("topic set-up: %s; trying again", e)
            await asyncio.sleep(1.0)
        finally:
            await admin.close()


async def _wait_listed(admin: AIOKafkaAdminClient, partitions: dict[str, int], deadline: float) -> None:
    """Until the metadata lists each created topic whole. A create returns once the controller has
    the topic; a broker's metadata can lag behind (a broker still loading its logs, a cluster's
    followers), and a consumer that joins its group meanwhile is assigned none of the topic's
    partitions until its next metadata refresh, 5 minutes later."""
    while unlisted := unlisted_topics(await admin.describe_topics(list(partitions)), partitions):
        if time.monotonic() >= deadline:
            raise asyncio.TimeoutError(f"created topics not in the metadata yet: {', '.join(unlisted)}")
        await asyncio.sleep(0.2)


def unlisted_topics(described: list[dict], partitions: dict[str, int]) -> list[str]:
    """The topics of ``partitions`` (name -> partition count) that ``described`` (metadata) lacks,
    lists in error, short of partitions, or with a partition without a leader."""
    listed = {
        topic["topic"]
        for topic in described
        if topic.get("error_code", 0) == 0
        and len(topic.get("partitions") or ()) >= partitions.get(topic["topic"], 1)
        and all(p.get("error_code", 0) == 0 and p.get("leader", -1) >= 0 for p in topic["partitions"])
    }
    return sorted(set(partitions) - listed)


def _replicas(described: list[dict]) -> dict[str, int]:
    """The replication factor of each described topic (its least replicated partition)."""
    return {
        topic["topic"]: min(len(p["replicas"]) for p in topic["partitions"])
        for topic in described
        if topic.get("partitions")
    }


def _cap_insync(settings: Settings, configs: dict[str, dict[str, str]], replicas: dict[str, int]) -> None:
    """Existing topics with fewer replicas than configured: logged, and min.insync.replicas kept at
    most their replica count (more would refuse every acks=all write)."""
    fewer = sorted(name for name, n in replicas.items() if n < settings.topic_replication_factor)
    if not fewer:
        return
    log.warning(
        "topics with fewer replicas than MEMSTREAM_TOPIC_REPLICATION_FACTOR=%d (made before it was set; "
        "a partition reassignment adds replicas): %s",
        settings.topic_replication_factor,
        ", ".join(f"{name} ({replicas[name]})" for name in fewer),
    )
    for name in fewer:
        wanted = int(configs[name]["min.insync.replicas"])
        configs[name]["min.insync.replicas"] = str(min(wanted, replicas[name]))


async def _align_retention(admin: AIOKafkaAdminClient, names: list[str], configs: dict[str, dict[str, str]]) -> None:
    """Topics created before retention was configured (or with another one) get the configured
    config. AlterConfigs replaces a topic's whole config, so the whole wanted config is sent."""
    if not names:
        return
    described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names])
    current: dict[str, dict[str, str]] = {}
    for response in described:
        for resource in response.resources:
            _code, _message, _type, name, entries = resource[:5]
            current[name] = {entry[0]: entry[1] for entry in entries}
    changes = []
    for name in names:
        want = configs[name]
        if any(current.get(name, {}).get(k) != v for k, v in want.items()):
            changes.append(ConfigResource(ConfigResourceType.TOPIC, name, configs=want))
    if changes:
        await admin.alter_configs(changes)
        log.info("set retention on topics: %s", ", ".join(c.name for c in changes))
