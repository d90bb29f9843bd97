"""A worker starts while one broker of three is down (issue 46: brokers restart one at a time).

A broker killed a moment ago stays in the cluster's metadata until the controller fences it (about
9 s after its last heartbeat here). At every start faust declares its topics (its leader-assignor
topic first); each declaration sends a metadata request to the first broker the client knows and a
CreateTopics to the controller the reply names, which KRaft draws at random among the brokers not
fenced yet. Either could be the dead node: aiokafka raised ``NodeNotReadyError``, faust did not try
again, and the worker exited (``bench chaos --cluster`` counted it as a crash).
``faust_compat.retry_topic_declarations`` tries them again on fresh metadata. Topic set-up before
faust starts (``ensure_topics``) with a broker down is ``test_kafka_cluster.py``'s."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import faust
import pytest

from memstream.bench.deployment import Deployment
from memstream.client import MemoryClient
from memstream.config import Settings
from memstream.schemas import Turn
from memstream.streams import runtime
from memstream.streams.runtime import faust_compat
from memstream.streams.runtime.app import kafka_config
from memstream.streams.topics import ensure_topics

from .conftest import KafkaCluster

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

VICTIM = 2
DECLARATIONS = 12  # each on a fresh client: a fresh draw of the controller
TENANT = "acme"
FRESH_S = 60.0
# The worker has set up its topics and loads its models: faust starts a few seconds later, while the
# broker killed now is still in the metadata (a worker killed earlier spends that window loading).
LOADING = "memstream.streams.services"


def test_faust_declares_its_topics_while_a_broker_is_down(
    kafka_cluster: Settings, kafka_cluster_nodes: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Declarations of topics that exist (what every restart sends), each from a fresh producer, right
    after a kill -9: without the retry about 5 in 9 of them fail with ``NodeNotReadyError``."""
    settings = kafka_cluster.model_copy(update={"topic_prefix": f"bd{uuid.uuid4().hex[:8]}"})
    topic = f"{settings.topic_prefix}-declared"

    async def declare(rounds: int) -> None:
        for i in range(rounds):
            app = faust.App(f"{settings.topic_prefix}-{i}", **kafka_config(settings), web_enabled=False)
            faust_compat.retry_topic_declarations(app, 60.0)
            await app.producer.start()
            try:
                await app.producer.create_topic(topic, settings.topic_partitions, settings.topic_replication_factor)
            finally:
                await app.producer.stop()

    asyncio.run(declare(1))  # created while all three are up
    kafka_cluster_nodes.kill(VICTIM)
    killed = time.monotonic()
    try:
        with caplog.at_level(logging.INFO, logger=faust_compat.log.name):
            asyncio.run(declare(DECLARATIONS))  # raised NodeNotReadyError before the retry
        retried = sum("trying again" in r.getMessage() for r in caplog.records)
        print(f"\n{DECLARATIONS} declarations within {time.monotonic() - killed:.1f}s of the kill, {retried} retried")
    finally:
        kafka_cluster_nodes.start(VICTIM)


def said(conversation: str, text: str) -> Turn:
    return Turn(
        tenant_id=TENANT,
        conversation_id=conversation,
        session_id="S1",
        turn_id="D1:1",
        speaker="Nora",
        text=text,
        event_time=datetime(2024, 5, 1, 9, 30, tzinfo=timezone.utc),
    )


def retrievable(client: MemoryClient, turn: Turn) -> bool:
    """Asked (evidence only) until the query stage finds the turn's fresh point, or ``FRESH_S``."""
    deadline = time.monotonic() + FRESH_S
    while time.monotonic() < deadline:
        reply = client.ask(turn.text, tenant_id=TENANT, conversation_id=turn.conversation_id, answer=False)
        if any(e.kind == "turn" and turn.turn_id in e.turn_ids for e in reply.evidence):
            return True
        time.sleep(0.3)
    return False


def test_a_worker_starts_and_runs_while_a_broker_is_down(
    kafka_cluster: Settings, kafka_cluster_nodes: KafkaCluster, tmp_path: Path
) -> None:
    pipe = Deployment(kafka_cluster, tmp_path / "dep", {"MEMSTREAM_STM_IDLE_S": "600", "MEMSTREAM_LOG_LEVEL": "info"})
    asyncio.run(ensure_topics(pipe.settings, stages=pipe.settings.stage_list()))  # a restart: its changelogs are there
    port = int(pipe.env["MEMSTREAM_METRICS_PORT"])
    worker = runtime.spawn_worker(pipe.env, pipe.settings.data_dir / "logs" / "worker.log", metrics_port=port)
    pipe.workers.append(worker)
    try:
        deadline = time.monotonic() + 60
        while LOADING not in worker.log_text() and time.monotonic() < deadline and worker.alive():
            time.sleep(0.05)
        kafka_cluster_nodes.kill(VICTIM)
        runtime.wait_worker_ready(worker)  # raises if it exited (NodeNotReadyError at start-up)
        turn = said("down-1", "I adopted a retired greyhound called Biscuit this morning.")
        with MemoryClient(pipe.settings) as client:
            client.remember([turn])
            assert retrievable(client, turn), f"no fresh point within {FRESH_S:.0f}s:\n{worker.log_tail()}"
        assert worker.alive(), worker.log_tail()
        assert "exiting for a restart" not in worker.log_text()
    finally:
        pipe.stop_workers()
        kafka_cluster_nodes.start(VICTIM)
