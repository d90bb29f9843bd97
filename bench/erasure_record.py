"""The erasure bench's checks of the durable record (``<prefix>.record``) and of a backup taken
before the forgets: what of a forgotten turn the record's live view still holds, what a restore of
that backup holds, and how long the record's superseded versions (the forgotten text under a key
that now ends in a tombstone) stay readable until the log cleaner compacts them away."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from memstream.bench.deployment import Deployment
from memstream.config import Settings
from memstream.processors.forgetting.forget import BY_TURNS
from memstream.processors.write.index import CARDS, PROFILES, SCENES, TRIGGERS, TURNS
from memstream.schemas.base import base_turn_id
from memstream.schemas.record import StoredPoint, record_key
from memstream.schemas.topics import Topic
from memstream.streams.backup import BackupManifest, take_backup
from memstream.streams.kafka_options import client_options
from memstream.streams.lag import partitions_of
from memstream.streams.rebuild import Rebuild, RebuildReport
from memstream.streams.services import Services
from memstream.streams.topics import topic_configs

Gone = Mapping[tuple[str, str], set[str]]  # (tenant, conversation) -> forgotten turn ids
HOSTS = (CARDS, SCENES)  # the collections whose points triggers hang on
# Compaction made to run within seconds on the bench's own record topic: segments roll after a
# second, and a dirty segment is cleaned at once (the deployment default: after the retention).
COMPACT_SOON = {"segment.ms": "1000", "max.compaction.lag.ms": "1000", "min.cleanable.dirty.ratio": "0.01"}
# The key of the tombstones that roll each partition's active segment (the cleaner never compacts
# the active one, and a segment rolls only when something is appended): no point has it.
ROLL_KEY = record_key("bench", CARDS, "00000000-0000-0000-0000-000000000000")


def backup_between(dep: Deployment, folder: Path, restart: Callable[[], Any]) -> BackupManifest:
    """A backup of the embedded store, which the running worker holds: the worker stopped (its
    windows and buffers are in their changelogs), the store backed up, ``restart`` called."""
    dep.stop_workers()
    if folder.exists():
        shutil.rmtree(folder)
    manifest = take_backup(dep.settings, folder)
    restart()
    return manifest


def derives_from(payload: Mapping[str, Any], ids: set[str]) -> bool:
    """The point names a forgotten turn (or a chunk of one) in ``turn_id`` or ``turn_ids``."""
    named = set(payload.get("turn_ids") or ())
    if payload.get("turn_id"):
        named.add(payload["turn_id"])
    return any(t in ids or base_turn_id(t) in ids for t in named)


def _forgotten(point: StoredPoint, gone: Gone) -> set[str]:
    return gone.get((point.tenant_id, str(point.payload.get("conversation_id"))), set())


def record_copies(points: Iterable[StoredPoint], gone: Gone) -> dict[str, int]:
    """The record's live view counted as the bench counts the store: per collection, the points that
    derive from a forgotten turn, and the triggers of a conversation with forgotten turns whose
    card or scene is gone."""
    points = list(points)
    out = dict.fromkeys((TURNS, CARDS, SCENES, PROFILES, TRIGGERS), 0)
    hosts = {(p.tenant_id, p.point_id) for p in points if p.collection in HOSTS}
    for p in points:
        ids = _forgotten(p, gone)
        if not ids:
            continue
        if p.collection == TRIGGERS:
            out[TRIGGERS] += (p.tenant_id, p.payload.get("host_id")) not in hosts
        elif p.collection in BY_TURNS and derives_from(p.payload, ids):
            out[p.collection] += 1
    return out


def forgotten_versions(messages: Iterable[tuple[bytes | None, bytes | None]], gone: Gone) -> int:
    """Messages of the record, every version and not only each key's latest, that hold text of a
    forgotten turn: points deriving from one, and the triggers of such a card or scene. With the
    live view clean (record_copies 0), each is under a key that now ends in a tombstone: the log
    cleaner removes it."""
    points = [StoredPoint.from_bytes(value) for _, value in messages if value is not None]
    derived = [p for p in points if p.collection in BY_TURNS and derives_from(p.payload, _forgotten(p, gone))]
    hosts = {(p.tenant_id, p.point_id) for p in derived if p.collection in HOSTS}
    triggers = [p for p in points if p.collection == TRIGGERS and (p.tenant_id, p.payload.get("host_id")) in hosts]
    return len(derived) + len(triggers)


async def compact_soon(settings: Settings) -> dict[str, str]:
    """The record topic's config with COMPACT_SOON. AlterConfigs replaces a topic's whole config:
    the deployment's own config is sent with it."""
    topic = settings.topic(Topic.RECORD)
    config = {**topic_configs(settings)[topic], **COMPACT_SOON}
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=config)])
    finally:
        await admin.close()
    return config


async def roll_segments(settings: Settings) -> None:
    """A tombstone of ROLL_KEY on every partition of the record: each active segment older than
    segment.ms is rolled, so what it holds can be compacted."""
    topic = settings.topic(Topic.RECORD)
    partitions = (await partitions_of(settings, topic))[topic]
    producer = AIOKafkaProducer(**client_options(settings), acks="all")
    await producer.start()
    try:
        for p in sorted(partitions):
            await producer.send_and_wait(topic, key=ROLL_KEY.encode(), value=None, partition=p)
    finally:
        await producer.stop()


def wait_compacted(
    dep: Deployment, gone: Gone, timeout_s: float, *, poll_s: float = 1.0
) -> tuple[int, int, float, dict[str, str]]:
    """(forgotten versions before, after, seconds waited, the topic config set): compaction made
    to run soon, the segments rolled, then the raw record read until no forgotten version is left
    or ``timeout_s`` passed."""
    before = after = forgotten_versions(dep.read_topic(Topic.RECORD, timeout_s=120.0), gone)
    started = time.monotonic()
    config = asyncio.run(compact_soon(dep.settings))
    while after and time.monotonic() - started < timeout_s:
        time.sleep(2 * int(COMPACT_SOON["segment.ms"]) / 1000)  # the active segments are older than segment.ms
        asyncio.run(roll_segments(dep.settings))
        # The cleaner looks for work every log.cleaner.backoff.ms (15 s by default); a second between
        # two looks at the record is the latest compaction shows. (A 1 s backoff on the test broker
        # found it sooner but cost that broker 2 s of CPU a minute with the CI run's 4,800 partitions.)
        time.sleep(poll_s)
        after = forgotten_versions(dep.read_topic(Topic.RECORD, timeout_s=120.0), gone)
    return before, after, round(time.monotonic() - started, 1), config


def restore_beside(dep: Deployment, folder: Path) -> RebuildReport:
    """The backup restored into a new generation of the store, not switched to (the workers keep
    the one they have): the backup's points, then the record from the backup's positions, then the
    backup's points the record no longer holds deleted."""
    return Rebuild(dep.settings, Services(dep.settings).embedder).run(backup=folder)
