"""Kafka client quotas for producers that write to the topics directly (docs/operations.md "Many
tenants"): set with kafka-configs (``infra/kafka/kafka.sh configs``) on the broker memstream starts,
a producer under a byte-rate quota is throttled by the broker, another client id is not."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from memstream.config import Settings
from memstream.streams.kafka_options import client_options

pytestmark = pytest.mark.integration

KAFKA_SH = Path(__file__).resolve().parents[2] / "infra" / "kafka" / "kafka.sh"
RATE = 32 * 1024  # bytes per second
# The broker measures a client's rate over its quota window (11 one-second samples by default) and
# throttles what goes over: 18 s worth of the quota at once takes about 18 - 11 = 7 s.
SENT = 18 * RATE


def configs(settings: Settings, *args: str) -> str:
    port = settings.kafka_bootstrap.split(",")[0].rsplit(":", 1)[1]
    done = subprocess.run(
        ["bash", str(KAFKA_SH), "configs", *args],
        env={**os.environ, "MEMSTREAM_KAFKA_PORT": port},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def seconds_to_send(settings: Settings, topic: str, client_id: str) -> float:
    async def go() -> float:
        producer = AIOKafkaProducer(**client_options(settings), client_id=client_id, acks="all", linger_ms=5)
        await producer.start()
        try:
            value = os.urandom(8 * 1024)
            started = time.monotonic()
            futures = [await producer.send(topic, value) for _ in range(SENT // len(value))]
            await asyncio.gather(*futures)
            return time.monotonic() - started
        finally:
            await producer.stop()

    return asyncio.run(go())


def test_a_producer_over_its_client_quota_is_throttled_and_another_is_not(kafka):
    throttled, free = f"tenant-flood-{uuid.uuid4().hex[:8]}", f"tenant-calm-{uuid.uuid4().hex[:8]}"
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    entity = ["--entity-type", "clients", "--entity-name", throttled]
    configs(kafka, "--alter", "--add-config", f"producer_byte_rate={RATE}", *entity)
    try:
        described = configs(kafka, "--describe", *entity)
        assert f"producer_byte_rate={float(RATE)}" in described or f"producer_byte_rate={RATE}" in described
        calm = seconds_to_send(kafka, topic, free)
        flood = seconds_to_send(kafka, topic, throttled)
    finally:
        configs(kafka, "--alter", "--delete-config", "producer_byte_rate", *entity)
    # Unthrottled, SENT takes well under a second.
    assert flood >= 4.0, flood
    assert calm < flood / 2, (calm, flood)
