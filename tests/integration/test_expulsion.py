"""An expelled worker, on a real broker: a group member whose event loop is too busy to heartbeat
past the session timeout, while its threads go on (so the freeze fence, a thread, sees no freeze),
is dropped by the group coordinator; at its next heartbeat aiokafka resets its generation and
rejoins on its own, and is assigned its partition again. faust counts as new (and recovers tables
for) only partitions missing from the assignment before; the expelled worker never saw the
assignment the group made without it, so a partition that was elsewhere meanwhile and came back
keeps the table it had (the stale-table hazard behind a duplicated memory write). The hook
``faust_compat.watch_expulsion`` must see that reset (the worker then restarts); a member that kept
its session must not trip it. (tests/streams/test_expulsion.py covers the hook's own logic.)"""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from memstream.config import Settings
from memstream.streams.kafka_options import client_options
from memstream.streams.runtime import faust_compat

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_S = 6.0


def as_faust_app(consumer: AIOKafkaConsumer) -> SimpleNamespace:
    """Where faust keeps the aiokafka consumer the hook reaches (app.consumer's thread)."""
    return SimpleNamespace(consumer=SimpleNamespace(_thread=SimpleNamespace(_ensure_consumer=lambda: consumer)))


async def joined_member(settings: Settings, topic: str, group: str) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(
        topic,
        **client_options(settings),
        group_id=group,
        session_timeout_ms=int(SESSION_TIMEOUT_S * 1000),
        heartbeat_interval_ms=500,
        enable_auto_commit=False,
    )
    await consumer.start()
    deadline = time.monotonic() + 60
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the member never got its partition"
        await consumer.getmany(timeout_ms=200)
    return consumer


async def expulsions(
    settings: Settings, *, busy_s: float, watch_s: float = 3 * SESSION_TIMEOUT_S
) -> tuple[list[str], set, int]:
    """Join a group of one, block the loop for ``busy_s`` (time.sleep: every thread but the loop's
    runs), then poll for up to ``watch_s`` (less once expelled and rejoined); the hook's calls, the
    assignment after, and the generations seen."""
    topic, group = f"expel-{uuid.uuid4().hex[:8]}", f"expel-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(**client_options(settings))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    consumer = await joined_member(settings, topic, group)
    seen: list[str] = []
    try:
        assert faust_compat.watch_expulsion(as_faust_app(consumer), seen.append)
        first_generation = consumer._coordinator.generation
        time.sleep(busy_s)  # the point: a loop too busy to heartbeat
        deadline = time.monotonic() + watch_s
        while time.monotonic() < deadline and not (seen and consumer.assignment()):
            await consumer.getmany(timeout_ms=200)
        generations = consumer._coordinator.generation - first_generation
        return seen, set(consumer.assignment()), generations
    finally:
        await consumer.stop()


def test_a_member_too_busy_to_heartbeat_is_expelled_rejoins_by_itself_and_the_hook_sees_it(kafka: Settings) -> None:
    seen, assignment, generations = asyncio.run(expulsions(kafka, busy_s=SESSION_TIMEOUT_S * 1.6))
    assert len(seen) == 1, seen
    assert "went on without member" in seen[0]
    # The hazard: aiokafka rejoined in a new generation and holds the partition again.
    assert assignment and generations >= 1


def test_a_member_that_kept_its_session_is_not_called_expelled(kafka: Settings) -> None:
    # A session kept through the busy spell is not expired later: one more session timeout of
    # heartbeats (a dozen) would show any expulsion, or the hook calling one that was not.
    seen, assignment, generations = asyncio.run(
        expulsions(kafka, busy_s=SESSION_TIMEOUT_S * 0.3, watch_s=SESSION_TIMEOUT_S)
    )
    assert seen == [] and assignment and generations == 0
